// Capsule plugins in JavaScript and TypeScript: register plain functions with their schema
// given once, build with `capsule-js build app.ts -o app.wasm`.

export { s } from './schema.js';
export { tool, resource, prompt, complete, user, assistant, image, audio, resourceLink, NotFound } from './registry.js';
export { Context, InputError } from './context.js';
export { fs, FsError } from './fs.js';
