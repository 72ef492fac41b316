import { accessRecord } from '../observability/access-log.ts';
import { originRefusal } from '../origins/allowed.ts';
import { projectSecret } from '../registry/project-cache.ts';
import { Refused, type Refusal } from '../refusals/refusal.ts';
import type { Caller } from './claims.ts';
import { TokenError, verifyToken } from './tokens.ts';

/**
 * The one place a token becomes a caller or a refusal, for every surface: the token is verified against the
 * project's (cached) secret, a failure becomes a `token` refusal whose message the surface renders, and the caller
 * is named in the access log. Then the page's `origin` (the request's `Origin` header; null when it has none) is
 * checked against the token and its project (origins/allowed.ts): required, so no surface can forget it. Both come
 * before any other work. `missingHint` completes "Missing token" with where this surface reads the token from.
 */
export async function authenticate(token: string | undefined, opts: { origin: string | null; missingHint?: string }): Promise<Caller> {
  let caller: Caller;
  try {
    caller = await verifyToken(token, projectSecret);
    Object.assign(accessRecord(), { project: caller.projectId, user: caller.userId });
  } catch (err) {
    if (err instanceof TokenError) {
      const hint = err.code === 'token_missing' && opts.missingHint ? opts.missingHint : '';
      throw new Refused({ kind: 'token', code: err.code, message: `${err.message}${hint}` });
    }
    throw err;
  }
  const refused = await originRefusal(caller, opts.origin);
  if (refused) throw new Refused(refused);
  return caller;
}

/** The refusal of a token whose project vanished between verification and use. */
export function unknownIssuer(): Refusal {
  return { kind: 'token', code: 'token_invalid', message: 'Token issuer is not a known project' };
}
