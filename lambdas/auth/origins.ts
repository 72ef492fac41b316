import type { Caller } from './claims.ts';
import { env } from '../config/env.ts';
import type { Project } from '../registry/model.ts';
import type { Refusal } from '../refusals/refusal.ts';
import { originMatches } from '../origins/pattern.ts';

/**
 * Whether a request's `Origin` may be served (DESIGN §10, "Origins per project"). Three lists, each of which must
 * allow it: the deployment's CORS_ORIGINS (checked for every request, token or not: `deploymentAllows`), the
 * project's origins and the token's own `origins` claim (checked once the token is known: `projectOriginRefusal`).
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
 * The refusal of a page whose origin the token or its project does not allow, or undefined: pure, on the project
 * record the token's verification just read from the cache (auth/authenticate.ts re-reads it once before refusing).
 * The deployment's list is checked before routing (`deploymentRefusal`).
 */
export function projectOriginRefusal(caller: Caller, project: Pick<Project, 'origins'> | undefined, origin: string | null): Refusal | undefined {
  if (origin === null) return undefined;
  if (caller.origins && !originMatches(origin, caller.origins)) return refusal(origin, 'this token (its origins claim)');
  if (project?.origins && !originMatches(origin, project.origins)) return refusal(origin, `project ${caller.projectId} (gateway project set-origins)`);
  return undefined;
}

function refusal(origin: string, by: string): Refusal {
  return { kind: 'origin_not_allowed', origin, message: `Requests from origin ${JSON.stringify(origin.slice(0, 300))} are not allowed by ${by}` };
}
