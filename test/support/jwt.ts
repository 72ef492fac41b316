import { createHmac } from 'node:crypto';

/**
 * Hand-made JWTs for tests that need tokens no JWT library would produce: duplicate keys in the payload text,
 * forged algorithms, claims of any type. The signature is a real HMAC over exactly the given header and payload
 * text, so a token the gateway refuses is refused for its content, not for a broken signature.
 */
export const b64url = (data: string | Buffer): string => Buffer.from(data).toString('base64url');

const HASH: Record<string, string> = { HS256: 'sha256', HS384: 'sha384', HS512: 'sha512' };

export interface ForgeOptions {
  /** Header object or raw JSON text. `alg` picks the HMAC; any other alg is signed with HS256 (a forgery). */
  header?: Record<string, unknown> | string;
  /** Payload object or raw JSON text (raw text keeps duplicate keys). */
  payload: Record<string, unknown> | string;
  secret: string;
  /** Replaces the signature segment (e.g. '' for alg none). */
  signature?: string;
}

export function forgeJwt(opts: ForgeOptions): string {
  const header = opts.header ?? { alg: 'HS256', typ: 'JWT' };
  const headerText = typeof header === 'string' ? header : JSON.stringify(header);
  const payloadText = typeof opts.payload === 'string' ? opts.payload : JSON.stringify(opts.payload);
  const signingInput = `${b64url(headerText)}.${b64url(payloadText)}`;
  if (opts.signature !== undefined) return `${signingInput}.${opts.signature}`;
  let alg = 'HS256';
  if (typeof header !== 'string' && typeof header.alg === 'string' && HASH[header.alg]) alg = header.alg;
  const sig = createHmac(HASH[alg]!, Buffer.from(opts.secret, 'utf8')).update(signingInput).digest('base64url');
  return `${signingInput}.${sig}`;
}

/** A payload the gateway accepts (docs/contract.md, Tokens), with `overrides` merged in. */
export function goodClaims(projectId: string, sub: string, overrides: Record<string, unknown> = {}, now = Date.now()): Record<string, unknown> {
  const s = Math.floor(now / 1000);
  return {
    iss: projectId,
    sub,
    iat: s,
    exp: s + 3600,
    budget: { ai: 1_000_000_000_000_000, compute: 3600, window: 'lifetime' },
    ...overrides,
  };
}
