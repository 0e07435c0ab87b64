// Matching a URI against an RFC 6570 template of the shapes Capsule accepts: `{var}`,
// `{+var}` and `{#var}`. The host has already routed the URI here; this recovers the values
// exactly as the host and the Rust SDK do: each variable, from left to right, takes the
// shortest non-empty value that lets the rest match, and is percent-decoded (bytes that are
// not UTF-8 become U+FFFD).

// RFC 6570 varname: varchars (letters, digits, `_`, %XX) with single dots between them.
const VARCHARS = '(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})+';
const EXPRESSION = new RegExp(`\\{([+#]?)(${VARCHARS}(?:\\.${VARCHARS})*)\\}`, 'g');
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
    // Lazy groups: the leftmost variable is tried shortest first.
    if (operator === '') source += '([^/?#]+?)';
    else if (operator === '+') source += '([\\s\\S]+?)';
    else source += '#([\\s\\S]+?)';
    last = m.index + m[0].length;
  }
  source += escape(template.slice(last));
  re = { regex: new RegExp(`^${source}$`), names };
  cache.set(template, re);
  return re;
}

/** `%XX` escapes decoded as UTF-8, lossily: a URI is the client's, and may hold any bytes. */
export function percentDecode(text) {
  if (!text.includes('%')) return text;
  const bytes = [];
  const encoder = new TextEncoder();
  for (let i = 0; i < text.length; ) {
    if (text[i] === '%' && /^[0-9A-Fa-f]{2}$/.test(text.slice(i + 1, i + 3))) {
      bytes.push(parseInt(text.slice(i + 1, i + 3), 16));
      i += 3;
    } else {
      const char = String.fromCodePoint(text.codePointAt(i));
      bytes.push(...encoder.encode(char));
      i += char.length;
    }
  }
  return new TextDecoder().decode(new Uint8Array(bytes));
}

/** The template's variables in `uri`, percent-decoded; null if it does not match. */
export function match(template, uri) {
  const { regex, names } = pattern(template);
  const m = regex.exec(uri);
  if (!m) return null;
  const out = {};
  names.forEach((name, i) => {
    out[name] = percentDecode(m[i + 1]);
  });
  return out;
}

/** The variable names of a template. */
export function variables(template) {
  return [...template.matchAll(EXPRESSION)].map((m) => m[2]);
}
