// What a running call can do: log, report progress, see its mounts and caller, and ask the
// client for input. Asking works by replay: `ctx.elicit(...)` returns the answer when the host
// has it, and otherwise stops the call, which becomes an input-required result; when the
// client has answered, the host calls the handler again from the top and this time it returns.
// So a handler that asks must do nothing irreversible before its last question. The earlier
// rounds' answers travel in each round's state (answers.js), so a handler may ask one
// question after another.

import * as host from 'capsule:plugin/host@0.1.0';

import { decodeAnswers, encodeAnswers } from './answers.js';
import { isSchema } from './schema.js';

const LEVELS = ['debug', 'info', 'notice', 'warning', 'error', 'critical', 'alert', 'emergency'];

/** Thrown inside a handler to stop it until the client answers. */
export class InputNeeded {
  constructor(requests, state) {
    this.requests = requests;
    /** The answers given so far, for the next round. */
    this.state = state;
  }
}

/** The client answered in a way the plugin cannot use (or with an error). */
export class InputError extends Error {
  constructor(message) {
    super(message);
    this.name = 'InputError';
  }
}

export class Context {
  constructor(wit) {
    this.responses = decodeAnswers(wit?.state);
    for (const r of wit?.responses ?? []) this.responses.set(r.key, r.response);
    const caps = wit?.client ?? {};
    /** What the client can do for this request. */
    this.client = {
      elicitation: !!caps.elicitationForm,
      elicitationUrl: !!caps.elicitationUrl,
      sampling: !!caps.sampling,
      roots: !!caps.roots,
    };
    this.asked = 0;
  }

  /** Log at one of the MCP levels (`debug` … `emergency`). */
  log(level, message, logger) {
    if (!LEVELS.includes(level)) throw new TypeError(`unknown log level ${level}; one of ${LEVELS.join(', ')}`);
    host.log(level, logger, String(message));
  }
  debug(message) {
    this.log('debug', message);
  }
  info(message) {
    this.log('info', message);
  }
  warning(message) {
    this.log('warning', message);
  }
  error(message) {
    this.log('error', message);
  }
  /** Report progress; sent when the client gave a progress token. */
  progress(progress, total, message) {
    host.progress(progress, total, message);
  }
  /** True once the client has cancelled this request. */
  cancelled() {
    return host.cancelled();
  }
  /** Say the plugin's `tools`, `resources` or `prompts` list may have changed. */
  listChanged(kind) {
    host.listChanged(kind);
  }
  /** Say the contents of a resource this plugin serves changed. */
  resourceUpdated(uri) {
    host.resourceUpdated(uri);
  }
  /** The directories this call may use: `{ path, name, writable }`. */
  mounts() {
    return host.mounts();
  }
  /** Who the request comes from: `{ tenant, principal?: { subject, client, scopes } }`. */
  caller() {
    return host.caller();
  }

  answer(key, kind, request) {
    const k = key ?? `${kind}-${this.asked}`;
    this.asked += 1;
    if (this.responses.has(k)) return this.responses.get(k);
    throw new InputNeeded([{ key: k, request }], this.responses.size > 0 ? encodeAnswers(this.responses) : undefined);
  }

  /**
   * Ask the user to fill a form described by `schema` (an `s.object` of primitives, or a JSON
   * Schema object). Returns `{ action: 'accept' | 'decline' | 'cancel', content }`.
   */
  elicit(message, schema, key) {
    const json = isSchema(schema) ? schema.json : schema;
    const answer = this.answer(key, 'elicit', { tag: 'elicit-form', val: { message, requestedSchema: JSON.stringify(json) } });
    if (answer.tag === 'invalid') throw new InputError(answer.val);
    if (answer.tag !== 'elicitation') throw new InputError('the client answered a form with something else');
    const { action, content } = answer.val;
    return { action, content: action === 'accept' && content ? JSON.parse(content) : undefined };
  }

  /** Ask the client's model to answer `prompt`; returns the text it sampled. */
  sample(prompt, options = {}) {
    const request = {
      messages: [{ role: 'user', content: { tag: 'text', val: prompt } }],
      systemPrompt: options.systemPrompt,
      maxTokens: options.maxTokens ?? 1000,
      temperature: options.temperature,
      stopSequences: options.stopSequences ?? [],
    };
    const answer = this.answer(options.key, 'sample', { tag: 'sample', val: request });
    if (answer.tag === 'invalid') throw new InputError(answer.val);
    if (answer.tag !== 'sampling') throw new InputError('the client answered a sampling request with something else');
    if (answer.val.content.tag !== 'text') throw new InputError("the client's model answered with something other than text");
    return answer.val.content.val;
  }

  /** The client's roots: `[{ uri, name }]`. */
  roots(key) {
    const answer = this.answer(key, 'roots', { tag: 'list-roots' });
    if (answer.tag === 'invalid') throw new InputError(answer.val);
    if (answer.tag !== 'roots') throw new InputError('the client answered a roots request with something else');
    return answer.val;
  }
}
