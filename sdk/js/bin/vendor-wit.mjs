#!/usr/bin/env node
// Copy the repository's WIT package (../../wit, with its WASI deps) into the SDK before it is
// packed, so an installed SDK builds against the same `capsule:plugin` the host serves.
import { cpSync, existsSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const sdk = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(sdk, '..', '..', 'wit');
if (!existsSync(join(source, 'worlds.wit'))) {
  console.error(`vendor-wit: ${source} is not Capsule's wit/ folder; install the SDK from a Capsule checkout`);
  process.exit(1);
}
rmSync(join(sdk, 'wit'), { recursive: true, force: true });
cpSync(source, join(sdk, 'wit'), { recursive: true });
