import { randomUUID } from 'node:crypto';
import { SignJWT, errors as joseErrors, jwtVerify } from 'jose';
import { clock } from '../config/clock.ts';
import { TOKEN_CLOCK_TOLERANCE_SECONDS } from '../config/timing.ts';
import { onInstanceReset } from '../instance/state.ts';
import { GatewayClaims, type BudgetClaim, type Caller } from './claims.ts';
import { hasDuplicateKeys } from './json-keys.ts';

export const ACCEPTED_ALGORITHMS = ['HS256', 'HS384', 'HS512'] as const;
/** Larger tokens are refused before any parsing: a real one is a few hundred bytes. */
export const MAX_TOKEN_BYTES = 4096;

/** Every verification failure: the message is safe to show the caller (it never echoes the token). */
export class TokenError extends Error {
  constructor(
    message: string,
    readonly code: 'token_missing' | 'token_malformed' | 'token_expired' | 'token_invalid' = 'token_invalid',
  ) {
    super(message);
    this.name = 'TokenError';
  }
}

/**
 * Looks up a project's HMAC secret; undefined when the project does not exist. With `refresh`, the caller asks for
 * the stored record rather than a cached one (after a signature failure: the secret may just have been rotated);
 * the lookup may still answer from its cache when it refreshed that project very recently.
 */
export type SecretLookup = (projectId: string, opts?: { refresh?: boolean }) => Promise<string | undefined>;

const encoder = new TextEncoder();

/** Decodes one base64url JWT segment as a JSON object, refusing duplicate keys. */
function decodeSegment(segment: string, what: 'header' | 'payload'): Record<string, unknown> {
  let text: string;
  let value: unknown;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(Buffer.from(segment, 'base64url'));
    value = JSON.parse(text);
  } catch {
    throw new TokenError('Malformed token', 'token_malformed');
  }
  if (!value || typeof value !== 'object' || Array.isArray(value)) throw new TokenError('Malformed token', 'token_malformed');
  if (hasDuplicateKeys(text)) throw new TokenError(`Token ${what} names the same key twice`, 'token_malformed');
  return value as Record<string, unknown>;
}

/**
 * Verifies a gateway token exactly as docs/contract.md states. Everything that needs no secret is checked first —
 * size, shape, algorithm, duplicate keys and the claims' shapes and lengths — so a malformed token never costs a
 * store read (an oversized `iss` used to reach DynamoDB's key-size limit as a 500). Then the secret of the project
 * named by `iss`, the signature, `exp` (required), `nbf` and `iat` with 60 s leeway.
 */
export async function verifyToken(token: string | undefined, lookupSecret: SecretLookup, now = clock.now()): Promise<Caller> {
  if (!token) throw new TokenError('Missing token', 'token_missing');
  const known = verified.get(token);
  if (known && now >= known.validFromMs && now < known.validUntilMs && (await lookupSecret(known.caller.projectId)) === known.secret) return known.caller;
  if (token.length > MAX_TOKEN_BYTES) throw new TokenError('Token too large', 'token_malformed');
  if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token)) throw new TokenError('Malformed token', 'token_malformed');

  const [headerPart, payloadPart] = token.split('.') as [string, string];
  const alg = decodeSegment(headerPart, 'header').alg;
  // Checked before any secret is looked up, so an RS/ES/none token never reaches the HMAC path.
  if (typeof alg !== 'string' || !(ACCEPTED_ALGORITHMS as readonly string[]).includes(alg)) {
    throw new TokenError(`Token algorithm ${typeof alg === 'string' ? alg : '(none)'} is not accepted; use HS256, HS384 or HS512`);
  }
  const unverified = decodeSegment(payloadPart, 'payload');
  if (typeof unverified.iss !== 'string' || unverified.iss.length === 0) throw new TokenError('Token has no iss claim');
  for (const claim of ['sub', 'exp'] as const) {
    if (unverified[claim] === undefined) throw new TokenError(`Token claim invalid: ${claim} (missing)`);
  }
  const claims = GatewayClaims.safeParse(unverified);
  if (!claims.success) {
    const issue = claims.error.issues[0];
    throw new TokenError(`Token claims invalid: ${issue?.path.join('.') || 'payload'} ${issue?.message ?? ''}`.trim());
  }
  const projectId = claims.data.iss;

  // A cached record may be stale (a secret rotated, a project created after a failed probe): on failure, read the
  // stored record once before refusing. The lookup rate-limits those reads per project.
  let secret = await lookupSecret(projectId);
  if (!secret) secret = await lookupSecret(projectId, { refresh: true });
  if (!secret) throw new TokenError('Token issuer is not a known project');
  let signedWith = secret;
  try {
    await verifyWith(token, secret, now);
  } catch (err) {
    if (!(err instanceof joseErrors.JWSSignatureVerificationFailed)) throw translate(err);
    const fresh = await lookupSecret(projectId, { refresh: true });
    if (!fresh || fresh === secret) throw translate(err);
    await verifyWith(token, fresh, now).catch((again: unknown) => {
      throw translate(again);
    });
    signedWith = fresh;
  }
  // jose honours iat only as "not in the future" when maxTokenAge is set; the contract asks for it regardless.
  if (claims.data.iat !== undefined && claims.data.iat * 1000 > now + TOKEN_CLOCK_TOLERANCE_SECONDS * 1000) {
    throw new TokenError('Token issued in the future');
  }
  // Frozen: one verified caller may serve many requests (below).
  const caller: Caller = Object.freeze({
    projectId,
    userId: claims.data.sub,
    budget: Object.freeze(claims.data.budget),
    expiresAt: claims.data.exp,
    ...(claims.data.origins ? { origins: Object.freeze(claims.data.origins) } : {}),
    ...(claims.data.jti ? { tokenId: claims.data.jti } : {}),
    ...(claims.data.iat !== undefined ? { issuedAt: claims.data.iat } : {}),
  });
  remember(token, caller, signedWith, claims.data);
  return caller;
}

