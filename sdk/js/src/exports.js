// The component's exports, implemented once on top of the registry, so plugin authors never
// touch generated bindings. `capsule-js build` re-exports these from the built entry.

import { Context, InputError, InputNeeded } from './context.js';
import { NotFound, registry } from './registry.js';
import { match } from './uri.js';


function message(e) {
  if (e instanceof Error) return e.message ? `${e.name}: ${e.message}` : e.name;
  return String(e);
}

function inputRequired(needed) {
  return { requests: needed.requests, state: needed.state };
}

function content(value) {
  if (typeof value === 'string') return { tag: 'text', val: value };
  switch (value?.kind) {
    case 'image':
    case 'audio':
      return { tag: value.kind, val: { data: value.data, mimeType: value.mimeType } };
    case 'resource-link':
      return { tag: 'resource-link', val: { uri: value.uri, name: value.name, description: value.description, mimeType: value.mimeType } };
    default:
      // `undefined` (and functions) have no JSON: their text, rather than a value the
      // host cannot take.
      return { tag: 'text', val: JSON.stringify(value) ?? String(value) };
  }
}

function contents(uri, body, mimeType) {
  if (body instanceof Uint8Array) return { uri, mimeType, body: { tag: 'blob', val: body } };
  if (typeof body === 'string') return { uri, mimeType, body: { tag: 'text', val: body } };
  return { uri, mimeType: mimeType ?? 'application/json', body: { tag: 'text', val: JSON.stringify(body) } };
}

// A failure reported as the request's error (the WIT `error` variant).
function failure(e) {
  if (e instanceof NotFound) return { tag: 'not-found', val: e.message };
  if (e instanceof InputError || e instanceof TypeError) return { tag: 'invalid-params', val: message(e) };
  return { tag: 'failed', val: message(e) };
}

function toolResult(tool, value) {
  if (tool.outputSchema) {
    const text = JSON.stringify(tool.wrap ? { result: value } : value);
    return { content: [{ tag: 'text', val: text }], structuredContent: text, isError: false };
  }
  const items = value === undefined || value === null ? [] : Array.isArray(value) ? value : [value];
  return { content: items.map(content), isError: false };
}

export const tools = {
  list() {
    return [...registry.tools.values()].map((t) => {
      const a = t.annotations;
      const annotated = Object.values(a).some((v) => v !== undefined) || t.title !== undefined;
      return {
        name: t.name,
        title: t.title,
        description: t.description,
        inputSchema: JSON.stringify(t.inputSchema),
        outputSchema: t.outputSchema ? JSON.stringify(t.outputSchema) : undefined,
        annotations: annotated ? { title: t.title, ...a } : undefined,
      };
    });
  },
  call(name, args, context) {
    const tool = registry.tools.get(name);
    if (!tool) throw { tag: 'not-found', val: `no tool ${name}` };
    try {
      return { tag: 'complete', val: toolResult(tool, tool.handler(JSON.parse(args), new Context(context))) };
    } catch (e) {
      if (e instanceof InputNeeded) return { tag: 'input-required', val: inputRequired(e) };
      console.error(e instanceof Error && e.stack ? e.stack : message(e));
      return { tag: 'complete', val: { content: [{ tag: 'text', val: message(e) }], isError: true } };
    }
  },
};

export const resources = {
  list() {
    return [...registry.resources.values()].map((r) => ({
      uri: r.uri, name: r.name, title: r.title, description: r.description, mimeType: r.mimeType,
    }));
  },
  templates() {
    return [...registry.templates.values()].map((t) => ({
      uriTemplate: t.uri, name: t.name, title: t.title, description: t.description, mimeType: t.mimeType,
    }));
  },
  read(uri, context) {
    const ctx = new Context(context);
    try {
      const fixed = registry.resources.get(uri);
      if (fixed) return { tag: 'complete', val: [contents(uri, fixed.handler(ctx), fixed.mimeType)] };
      for (const t of registry.templates.values()) {
        const vars = match(t.uri, uri);
        if (vars) return { tag: 'complete', val: [contents(uri, t.handler(vars, ctx), t.mimeType)] };
      }
      throw new NotFound(`no resource ${uri}`);
    } catch (e) {
      if (e instanceof InputNeeded) return { tag: 'input-required', val: inputRequired(e) };
      throw failure(e);
    }
  },
};

function promptMessage(m) {
  // A string or a piece of content (`image(...)`, `resourceLink(...)`) is the user's.
  const msg = typeof m === 'string' || m?.kind !== undefined ? { role: 'user', content: m } : m;
  if (msg?.role !== 'user' && msg?.role !== 'assistant') {
    throw new Error('a prompt returns a string, content, user(...) or assistant(...) messages, or an array of them');
  }
  return { role: msg.role, content: content(msg.content) };
}

export const prompts = {
  list() {
    return [...registry.prompts.values()].map((p) => ({
      name: p.name, title: p.title, description: p.description, arguments: p.arguments,
    }));
  },
  get(name, args, context) {
    const prompt = registry.prompts.get(name);
    if (!prompt) throw { tag: 'not-found', val: `no prompt ${name}` };
    try {
      const value = prompt.handler(Object.fromEntries(args), new Context(context));
      const messages = Array.isArray(value) ? value : [value];
      return { tag: 'complete', val: { messages: messages.map(promptMessage) } };
    } catch (e) {
      if (e instanceof InputNeeded) return { tag: 'input-required', val: inputRequired(e) };
      throw failure(e);
    }
  },
};

export const completion = {
  complete(reference, argument, value, context) {
    const kind = reference.tag === 'prompt' ? 'prompt' : 'template';
    const handler = registry.completions.get(`${kind}\u0000${reference.val}\u0000${argument}`);
    if (!handler) return { values: [], hasMore: false };
    let values;
    try {
      values = [...handler(value, Object.fromEntries(context))].map(String);
    } catch (e) {
      throw failure(e);
    }
    return { values: values.slice(0, 100), total: values.length, hasMore: values.length > 100 };
  },
};

