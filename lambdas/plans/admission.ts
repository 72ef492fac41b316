import { clock } from '../config/clock.ts';
import { unknownIssuer } from '../auth/authenticate.ts';
import type { Caller } from '../auth/claims.ts';
import { revocationRefusal } from '../auth/revocations.ts';
import { budgetFigures, readUsage, reserve, secondsToReset, settle, type Reservation, type WindowUsage } from '../budgets/ledger.ts';
import type { Refusable, Refusal } from '../refusals/refusal.ts';
import { cachedProject } from '../registry/project-cache.ts';
import type { Developer } from '../registry/model.ts';
import { getDeveloper } from '../registry/registry.ts';
import { developerComputeUsed } from '../budgets/developer-month.ts';
import { developerAllowance, type DeveloperAllowance } from './compute.ts';
import { acquireLease, giveBackLease, releaseLease, type HeldLease, type Lease, type RunKind } from './leases.ts';
import { tierFor, type Tier } from './tiers.ts';

/**
 * The one admission step of every run — a /prompt run, an executing vessel, a /ws turn (docs/contract.md,
 * "Developers and plans"):
 * 1. the developer's month of compute must not be spent (402);
 * 2. a concurrency lease is taken at the tier the developer's plan gives at this moment (429; an operator's plan
 *    change counts from the next run);
 * 3. with `maxSeconds`, the user's budget: neither meter may be spent (429 user_budget_exhausted), and the run's
 *    compute is reserved — as many seconds as remain, up to `maxSeconds`, which is then the run's deadline.
 * The run holds the lease while it lives (`keepLeaseAlive`), gives it back when it ends (`giveBackLease`), and settles
 * the compute reservation with the seconds it used, which charges the developer's month too (budgets/ledger.ts).
 */
export type RunAdmission = Refusable<{ lease: Lease; tier: Tier; developerId: string; compute?: RunCompute }>;

/** The run's compute held in the user's budget: `seconds` is the run's deadline. */
interface RunCompute {
  reservation: Reservation;
  seconds: number;
}

export async function admitRun(
  caller: Caller,
  run: { sessionId: string; kind: RunKind; maxSeconds?: number },
  now = new Date(clock.now()),
): Promise<RunAdmission> {
  const plan = await developerPlan(caller, now);
  if (!plan.ok) return plan;
  const { developer } = plan;
  const tier = tierFor(developer.planSeconds);
  const holder = { sessionId: run.sessionId, kind: run.kind, userId: caller.userId, projectId: caller.projectId };
  const acquired = await acquireLease(developer.developerId, holder, tier.maxConcurrency, now);
  if (!acquired.ok) return { ok: false, refusal: concurrencyRefusal(acquired.live, acquired.max, caller.projectId) };
  if (run.maxSeconds === undefined) return { ok: true, lease: acquired.lease, tier, developerId: developer.developerId };
  const reserved = await reserveRunCompute(caller, developer.developerId, run.maxSeconds, now, run.kind === 'vessel');
  if (!reserved.ok) {
    // Taken a moment ago and never run on: removed as it was, with no wake for those waiting for capacity.
    await releaseLease(acquired.lease);
    return reserved;
  }
  return { ok: true, lease: acquired.lease, tier, developerId: developer.developerId, compute: reserved.compute };
}

/**
 * Step 1 alone: the caller's project and its developer, refused when the developer's month of compute is spent.
 * `/incubate` checks it at enqueue (a vessel that could not run is refused at once, with the same 402).
 */
export async function developerPlan(caller: Caller, now = new Date(clock.now())): Promise<Refusable<{ developer: Developer }>> {
  const project = await cachedProject(caller.projectId);
  if (!project) return { ok: false, refusal: unknownIssuer() };
  // A run admitted later than its request (a vessel when it is due, a /ws turn) meets a block or revocation made since.
  const revoked = revocationRefusal(caller, project);
  if (revoked) return { ok: false, refusal: revoked };
  const [developer, used] = await Promise.all([getDeveloper(project.developerId), developerComputeUsed(project.developerId, now)]);
  // A project always names an existing developer (the registry refuses otherwise): a missing one is broken data.
  if (!developer) throw new Error(`Developer ${project.developerId} of project ${project.projectId} does not exist`);
  const allowance = developerAllowance(developer, used);
  if (!allowance.allowed) return { ok: false, refusal: developerBudgetRefusal(allowance) };
  return { ok: true, developer };
}

/**
 * Gives back what an admission took, for a run that will not start after all: the compute hold, then the lease
 * (`giveBackLease`, which wakes whoever waits for the slot): a vessel woken for it may be the same user's, and must find
 * the hold gone.
 */
