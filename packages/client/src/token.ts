import { hmac, type HmacHash, randomUuid, toBase64Url, utf8 } from './crypto.js';

/**
 * End users' tokens (the gateway's docs/contract.md, "Tokens"): an HMAC-signed JWT whose `iss` is the project, `sub`
 * the user, with `iat`, `exp`, a random `jti` (so that one token can be revoked) and the user's `budget`, and optionally
 * the `origins` a page may use it from.
 *
 * Signed here with WebCrypto rather than with `jose`: jose reaches WebCrypto through the global `crypto` only, which
 * Node 18 does not have without a flag, and an HS256 JWS is one HMAC over two base64url segments. The tests check
 * these tokens with jose and with the gateway itself.
 */

export const BUDGET_WINDOWS = ['hour', 'day', 'week', 'month', 'lifetime'] as const;
export type BudgetWindow = (typeof BUDGET_WINDOWS)[number];

/** What a user may spend per window: AI in integer microdollars (1 USD = 1,000,000), compute in integer seconds. */
export interface Budget {
  ai: number;
  compute: number;
  window: BudgetWindow;
}

export type TokenAlgorithm = 'HS256' | 'HS384' | 'HS512';

export interface MintUserTokenOptions {
  /** The project's id: the token's `iss`. */
  projectId: string;
  /** The project's secret (`gateway project create` prints it). Keep it on your server. */
  secret: string;
  /** Your user's id: the token's `sub`. Usage and budgets are kept per (project, user). */
  userId: string;
  budget: Budget;
  /** Lifetime: seconds, or a number with a unit — `30s`, `15m`, `1h`, `7d`, `2w`. */
  expiresIn: number | string;
  /** The web origins a page may use the token from (1–20 patterns: `https://app.example.com`, `https://*.example.com`, `http://localhost:*`, `null`). */
  origins?: string[];
  /** Default `HS256`. */
  algorithm?: TokenAlgorithm;
  /** The time the token is issued at (default now). */
  now?: Date | number;
  /** The `jti` (default a random UUID). */
  jti?: string;
}

/** The claims of a token minted by `mintUserToken`. */
export interface UserTokenClaims {
  iss: string;
  sub: string;
  iat: number;
  exp: number;
  jti: string;
  budget: Budget;
  origins?: string[];
}

