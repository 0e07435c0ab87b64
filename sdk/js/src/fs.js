// Files in the directories the host granted, through wasi:filesystem: `fs.readTextFile(path)`
// and friends, with paths as the plugin sees them (`ctx.mounts()`). Nothing else exists.

import { getDirectories } from 'wasi:filesystem/preopens@0.2.12';

const CHUNK = 65536n;

/** A failed file operation: `code` is the WASI error code (`no-entry`, `not-permitted`, …). */
export class FsError extends Error {
  constructor(code, path) {
    super(`${code}: ${path}`);
    this.name = 'FsError';
    this.code = code;
    this.path = path;
  }
}

function wasi(path, action) {
  try {
    return action();
  } catch (e) {
    throw new FsError(typeof e?.payload === 'string' ? e.payload : String(e?.payload ?? e), path);
  }
}

// The granted directory holding `path`, and the path relative to it.
function locate(path) {
  for (const [dir, guest] of getDirectories()) {
    if (path === guest) return [dir, '.'];
    const prefix = guest.endsWith('/') ? guest : `${guest}/`;
    if (path.startsWith(prefix)) return [dir, path.slice(prefix.length) || '.'];
  }
  throw new FsError('no-entry', path);
}

function open(path, openFlags, flags) {
  const [dir, relative] = locate(path);
  return wasi(path, () => dir.openAt({ symlinkFollow: true }, relative, openFlags, flags));
}

function concat(chunks) {
  const out = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.length;
  }
  return out;
}

export const fs = {
  /** A file's bytes. */
  readFile(path) {
    const file = open(path, {}, { read: true });
    const chunks = [];
    let offset = 0n;
    for (;;) {
      const [data, end] = wasi(path, () => file.read(CHUNK, offset));
      chunks.push(data);
      offset += BigInt(data.length);
      if (end || data.length === 0) break;
    }
    return concat(chunks);
  },
  /** A file's text (UTF-8). */
  readTextFile(path) {
    return new TextDecoder().decode(fs.readFile(path));
  },
  /** Create or replace a file (in a directory granted with write). */
  writeFile(path, data) {
    const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
    const file = open(path, { create: true, truncate: true }, { write: true });
    let offset = 0n;
    while (offset < BigInt(bytes.length)) {
      const written = wasi(path, () => file.write(bytes.subarray(Number(offset)), offset));
      offset += written;
    }
  },
  /** The names in a directory. */
  readDir(path) {
    const dir = open(path, { directory: true }, { read: true });
    const stream = wasi(path, () => dir.readDirectory());
    const names = [];
    for (;;) {
      const entry = wasi(path, () => stream.readDirectoryEntry());
      if (!entry) return names.sort();
      names.push(entry.name);
    }
  },
};
