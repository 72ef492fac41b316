import { SignJWT, decodeJwt, decodeProtectedHeader, errors as joseErrors, jwtVerify } from 'jose';
import { GatewayClaims, type BudgetClaim, type Caller } from './claims.ts';

export const ACCEPTED_ALGORITHMS = ['HS256', 'HS384', 'HS512'] as const;
/** Larger tokens are refused before any parsing: a real one is a few hundred bytes. */
export const MAX_TOKEN_BYTES = 4096;
export const CLOCK_TOLERANCE_SECONDS = 60;

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

/** Looks up a project's HMAC secret; undefined when the project does not exist. */
export type SecretLookup = (projectId: string) => Promise<string | undefined>;

const encoder = new TextEncoder();

/**
 * Verifies a gateway token exactly as DESIGN §2 states: HMAC algorithms only, the secret of the project named by
 * `iss`, `exp` required, `nbf`/`iat` honoured with 60 s leeway, and a well-formed budget claim.
 */
export async function verifyToken(token: string | undefined, lookupSecret: SecretLookup, now = Date.now()): Promise<Caller> {
  if (!token) throw new TokenError('Missing token', 'token_missing');
  if (token.length > MAX_TOKEN_BYTES) throw new TokenError('Token too large', 'token_malformed');
  if (!/^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/.test(token)) throw new TokenError('Malformed token', 'token_malformed');

  let alg: string | undefined;
  let issuer: unknown;
  try {
    alg = decodeProtectedHeader(token).alg;
    issuer = decodeJwt(token).iss;
  } catch {
    throw new TokenError('Malformed token', 'token_malformed');
  }
  // Checked before any secret is looked up, so an RS/ES/none token never reaches the HMAC path.
  if (!alg || !(ACCEPTED_ALGORITHMS as readonly string[]).includes(alg)) {
    throw new TokenError(`Token algorithm ${alg ?? '(none)'} is not accepted; use HS256, HS384 or HS512`);
  }
  if (typeof issuer !== 'string' || issuer.length === 0) throw new TokenError('Token has no iss claim');

  const secret = await lookupSecret(issuer);
  if (!secret) throw new TokenError('Token issuer is not a known project');

  let payload: unknown;
  try {
    ({ payload } = await jwtVerify(token, encoder.encode(secret), {
      algorithms: [...ACCEPTED_ALGORITHMS],
      clockTolerance: CLOCK_TOLERANCE_SECONDS,
      requiredClaims: ['exp', 'iss', 'sub'],
      currentDate: new Date(now),
    }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw new TokenError('Token expired', 'token_expired');
    if (err instanceof joseErrors.JWTClaimValidationFailed) throw new TokenError(`Token claim invalid: ${err.claim} (${err.reason})`);
    if (err instanceof joseErrors.JWSSignatureVerificationFailed) throw new TokenError('Token signature is invalid');
    throw new TokenError('Token is invalid');
  }

  const claims = GatewayClaims.safeParse(payload);
  if (!claims.success) {
    const issue = claims.error.issues[0];
    throw new TokenError(`Token claims invalid: ${issue?.path.join('.') || 'payload'} ${issue?.message ?? ''}`.trim());
  }
  // jose honours iat only as "not in the future" when maxTokenAge is set; DESIGN asks for it regardless.
  if (claims.data.iat !== undefined && claims.data.iat * 1000 > now + CLOCK_TOLERANCE_SECONDS * 1000) {
    throw new TokenError('Token issued in the future');
  }
  return {
    projectId: claims.data.iss,
    userId: claims.data.sub,
    budget: claims.data.budget,
    expiresAt: claims.data.exp,
  };
}

export interface MintOptions {
  projectId: string;
  userId: string;
  secret: string;
  budget: BudgetClaim;
  /** Lifetime in seconds. */
  expiresInSeconds: number;
  algorithm?: (typeof ACCEPTED_ALGORITHMS)[number];
  now?: number;
}

/** Mints a token the way a project owner's server would; used by the CLI and the tests. */
export async function mintToken(opts: MintOptions): Promise<string> {
  const nowSeconds = Math.floor((opts.now ?? Date.now()) / 1000);
  return new SignJWT({ budget: opts.budget })
    .setProtectedHeader({ alg: opts.algorithm ?? 'HS256', typ: 'JWT' })
    .setIssuer(opts.projectId)
    .setSubject(opts.userId)
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
