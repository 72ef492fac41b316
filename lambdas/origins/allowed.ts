import type { Caller } from '../auth/claims.ts';
import { env } from '../config/env.ts';
import { cachedProject } from '../registry/project-cache.ts';
import type { Refusal } from '../refusals/refusal.ts';
import { originMatches } from './pattern.ts';

/**
 * Whether a request's `Origin` may be served (DESIGN §10, "Origins per project"). Three lists, each of which must
 * allow it: the deployment's CORS_ORIGINS (checked for every request, token or not: `deploymentAllows`), the
 * project's origins and the token's own `origins` claim (checked once the token is known: `originRefusal`).
 *
 * A request without `Origin` — a server, a CLI, a native app — is not a page's, and no list applies to it. The check
 * is defence in depth, not authentication: a browser cannot forge `Origin`, a script outside one can (docs/browser.md).
 */

/** Whether the deployment serves pages of this origin at all (CORS_ORIGINS). */
export function deploymentAllows(origin: string): boolean {
  const allowed = env().CORS_ORIGINS;
  return allowed === '*' || originMatches(origin, allowed);
}

/** The refusal of a page whose origin the deployment does not serve, or undefined (every request, before routing). */
export function deploymentRefusal(origin: string | null): Refusal | undefined {
  return origin !== null && !deploymentAllows(origin) ? refusal(origin, 'this gateway (CORS_ORIGINS)') : undefined;
}

/**
 * The refusal of a request whose page the token or its project does not allow, or undefined. The project record is
 * the cached one every token verification just read; a refusal re-reads it first (at most once a second per project,
 * project-cache.ts), so an origin the owner has just allowed works at once.
 */
export async function originRefusal(caller: Caller, origin: string | null | undefined): Promise<Refusal | undefined> {
  if (origin === null || origin === undefined) return undefined;
  const deployment = deploymentRefusal(origin);
  if (deployment) return deployment;
  if (caller.origins && !originMatches(origin, caller.origins)) return refusal(origin, 'this token (its origins claim)');
  let project = await cachedProject(caller.projectId);
  if (project?.origins && !originMatches(origin, project.origins)) project = await cachedProject(caller.projectId, { refresh: true });
  if (project?.origins && !originMatches(origin, project.origins)) return refusal(origin, `project ${caller.projectId} (gateway project set-origins)`);
  return undefined;
}

function refusal(origin: string, by: string): Refusal {
  return { kind: 'origin_not_allowed', origin, message: `Requests from origin ${JSON.stringify(origin.slice(0, 300))} are not allowed by ${by}` };
}
