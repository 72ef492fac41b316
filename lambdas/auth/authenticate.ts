import { accessRecord } from '../observability/access-log.ts';
import { projectSecret } from '../registry/project-cache.ts';
import { Refused, type Refusal } from '../refusals/refusal.ts';
import type { Caller } from './claims.ts';
import { TokenError, verifyToken } from './tokens.ts';

/**
 * The one place a token becomes a caller or a refusal, for every surface: the token is verified against the
 * project's (cached) secret, a failure becomes a `token` refusal whose message the surface renders, and the caller
 * is named in the access log. `missingHint` completes "Missing token" with where this surface reads the token from.
 */
export async function authenticate(token: string | undefined, opts: { missingHint?: string } = {}): Promise<Caller> {
  try {
    const caller = await verifyToken(token, projectSecret);
    Object.assign(accessRecord(), { project: caller.projectId, user: caller.userId });
    return caller;
  } catch (err) {
    if (err instanceof TokenError) {
      const hint = err.code === 'token_missing' && opts.missingHint ? opts.missingHint : '';
      throw new Refused({ kind: 'token', code: err.code, message: `${err.message}${hint}` });
    }
    throw err;
  }
}

/** The refusal of a token whose project vanished between verification and use. */
export function unknownIssuer(): Refusal {
  return { kind: 'token', code: 'token_invalid', message: 'Token issuer is not a known project' };
}