const HASHES: Record<TokenAlgorithm, HmacHash> = { HS256: 'SHA-256', HS384: 'SHA-384', HS512: 'SHA-512' };
const UNIT_SECONDS = { '': 1, s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 } as const;
/** The gateway's identifier rule (docs/contract.md, "Identifiers"): 1–128 code points, NFC, none of these. */
const IDENTIFIER = /^[^#\p{White_Space}\p{Cc}\p{Cf}\p{Cs}]{1,128}$/u;
/** The gateway's origin pattern grammar (its lambdas/origins/pattern.ts), checked here so no token is minted that it would refuse. */
const ORIGIN = /^([a-z][a-z0-9+.-]*):\/\/(\*\.)?([a-z0-9-._~%!$&'()+,;=]+|\[[0-9a-f:.]+\])(?::(\d{1,5}|\*))?\/?$/;
const MAX_ORIGINS = 20;
const MAX_TOKEN_LENGTH = 4096;

/** Mints an end user's token. Runs on your server (the secret must never reach a browser); any runtime with WebCrypto. */
export async function mintUserToken(opts: MintUserTokenOptions): Promise<string> {
  const algorithm = opts.algorithm ?? 'HS256';
  if (!(algorithm in HASHES)) throw new TypeError(`algorithm must be HS256, HS384 or HS512, got ${String(algorithm)}`);
  if (typeof opts.secret !== 'string' || opts.secret === '') throw new TypeError('secret is required: the project secret');
  checkIdentifier('projectId', opts.projectId);
  checkIdentifier('userId', opts.userId);
  const budget = checkBudget(opts.budget);
  const lifetime = parseExpiresIn(opts.expiresIn);
  const origins = opts.origins === undefined ? undefined : checkOrigins(opts.origins);
  const nowMs = opts.now === undefined ? Date.now() : typeof opts.now === 'number' ? opts.now : opts.now.getTime();
  if (!Number.isFinite(nowMs)) throw new TypeError('now must be a valid date');
  const iat = Math.floor(nowMs / 1000);
  const jti = opts.jti ?? (await randomUuid());
  if (typeof jti !== 'string' || jti === '') throw new TypeError('jti must be a non-empty string');

  const claims: UserTokenClaims = {
    iss: opts.projectId,
    sub: opts.userId,
    iat,
    exp: iat + lifetime,
    jti,
    budget,
    ...(origins ? { origins } : {}),
  };
  const signingInput = `${segment({ alg: algorithm, typ: 'JWT' })}.${segment(claims)}`;
  const signature = await hmac(HASHES[algorithm], utf8(opts.secret), utf8(signingInput));
  const token = `${signingInput}.${toBase64Url(signature)}`;
  if (token.length > MAX_TOKEN_LENGTH) throw new RangeError(`The token would be ${token.length} characters; the gateway takes at most ${MAX_TOKEN_LENGTH}`);
  return token;
}

/** `expiresIn` in seconds: a positive whole number of seconds, or text as the gateway's CLI takes it (`30s`, `15m`, `1h`, `7d`, `2w`, `3600`). */
export function parseExpiresIn(value: number | string): number {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value <= 0) throw new RangeError(`expiresIn must be a positive whole number of seconds, got ${value}`);
    return value;
  }
  const match = typeof value === 'string' ? /^(\d+)\s*([smhdw]?)$/.exec(value.trim()) : null;
  if (!match) throw new RangeError(`Invalid expiresIn "${String(value)}": use a number followed by s, m, h, d or w (e.g. 1h)`);
  const seconds = Number(match[1]) * UNIT_SECONDS[match[2] as keyof typeof UNIT_SECONDS];
  if (!Number.isSafeInteger(seconds) || seconds <= 0) throw new RangeError(`Invalid expiresIn "${value}": must be positive`);
  return seconds;
}

/**
 * The claims of a token, NOT verified — for a front end that wants to know when its token expires (`exp`) or what
 * budget it carries. Never trust them on a server: verify the signature there.
 */
export function decodeUserToken(token: string): Partial<UserTokenClaims> & Record<string, unknown> {
  const payload = typeof token === 'string' ? token.split('.')[1] : undefined;
  if (payload === undefined || token.split('.').length !== 3) throw new TypeError('Not a JWT: expected three base64url segments');
  const base64 = payload.replace(/-/g, '+').replace(/_/g, '/');
  const binary = atob(base64 + '='.repeat((4 - (base64.length % 4)) % 4));
  const bytes = Uint8Array.from(binary, (c) => c.charCodeAt(0));
  const claims: unknown = JSON.parse(new TextDecoder().decode(bytes));
  if (!claims || typeof claims !== 'object' || Array.isArray(claims)) throw new TypeError('The token payload is not a JSON object');
  return claims as Partial<UserTokenClaims> & Record<string, unknown>;
}

function segment(value: unknown): string {
  return toBase64Url(utf8(JSON.stringify(value)));
}

function checkIdentifier(name: string, id: unknown): void {
  if (typeof id !== 'string' || !IDENTIFIER.test(id)) {
    throw new TypeError(`${name} must be 1–128 characters without "#", white space, control, format characters or lone surrogates`);
  }
  if (id.normalize('NFC') !== id) throw new TypeError(`${name} must be in Unicode normal form NFC`);
}

function checkBudget(budget: Budget): Budget {
  if (!budget || typeof budget !== 'object') throw new TypeError('budget is required: { ai, compute, window }');
  for (const key of ['ai', 'compute'] as const) {
    const value = budget[key];
    if (!Number.isSafeInteger(value) || value < 0) {
      throw new RangeError(`budget.${key} must be a non-negative whole number (${key === 'ai' ? 'microdollars' : 'seconds'}), got ${String(value)}`);
    }
  }
  if (!(BUDGET_WINDOWS as readonly string[]).includes(budget.window)) {
    throw new RangeError(`budget.window must be one of ${BUDGET_WINDOWS.join(', ')}, got ${String(budget.window)}`);
  }
  // A fresh object with the three keys only, in the documented order.
  return { ai: budget.ai, compute: budget.compute, window: budget.window };
}

function checkOrigins(origins: string[]): string[] {
  if (!Array.isArray(origins) || origins.length < 1 || origins.length > MAX_ORIGINS) {
    throw new RangeError(`origins must be a list of 1 to ${MAX_ORIGINS} origins`);
  }
  for (const origin of origins) {
    const port = typeof origin === 'string' ? ORIGIN.exec(origin.trim().toLowerCase())?.[4] : undefined;
    const shaped =
      typeof origin === 'string' && origin.length <= 300 && ORIGIN.test(origin.trim().toLowerCase()) && !(port && port !== '*' && Number(port) > 65_535);
    if (origin !== 'null' && !shaped) {
      throw new TypeError(
        `"${String(origin).slice(0, 80)}" is not an origin: write scheme://host[:port] (e.g. https://app.example.com), optionally *. before the host or :* as the port, or null`,
      );
    }
  }
  return [...origins];
}
