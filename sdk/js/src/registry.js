// What a plugin provides, registered by `tool`, `resource`, `prompt` and `complete` when the
// plugin's module runs (once, when the component is built). Pure: no WIT imports.

import { isSchema, s } from './schema.js';
import { variables } from './uri.js';

const NAME = /^[A-Za-z0-9_.-]{1,128}$/;

export const registry = {
  tools: new Map(),
  resources: new Map(),
  templates: new Map(),
  prompts: new Map(),
  // `${kind}\u0000${target}\u0000${argument}` -> function(value, context)
  completions: new Map(),
};

function schemaOf(value, what) {
  if (value === undefined) return s.object({});
  if (!isSchema(value)) throw new TypeError(`${what} must be a schema built with s.*`);
  return value;
}

/**
 * Register a tool. `definition.input` is an `s.object(...)` schema for the arguments, and
 * `definition.output`, if given, the schema of its structured output. The handler gets the
 * arguments (already checked against the schema by the host) and a Context; it returns text,
 * content, or the structured output. A thrown error becomes a tool error with its message.
 */
export function tool(name, definition, handler) {
  if (!NAME.test(name)) throw new TypeError(`tool name ${JSON.stringify(name)} is not 1-128 of [A-Za-z0-9_.-]`);
  if (registry.tools.has(name)) throw new TypeError(`tool ${name} is registered twice`);
  if (typeof handler !== 'function') throw new TypeError(`tool ${name}: the handler is not a function`);
  const input = schemaOf(definition.input, `tool ${name}: input`);
  if (input.json.type !== 'object') throw new TypeError(`tool ${name}: input must be s.object(...)`);
  let output;
  let wrap = false;
  if (definition.output !== undefined) {
    output = schemaOf(definition.output, `tool ${name}: output`).json;
    if (output.type !== 'object') {
      // Structured content is an object: other results are wrapped, as FastMCP does.
      output = { type: 'object', properties: { result: output }, required: ['result'] };
      wrap = true;
    }
  }
  registry.tools.set(name, {
    name,
    title: definition.title,
    description: definition.description ?? '',
    inputSchema: input.json,
    outputSchema: output,
    wrap,
    annotations: {
      readOnlyHint: definition.readOnly,
      destructiveHint: definition.destructive,
      idempotentHint: definition.idempotent,
      openWorldHint: definition.openWorld,
    },
    handler,
  });
}

/**
 * Register a resource at `uri`, or a template when `uri` has `{variables}` (the handler gets
 * them as its first argument). The handler returns a string (text), a Uint8Array (a blob) or
 * JSON data; throw `notFound(...)` for a URI that does not exist.
 */
export function resource(uri, definition, handler) {
  const entry = {
    uri,
    name: definition.name ?? uri,
    title: definition.title,
    description: definition.description,
    mimeType: definition.mimeType,
    handler,
  };
  if (uri.includes('{')) registry.templates.set(uri, { ...entry, variables: variables(uri) });
  else registry.resources.set(uri, entry);
}

/**
 * Register a prompt. `definition.arguments` is an `s.object(...)` of `s.string()` properties
 * (optional ones with `.optional()`); the handler returns a string (one user message), a
 * message from `user()`/`assistant()`, or an array of them.
 */
export function prompt(name, definition, handler) {
  const args = schemaOf(definition.arguments, `prompt ${name}: arguments`).json;
  const required = new Set(args.required ?? []);
  const argumentsList = Object.entries(args.properties ?? {}).map(([arg, schema]) => {
    if (schema.type !== 'string') throw new TypeError(`prompt ${name}: argument ${arg} must be s.string() (prompt arguments are text)`);
    return { name: arg, description: schema.description, required: required.has(arg) };
  });
  registry.prompts.set(name, { name, title: definition.title, description: definition.description ?? '', arguments: argumentsList, handler });
}

/**
 * Register completion for `target.argument` of `target.prompt` or of the template
 * `target.template`. The function gets the partial value and the other arguments already
 * chosen, and returns suggestions, best first.
 */
export function complete(target, handler) {
  if ((target.prompt === undefined) === (target.template === undefined)) {
    throw new TypeError('complete() takes exactly one of prompt or template');
  }
  const kind = target.prompt !== undefined ? 'prompt' : 'template';
  registry.completions.set(`${kind}\u0000${target.prompt ?? target.template}\u0000${target.argument}`, handler);
}

/** A prompt message from the user. */
export const user = (content) => ({ role: 'user', content });
/** A prompt message from the model. */
export const assistant = (content) => ({ role: 'assistant', content });

/** Content: an image. */
export const image = (data, mimeType) => ({ kind: 'image', data, mimeType });
/** Content: an audio clip. */
export const audio = (data, mimeType) => ({ kind: 'audio', data, mimeType });
/** Content: a link to a resource the client may read later. */
export const resourceLink = (uri, name, options = {}) => ({ kind: 'resource-link', uri, name, ...options });

/** Thrown by a resource or prompt for something that does not exist. */
export class NotFound extends Error {
  constructor(message) {
    super(message);
    this.name = 'NotFound';
  }
}
