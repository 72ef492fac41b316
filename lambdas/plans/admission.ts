import { unknownIssuer } from '../auth/authenticate.ts';
import type { Caller } from '../auth/claims.ts';
import type { Refusal } from '../refusals/refusal.ts';
import { cachedProject } from '../registry/project-cache.ts';
import { getDeveloper } from '../registry/registry.ts';
import { developerAllowance, developerComputeUsed, type DeveloperAllowance } from './compute.ts';
import { acquireLease, type Lease, type LiveLease, type RunKind } from './leases.ts';
import { tierFor, type Tier } from './tiers.ts';

/**
 * The one admission step of every run — a /prompt run, an executing vessel, a /ws turn (docs/contract.md,
 * "Developers and plans"): the developer's month of compute must not be spent, then a concurrency lease is taken at
 * the tier the developer's plan gives at this moment (an operator's plan change counts from the next run). The run
 * holds the lease while it lives (`keepLeaseAlive`) and releases it when it ends (`releaseLease`).
 */
export type RunAdmission = { ok: true; lease: Lease; tier: Tier } | { ok: false; refusal: Refusal };

export async function admitRun(caller: Caller, run: { sessionId: string; kind: RunKind }, now = new Date()): Promise<RunAdmission> {
  const project = await cachedProject(caller.projectId);
  if (!project) return { ok: false, refusal: unknownIssuer().refusal };
  const [developer, used] = await Promise.all([getDeveloper(project.developerId), developerComputeUsed(project.developerId, now)]);
  // A project always names an existing developer (the registry refuses otherwise): a missing one is broken data.
  if (!developer) throw new Error(`Developer ${project.developerId} of project ${project.projectId} does not exist`);
  const allowance = developerAllowance(developer, used);
  if (!allowance.allowed) return { ok: false, refusal: developerBudgetRefusal(allowance) };
  const tier = tierFor(developer.planSeconds);
  const acquired = await acquireLease(developer.developerId, { ...run, userId: caller.userId, projectId: caller.projectId }, tier.maxConcurrency, now);
  if (!acquired.ok) return { ok: false, refusal: concurrencyRefusal(acquired.live, acquired.max) };
  return { ok: true, lease: acquired.lease, tier };
}

/** The interface's 402: the month's compute across the developer's projects has reached planSeconds + poolSeconds. */
export function developerBudgetRefusal(allowance: DeveloperAllowance): Refusal {
  const { used, available, planSeconds, poolSeconds } = allowance;
  return { kind: 'developer_budget_exhausted', used, available, planSeconds, poolSeconds };
}

/** The interface's 429: every lease the tier allows is held; `sessions` are the live leases, oldest first. */
export function concurrencyRefusal(live: LiveLease[], max: number): Refusal {
  return { kind: 'concurrent_limit_reached', active: live.length, max, sessions: live };
}