/**
 * Tokens that passed verification, by their exact text: a user's token arrives with each of its requests, and
 * verifying it again (decoding, the claims' schema, an HMAC through WebCrypto) was a measurable share of the
 * gateway's CPU per request (docs/benchmarks.md). Everything but the clock is a function of the token's text and the
 * secret, so a hit needs only the project's current secret (a rotation misses) and the time window in which every
 * time check passes — a second early on each side, so that a token near a limit takes the full path and gets its
 * exact refusal.
 */
interface Verified {
  caller: Caller;
  secret: string;
  validFromMs: number;
  validUntilMs: number;
}
const verified = new Map<string, Verified>();
const MAX_VERIFIED = 5_000;
onInstanceReset(() => verified.clear());

function remember(token: string, caller: Caller, secret: string, claims: { exp: number; nbf?: number; iat?: number }): void {
  const tolerance = TOKEN_CLOCK_TOLERANCE_SECONDS * 1000;
  // jose: expired once exp <= now − tolerance (seconds); not yet valid while nbf > now + tolerance. Ours: iat.
  const validUntilMs = (claims.exp + TOKEN_CLOCK_TOLERANCE_SECONDS) * 1000 - 1000;
  const validFromMs =
    Math.max(claims.nbf === undefined ? -Infinity : claims.nbf * 1000 - tolerance, claims.iat === undefined ? -Infinity : claims.iat * 1000 - tolerance) + 1000;
  if (verified.size >= MAX_VERIFIED) verified.delete(verified.keys().next().value!);
  verified.set(token, { caller, secret, validFromMs, validUntilMs });
}

function verifyWith(token: string, secret: string, now: number) {
  return jwtVerify(token, encoder.encode(secret), {
    algorithms: [...ACCEPTED_ALGORITHMS],
    clockTolerance: TOKEN_CLOCK_TOLERANCE_SECONDS,
    requiredClaims: ['exp', 'iss', 'sub'],
    currentDate: new Date(now),
  });
}

function translate(err: unknown): TokenError {
  if (err instanceof TokenError) return err;
  if (err instanceof joseErrors.JWTExpired) return new TokenError('Token expired', 'token_expired');
  if (err instanceof joseErrors.JWTClaimValidationFailed) return new TokenError(`Token claim invalid: ${err.claim} (${err.reason})`);
  if (err instanceof joseErrors.JWSSignatureVerificationFailed) return new TokenError('Token signature is invalid');
  return new TokenError('Token is invalid');
}

export interface MintOptions {
  projectId: string;
  userId: string;
  secret: string;
  budget: BudgetClaim;
  /** Lifetime in seconds. */
  expiresInSeconds: number;
  /** The `origins` claim: the origins a page may use the token from, within its project's (DESIGN §10). */
  origins?: string[];
  /** The `jti`, by which the token can be revoked alone (auth/revocations.ts); a random UUID unless given. */
  tokenId?: string;
  algorithm?: (typeof ACCEPTED_ALGORITHMS)[number];
  now?: number;
}

/** Mints a token the way a project owner's server would; used by the CLI and the tests. */
export async function mintToken(opts: MintOptions): Promise<string> {
  const nowSeconds = Math.floor((opts.now ?? clock.now()) / 1000);
  return new SignJWT({ budget: opts.budget, ...(opts.origins ? { origins: opts.origins } : {}) })
    .setProtectedHeader({ alg: opts.algorithm ?? 'HS256', typ: 'JWT' })
    .setIssuer(opts.projectId)
    .setSubject(opts.userId)
    .setJti(opts.tokenId ?? randomUUID())
    .setIssuedAt(nowSeconds)
    .setExpirationTime(nowSeconds + opts.expiresInSeconds)
    .sign(encoder.encode(opts.secret));
}

/** Parses "1h", "30m", "7d", "3600" (seconds) into seconds. */
export function parseDuration(text: string): number {
  const match = /^(\d+)\s*([smhdw]?)$/.exec(text.trim());
  if (!match) throw new Error(`Invalid duration "${text}": use a number followed by s, m, h, d or w (e.g. 1h)`);
  const unit = { '': 1, s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 }[match[2] as '' | 's' | 'm' | 'h' | 'd' | 'w'];
  const seconds = Number(match[1]) * unit;
  if (seconds <= 0) throw new Error(`Invalid duration "${text}": must be positive`);
  return seconds;
}
