// Matching a URI against an RFC 6570 template of the shapes Capsule accepts: `{var}`,
// `{+var}` and `{#var}`. The host has already routed the URI here; this recovers the values.

const EXPRESSION = /\{([+#]?)([A-Za-z0-9_]+)\}/g;
const cache = new Map();

function escape(text) {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function pattern(template) {
  let re = cache.get(template);
  if (re) return re;
  let source = '';
  let last = 0;
  const names = [];
  for (const m of template.matchAll(EXPRESSION)) {
    source += escape(template.slice(last, m.index));
    const [, operator, name] = m;
    names.push(name);
    if (operator === '') source += '([^/?#]*)';
    else if (operator === '+') source += '([\\s\\S]*?)';
    else source += '(?:#([\\s\\S]*?))?';
    last = m.index + m[0].length;
  }
  source += escape(template.slice(last));
  re = { regex: new RegExp(`^${source}$`), names };
  cache.set(template, re);
  return re;
}

/** The template's variables in `uri`, percent-decoded; null if it does not match. */
export function match(template, uri) {
  const { regex, names } = pattern(template);
  const m = regex.exec(uri);
  if (!m) return null;
  const out = {};
  names.forEach((name, i) => {
    out[name] = decodeURIComponent(m[i + 1] ?? '');
  });
  return out;
}

/** The variable names of a template. */
export function variables(template) {
  return [...template.matchAll(EXPRESSION)].map((m) => m[2]);
}
