/**
 * The few byte and crypto helpers the package needs, on Web APIs only (WebCrypto, TextEncoder, btoa/atob), so the same
 * code runs in Node ≥ 18, browsers, Deno, Bun and edge runtimes. Nothing here imports a Node module.
 */

const encoder = new TextEncoder();

export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

/** Standard base64 (with padding) of some bytes. */
export function toBase64(bytes: Uint8Array): string {
  let binary = '';
  for (let i = 0; i < bytes.length; i += 0x8000) binary += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(binary);
}

/** base64url without padding (RFC 7515 §2), as JWTs spell their segments. */
export function toBase64Url(bytes: Uint8Array): string {
  return toBase64(bytes).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** The bytes of standard base64 text; undefined when it is not base64. */
export function fromBase64(text: string): Uint8Array | undefined {
  if (!/^[A-Za-z0-9+/]*={0,2}$/.test(text) || text.length % 4 === 1) return undefined;
  try {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return undefined;
  }
}

export function toHex(bytes: Uint8Array): string {
  let out = '';
  for (const byte of bytes) out += byte.toString(16).padStart(2, '0');
  return out;
}

let nodeWebCrypto: Promise<Crypto> | undefined;

/**
 * WebCrypto. Every browser, edge runtime and Node ≥ 19 has it as the global `crypto`; Node 18 has it only as node:crypto's
 * `webcrypto` unless started with `--experimental-global-webcrypto`. Only there, in Node, is
 * node:crypto loaded — through a specifier held in a variable, so that bundlers for browsers and edge runtimes leave
 * it alone (it is never reached there).
 */
export function webCrypto(): Promise<Crypto> {
  const global = (globalThis as { crypto?: Crypto }).crypto;
  if (global?.subtle) return Promise.resolve(global);
  const node = (globalThis as { process?: { versions?: { node?: string } } }).process?.versions?.node;
  if (!node) {
    return Promise.reject(
      new Error('WebCrypto (crypto.subtle) is not available here: browsers offer it only to pages of a secure context (https or localhost)'),
    );
  }
  nodeWebCrypto ??= (async () => {
    const specifier = 'node:crypto';
    const mod = (await import(/* @vite-ignore */ /* webpackIgnore: true */ specifier)) as { webcrypto?: Crypto };
    if (!mod.webcrypto?.subtle) throw new Error(`WebCrypto is not available in Node ${node}`);
    return mod.webcrypto;
  })();
  return nodeWebCrypto;
}

export type HmacHash = 'SHA-256' | 'SHA-384' | 'SHA-512';

/** HMAC of `data` keyed with `key` (both bytes). */
export async function hmac(hash: HmacHash, key: Uint8Array, data: Uint8Array): Promise<Uint8Array> {
  const { subtle } = await webCrypto();
  const cryptoKey = await subtle.importKey('raw', key as BufferSource, { name: 'HMAC', hash }, false, ['sign']);
  return new Uint8Array(await subtle.sign('HMAC', cryptoKey, data as BufferSource));
}

/**
 * Whether two strings are equal, in time that depends only on their lengths. Written by hand because WebCrypto has no
 * `timingSafeEqual` and node:crypto's does not exist in browsers or edge runtimes: every byte is compared, with no early
 * exit. The length of a signature is no secret.
 */
export function constantTimeEqual(a: string, b: string): boolean {
  const x = utf8(a);
  const y = utf8(b);
  if (x.length !== y.length) return false;
  let diff = 0;
  for (let i = 0; i < x.length; i++) diff |= (x[i] as number) ^ (y[i] as number);
  return diff === 0;
}

/** Random bytes (getRandomValues works everywhere, secure context or not; Node 18 through webCrypto()). */
export async function randomBytes(length: number): Promise<Uint8Array> {
  const bytes = new Uint8Array(length);
  const global = (globalThis as { crypto?: Crypto }).crypto;
  (global?.getRandomValues ? global : await webCrypto()).getRandomValues(bytes);
  return bytes;
}

/** A random UUID (version 4), as `crypto.randomUUID()` makes one — which needs a secure context in browsers. */
export async function randomUuid(): Promise<string> {
  const b = await randomBytes(16);
  b[6] = ((b[6] as number) & 0x0f) | 0x40;
  b[8] = ((b[8] as number) & 0x3f) | 0x80;
  const hex = toHex(b);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