export async function withdrawAdmission(admission: Extract<RunAdmission, { ok: true }>): Promise<void> {
  try {
    if (admission.compute) await settle(admission.compute.reservation, { ai: 0, compute: 0 });
  } finally {
    await giveBackLease(admission.lease);
  }
}

/**
 * Reserves the run's compute: what remains of the user's compute budget, up to `maxSeconds` (a held amount the run
 * must not outlive). Refused when either meter is spent — an AI budget with nothing left cannot pay for a turn. An AI
 * budget only HELD by the user's requests in flight does not refuse the run: its model calls reserve their own worst
 * case, and wait for those holds to settle (metering/reservation.ts, docs/contract.md "Holds wait"), so a burst of runs
 * is served until the budget is really spent; the compute written here is held against the compute budget alone.
 * A vessel (`aiHeldRefuses`) is the exception: nobody waits on a line for it, so rather than hold a slot while its
 * first call waits, it is refused `budget_held` and waits in its queue, re-tried with a growing back-off
 * (vessels/executor.ts), for as long as the holds last.
 */
async function reserveRunCompute(
  caller: Caller,
  developerId: string,
  maxSeconds: number,
  now: Date,
  aiHeldRefuses: boolean,
): Promise<Refusable<{ compute: RunCompute }>> {
  let usage = await readUsage(caller, now);
  for (let attempt = 0; attempt < 3; attempt++) {
    const figures = budgetFigures(caller, usage);
    if (figures.compute.remaining <= 0 || usage.used.ai >= caller.budget.ai || (aiHeldRefuses && figures.ai.remaining <= 0)) break;
    const seconds = Math.min(figures.compute.remaining, maxSeconds);
    // The hold names the developer: its seconds go to their month when it is settled, by the run or by the sweep.
    const held = await reserve({ caller, amounts: { ai: 0, compute: seconds }, enforce: aiHeldRefuses ? ['compute', 'ai'] : ['compute'], now, developerId });
    if (held.ok) return { ok: true, compute: { reservation: held.reservation, seconds } };
    usage = held.usage;
  }
  return { ok: false, refusal: userBudgetRefusal(caller, usage, now) };
}

/**
 * The interface's 429 when the user's budget cannot hold a run, with both meters' figures: `budget_exhausted` when a
 * meter is spent (only the window's reset helps), `budget_held` when what is left is held by the user's runs in flight
 * (worth retrying shortly: a vessel waits for it).
 */
export function userBudgetRefusal(caller: Caller, usage: WindowUsage, now: Date): Refusal {
  const figures = budgetFigures(caller, usage);
  const spent = (['ai', 'compute'] as const).filter((m) => figures[m].used >= figures[m].budget);
  if (spent.length === 0) {
    return {
      kind: 'budget_held',
      message: `The user's budget for the current ${caller.budget.window} window is fully held by runs in flight; retry when they end`,
      budget: figures,
    };
  }
  const retryAfterSeconds = secondsToReset(usage, now);
  const what = spent.map((m) =>
    m === 'ai' ? `AI (${figures.ai.used} of ${figures.ai.budget} microdollars)` : `compute (${figures.compute.used} of ${figures.compute.budget} seconds)`,
  );
  return {
    kind: 'budget_exhausted',
    message: `The user's budget is used up for the current ${caller.budget.window} window: ${what.join(' and ')}`,
    budget: figures,
    ...(retryAfterSeconds === undefined ? {} : { retryAfterSeconds }),
  };
}

/** The interface's 402: the month's compute across the developer's projects has reached planSeconds + poolSeconds. */
export function developerBudgetRefusal(allowance: DeveloperAllowance): Refusal {
  const { used, available, planSeconds, poolSeconds } = allowance;
  return { kind: 'developer_budget_exhausted', used, available, planSeconds, poolSeconds };
}

/**
 * The interface's 429: every lease the tier allows is held. `active` counts every live lease of the developer, across
 * their projects; `sessions` lists, oldest first, only those of the caller's own project (`projectId`): another
 * project's end-user ids and run ids are not this caller's to see, so its leases are counted and not shown.
 */
export function concurrencyRefusal(live: HeldLease[], max: number, projectId: string): Refusal {
  const sessions = live.filter((l) => l.projectId === projectId).map(({ sessionId, userId, ageMs }) => ({ sessionId, userId, ageMs }));
  return { kind: 'concurrent_limit_reached', active: live.length, max, sessions };
}
