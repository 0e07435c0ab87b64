// Types for the Capsule JavaScript/TypeScript SDK: handler arguments are inferred from the
// schemas built with `s`.

/** A JSON Schema and the TypeScript type of the values it accepts. */
export interface Schema<T, Optional extends boolean = false> {
  readonly json: Record<string, unknown>;
  readonly isOptional: Optional;
  /** The same schema with a description (shown to the model). */
  describe(text: string): Schema<T, Optional>;
  /** The same schema, not required in an object. */
  optional(): Schema<T, true>;
  /** The same schema, not required, with a default the model sees. */
  default(value: T): Schema<T, true>;
}

/** The type of the values a schema accepts. */
export type Infer<S> = S extends Schema<infer T, any> ? T : never;

type Shape = Record<string, Schema<any, boolean>>;
type RequiredKeys<P extends Shape> = { [K in keyof P]: P[K] extends Schema<any, true> ? never : K }[keyof P];
type OptionalKeys<P extends Shape> = { [K in keyof P]: P[K] extends Schema<any, true> ? K : never }[keyof P];
type Simplify<T> = { [K in keyof T]: T[K] } & {};
export type ObjectOf<P extends Shape> = Simplify<
  { [K in RequiredKeys<P>]: Infer<P[K]> } & { [K in OptionalKeys<P>]?: Infer<P[K]> }
>;

type Keywords = Record<string, unknown>;

export declare const s: {
  string(keywords?: Keywords): Schema<string>;
  number(keywords?: Keywords): Schema<number>;
  integer(keywords?: Keywords): Schema<number>;
  boolean(): Schema<boolean>;
  enum<const V extends readonly (string | number | boolean)[]>(values: V): Schema<V[number]>;
  array<S extends Schema<any, boolean>>(items: S, keywords?: Keywords): Schema<Infer<S>[]>;
  record<S extends Schema<any, boolean>>(values: S): Schema<Record<string, Infer<S>>>;
  object<P extends Shape>(properties: P, options?: { strict?: boolean }): Schema<ObjectOf<P>>;
  union<S extends Schema<any, boolean>[]>(...options: S): Schema<Infer<S[number]>>;
  nullable<S extends Schema<any, boolean>>(schema: S): Schema<Infer<S> | null>;
  any(): Schema<unknown>;
  /** A JSON Schema given as is. */
  json(schema: Record<string, unknown>): Schema<unknown>;
};

export type LogLevel = 'debug' | 'info' | 'notice' | 'warning' | 'error' | 'critical' | 'alert' | 'emergency';

export interface Mount {
  path: string;
  name?: string;
  writable: boolean;
}

export interface Identity {
  tenant: string;
  principal?: { subject: string; client?: string; scopes: string[] };
}

export interface Elicited<T> {
  action: 'accept' | 'decline' | 'cancel';
  /** The submitted values when accepted. */
  content?: T;
}

/** What a running call can do. Questions (elicit, sample, roots) work by replay. */
export declare class Context {
  readonly client: { elicitation: boolean; elicitationUrl: boolean; sampling: boolean; roots: boolean };
  log(level: LogLevel, message: string, logger?: string): void;
  debug(message: string): void;
  info(message: string): void;
  warning(message: string): void;
  error(message: string): void;
  progress(progress: number, total?: number, message?: string): void;
  cancelled(): boolean;
  listChanged(kind: 'tools' | 'resources' | 'prompts'): void;
  resourceUpdated(uri: string): void;
  mounts(): Mount[];
  caller(): Identity;
  elicit<S extends Schema<any, boolean>>(message: string, schema: S, key?: string): Elicited<Infer<S>>;
  elicit(message: string, schema: Record<string, unknown>, key?: string): Elicited<Record<string, unknown>>;
  sample(
    prompt: string,
    options?: { maxTokens?: number; systemPrompt?: string; temperature?: number; stopSequences?: string[]; key?: string },
  ): string;
  roots(key?: string): { uri: string; name?: string }[];
}

export interface Image { kind: 'image'; data: Uint8Array; mimeType: string }
export interface Audio { kind: 'audio'; data: Uint8Array; mimeType: string }
export interface ResourceLink { kind: 'resource-link'; uri: string; name: string; description?: string; mimeType?: string }
export type Content = string | Image | Audio | ResourceLink;
export interface Message { role: 'user' | 'assistant'; content: Content }

export declare function image(data: Uint8Array, mimeType: string): Image;
export declare function audio(data: Uint8Array, mimeType: string): Audio;
export declare function resourceLink(uri: string, name: string, options?: { description?: string; mimeType?: string }): ResourceLink;
export declare function user(content: Content): Message;
export declare function assistant(content: Content): Message;

export interface ToolDefinition<I, O> {
  description: string;
  title?: string;
  /** The arguments: an `s.object(...)`. */
  input?: I;
  /** The structured output, if the tool returns one. */
  output?: O;
  readOnly?: boolean;
  destructive?: boolean;
  idempotent?: boolean;
  openWorld?: boolean;
}

/** Register a tool; a thrown error becomes a tool error carrying its message. */
export declare function tool<I extends Schema<any, boolean> = Schema<{}>, O extends Schema<any, boolean> | undefined = undefined>(
  name: string,
  definition: ToolDefinition<I, O>,
  handler: (args: Infer<I>, ctx: Context) => O extends Schema<infer R, any> ? R : Content | Content[] | void,
): void;

/** Register a resource, or a template when the URI has `{variables}`. */
export declare function resource<U extends string>(
  uri: U,
  definition: { name?: string; title?: string; description?: string; mimeType?: string },
  handler: U extends `${string}{${string}}${string}`
    ? (variables: Record<string, string>, ctx: Context) => string | Uint8Array | object
    : (ctx: Context) => string | Uint8Array | object,
): void;

/** Register a prompt; its arguments are an `s.object` of `s.string()`s. */
export declare function prompt<A extends Schema<any, boolean> = Schema<{}>>(
  name: string,
  definition: { description: string; title?: string; arguments?: A },
  handler: (args: Infer<A>, ctx: Context) => Content | Message | (Content | Message)[],
): void;

/** Register completion for an argument of a prompt or a variable of a template. */
export declare function complete(
  target: { prompt: string; argument: string } | { template: string; argument: string },
  handler: (value: string, context: Record<string, string>) => Iterable<string>,
): void;

/** Throw from a resource or prompt for something that does not exist. */
export declare class NotFound extends Error {}
/** The client answered a question in a way the plugin cannot use. */
export declare class InputError extends Error {}

/** A failed file operation; `code` is the WASI error code (`no-entry`, `not-permitted`, …). */
export declare class FsError extends Error {
  readonly code: string;
  readonly path: string;
}

/** Files in the granted directories, by the paths `ctx.mounts()` gives. */
export declare const fs: {
  readFile(path: string): Uint8Array;
  readTextFile(path: string): string;
  writeFile(path: string, data: string | Uint8Array): void;
  readDir(path: string): string[];
};
