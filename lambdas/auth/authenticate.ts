import { accessRecord } from '../observability/access-log.ts';
import { deploymentRefusal, projectOriginRefusal } from './origins.ts';
import type { Project } from '../registry/model.ts';
import { cachedProject, projectSecret } from '../registry/project-cache.ts';
import { Refused, type Refusal } from '../refusals/refusal.ts';
import type { Caller } from './claims.ts';
import { revocationRefusal } from './revocations.ts';
import { TokenError, verifyToken } from './tokens.ts';

/**
 * The one place a token becomes a caller or a refusal, for every surface: the token is verified against the
 * project's (cached) secret, a failure becomes a `token` refusal whose message the surface renders, and the caller
 * is named in the access log. Then, on the project record the verification just read from the cache: whether the
 * token is revoked or its user blocked (revocations.ts), and whether the page's `origin` (the request's `Origin`
 * header; null when it has none — required, so no surface can forget it) is one the token and its project allow
 * (auth/origins.ts). All of it before any other work, and without a store read of its own. `missingHint` completes
 * "Missing token" with where this surface reads the token from.
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
  const refused = await projectRefusal(caller, opts.origin);
  if (refused) throw new Refused(refused);
  return caller;
}

/**
 * What the caller's project refuses of it, on the cached record. A refusal re-reads the record first (at most once a
 * second per project, registry/project-cache.ts), so an owner's unblock or newly allowed origin works at once; a
 * block or a revocation takes effect when the cached copy expires (SECRET_CACHE_SECONDS).
 */
async function projectRefusal(caller: Caller, origin: string | null): Promise<Refusal | undefined> {
  const deployment = deploymentRefusal(origin);
  if (deployment) return deployment;
  const check = (project: Project | undefined) => revocationRefusal(caller, project) ?? projectOriginRefusal(caller, project, origin);
  const refused = check(await cachedProject(caller.projectId));
  return refused && check(await cachedProject(caller.projectId, { refresh: true }));
}

/** The refusal of a token whose project vanished between verification and use. */
export function unknownIssuer(): Refusal {
  return { kind: 'token', code: 'token_invalid', message: 'Token issuer is not a known project' };
}
