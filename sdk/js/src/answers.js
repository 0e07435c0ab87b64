// The answers of earlier rounds, carried in a round's state: the host hands a replayed
// handler only the last round's answers, so the SDK keeps the others in the state it returns
// with each question (the host seals it, so the client cannot change it). Pure: no host
// imports, so it runs natively in the SDK's tests.

const MARK = 'capsule-answers';
const ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';

function base64(bytes) {
  let out = '';
  for (let i = 0; i < bytes.length; i += 3) {
    const n = (bytes[i] << 16) | ((bytes[i + 1] ?? 0) << 8) | (bytes[i + 2] ?? 0);
    out += ALPHABET[(n >> 18) & 63] + ALPHABET[(n >> 12) & 63];
    out += i + 1 < bytes.length ? ALPHABET[(n >> 6) & 63] : '=';
    out += i + 2 < bytes.length ? ALPHABET[n & 63] : '=';
  }
  return out;
}

function unbase64(text) {
  const clean = text.replace(/=+$/, '');
  const bytes = new Uint8Array(Math.floor((clean.length * 3) / 4));
  let n = 0;
  let bits = 0;
  let at = 0;
  for (const c of clean) {
    const v = ALPHABET.indexOf(c);
    if (v < 0) throw new TypeError('not base64');
    n = (n << 6) | v;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes[at++] = (n >> bits) & 255;
    }
  }
  return bytes;
}

/** The answers given so far (a `Map` of key to WIT input-response), as a round's state. */
export function encodeAnswers(answers) {
  const replacer = (_, value) => (value instanceof Uint8Array ? { $bytes: base64(value) } : value);
  return new TextEncoder().encode(JSON.stringify({ [MARK]: 1, answers: Object.fromEntries(answers) }, replacer));
}

/** The answers a round's state carries; none for state that is not the SDK's. */
export function decodeAnswers(state) {
  if (!state || state.length === 0) return new Map();
  try {
    const reviver = (_, value) =>
      value && typeof value === 'object' && typeof value.$bytes === 'string' ? unbase64(value.$bytes) : value;
    const carried = JSON.parse(new TextDecoder().decode(state), reviver);
    if (carried?.[MARK] !== 1 || typeof carried.answers !== 'object' || carried.answers === null) return new Map();
    return new Map(Object.entries(carried.answers));
  } catch {
    return new Map();
  }
}
