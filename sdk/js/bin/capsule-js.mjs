#!/usr/bin/env node
// `capsule-js build app.ts -o app.wasm`: a JavaScript or TypeScript module of registered
// functions into a Capsule plugin component.
//
// rolldown bundles the app (TypeScript is stripped, imports resolved) with the SDK's exports
// into one ES module, leaving the `capsule:` and `wasi:` imports to the component; then
// componentize-js (StarlingMonkey) builds the component against the `plugin-with-files` world,
// without the wasi:http features (outbound HTTP is a capability the host grants, not a
// default). A `capsule.toml` beside the app (or `--needs FILE`) is embedded as the plugin's
// declared needs.

import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

import { componentize } from '@bytecodealliance/componentize-js';
import { rolldown } from 'rolldown';

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), '..');
// A packed SDK carries its own copy of the WIT package (see vendor-wit.mjs); one used from a
// Capsule checkout reads the repository's.
const WIT = existsSync(join(SDK, 'wit', 'worlds.wit')) ? join(SDK, 'wit') : join(SDK, '..', '..', 'wit');
const NEEDS_SECTION = 'capsule:needs';

function leb128(n) {
  const out = [];
  do {
    let byte = n & 0x7f;
    n >>>= 7;
    if (n) byte |= 0x80;
    out.push(byte);
  } while (n);
  return out;
}

/** A WebAssembly custom section; valid at the top level of a component. */
export function customSection(name, data) {
  const encoded = new TextEncoder().encode(name);
  const payload = [...leb128(encoded.length), ...encoded, ...data];
  return Uint8Array.from([0, ...leb128(payload.length), ...payload]);
}

async function build(app, out, needs) {
  if (!existsSync(app)) throw new Error(`no such file: ${app}`);
  if (needs && !existsSync(needs)) throw new Error(`no such file: ${needs}`);
  const work = await mkdtemp(join(tmpdir(), 'capsule-js-'));
  try {
    // The entry sits beside the app, so both resolve `capsule-sdk` to the same copy.
    const entry = join(dirname(app), `.capsule-entry-${process.pid}.mjs`);
    await writeFile(entry, `import ${JSON.stringify(`./${basename(app)}`)};\nexport { tools, resources, prompts, completion } from ${JSON.stringify(join(SDK, 'src', 'exports.js'))};\n`);
    const bundled = join(work, 'plugin.js');
    try {
      const bundle = await rolldown({
        input: entry,
        external: (id) => /^(capsule|wasi):/.test(id),
        platform: 'neutral',
        logLevel: 'warn',
        resolve: { alias: { 'capsule-sdk': join(SDK, 'src', 'index.js') } },
      });
      await bundle.write({ file: bundled, format: 'esm' });
    } finally {
      await rm(entry, { force: true });
    }
    const { component } = await componentize({
      sourcePath: bundled,
      witPath: WIT,
      worldName: 'plugin-with-files',
      disableFeatures: ['http', 'fetch-event'],
    });
    let bytes = component;
    if (needs) {
      const section = customSection(NEEDS_SECTION, await readFile(needs));
      bytes = new Uint8Array(component.length + section.length);
      bytes.set(component);
      bytes.set(section, component.length);
    }
    await mkdir(dirname(out), { recursive: true });
    await writeFile(out, bytes);
    console.error(`capsule-js: wrote ${out} (${Math.round(bytes.length / 1024)} KiB)`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

const usage = 'usage: capsule-js build APP.(js|ts) [-o OUT.wasm] [--needs capsule.toml]';
const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { output: { type: 'string', short: 'o' }, needs: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
});
if (values.help || positionals[0] !== 'build' || positionals.length !== 2) {
  console.error(usage);
  process.exit(values.help ? 0 : 2);
}
const app = resolve(positionals[1]);
const out = resolve(values.output ?? app.replace(/\.[cm]?[jt]s$/, '') + '.wasm');
const sidecar = join(dirname(app), 'capsule.toml');
const needs = values.needs ? resolve(values.needs) : existsSync(sidecar) ? sidecar : undefined;
try {
  await build(app, out, needs);
} catch (e) {
  console.error(`capsule-js: ${e?.stack ?? e}`);
  process.exit(1);
}
