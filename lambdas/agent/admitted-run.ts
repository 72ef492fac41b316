import { clock } from '../config/clock.ts';
import type { Caller } from '../auth/claims.ts';
import { budgetFigures, readUsage, settle, type Reservation } from '../budgets/ledger.ts';
import { accessRecord, addCompute } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import type { RunAdmission } from '../plans/admission.ts';
import { giveBackLease, keepLeaseAlive } from '../plans/leases.ts';
import type { Ticker } from '../scheduling/watch.ts';
import type { SessionOptions } from './options.ts';
import type { RunEvent } from './result.ts';
import { runAgent, runAgentSegment, type RunInput, type RunOutcome } from './run.ts';

/**
 * One agent run under an admission (plans/admission.ts), for every caller of the runtime — a /prompt request, an
 * executing vessel, a /ws turn — so they hold, renew and give back the same things the same way:
 * - the lease is renewed while the run lives and given back when it ends, which wakes a vessel parked for the slot;
 * - the run's wall-clock seconds, rounded up, settle its compute reservation (never above what it held) and are
 *   added to the developer's month;
 * - the model calls are reserved and settled by the metered call itself (metering/call.ts).
 * Each model call's charge and the compute seconds charged are added to the access record of the unit of work the run
 * belongs to (observability/access-log.ts): the /prompt request's, the vessel run's, the /ws turn's.
 */

export type Admitted = Extract<RunAdmission, { ok: true }>;

export interface AdmittedRunInput {
  caller: Caller;
  /** An admission taken with `maxSeconds` (so it reserved the run's compute). */
  admission: Admitted;
  message: RunInput['message'];
  /** The conversation before `message` (a /ws session's). */
  history?: RunInput['history'];
  options: SessionOptions & { model: string };
  /** Epoch milliseconds the admission was taken at: the run's compute is counted from here. */
  started: number;
  signal: AbortSignal;
  onEvent?: (event: RunEvent) => void;
  /** The lease could not be renewed (it expired or was taken away): the run should stop. */
  onLeaseLost?: (reason: 'expired' | 'not_held') => void;
  /** RunInput's: told when the first model call is admitted or refused for the user's budget. */
  onFirstCall?: RunInput['onFirstCall'];
  /** The caller's watch timer (a vessel's, a /ws turn's): the lease renewals ride on it, so the run has one timer. */
  ticker?: Ticker;
}

export function runAdmitted(input: AdmittedRunInput): Promise<Extract<RunOutcome, { kind: 'ended' }>> {
  return admitted(input, runAgent);
}

/** A run that may pause for client-side tools (a /ws turn): what it holds is given back at the pause as at an end. */
export function runAdmittedSegment(input: AdmittedRunInput): Promise<RunOutcome> {
  return admitted(input, runAgentSegment);
}

async function admitted<T extends RunOutcome>(input: AdmittedRunInput, run: (input: RunInput) => Promise<T>): Promise<T> {
  const { admission, started } = input;
  const compute = admission.compute;
  if (!compute) throw new Error("runAdmitted needs an admission taken with maxSeconds (it reserves the run's compute)");
  const heartbeat = keepLeaseAlive(admission.lease, {
    ...(input.onLeaseLost ? { onLost: input.onLeaseLost } : {}),
    ...(input.ticker ? { ticker: input.ticker } : {}),
  });
  // A run refused for the user's budget at its first model call is refused as a whole: no compute is charged.
  let refusedForBudget = false;
  let outcome: T;
  try {
    outcome = await run({
      caller: input.caller,
      message: input.message,
      ...(input.history ? { history: input.history } : {}),
      options: input.options,
      deadline: started + compute.seconds * 1000,
      signal: input.signal,
      ...(input.onEvent ? { onEvent: input.onEvent } : {}),
      ...(input.onFirstCall ? { onFirstCall: input.onFirstCall } : {}),
    });
    refusedForBudget = outcome.kind === 'ended' && outcome.refusedForBudget !== undefined;
  } finally {
    heartbeat.stop();
    // Giving the lease back wakes whoever waits for the developer's slot (plans/leases.ts `onCapacityFreed`).
    const [, charged] = await Promise.allSettled([giveBackLease(heartbeat.current()), chargeCompute(compute, started, refusedForBudget)]);
    if (charged.status === 'fulfilled' && charged.value > 0) addCompute(accessRecord(), charged.value);
  }
  if (outcome.kind === 'ended' && outcome.refusedForBudget && 'budget' in outcome.refusedForBudget) {
    // The refusal's figures were read with the run's own compute hold in them: told as the user's meters are now.
    const budget = budgetFigures(input.caller, await readUsage(input.caller));
    return { ...outcome, refusedForBudget: { ...outcome.refusedForBudget, budget } };
  }
  return outcome;
}

/**
 * The run's wall-clock seconds, rounded up (none for a run refused before its first model call), on the user's compute meter (settling the run's reservation, never above
 * what it held) and, through the reservation, on the developer's month (budgets/ledger.ts `settle`). Answers the
 * seconds charged (0 when the settlement failed: the sweep charges the hold later).
 */
async function chargeCompute(compute: { reservation: Reservation; seconds: number }, started: number, refused: boolean): Promise<number> {
  const seconds = refused ? 0 : Math.min(Math.max(1, Math.ceil((clock.now() - started) / 1000)), compute.seconds);
  try {
    await settle(compute.reservation, { ai: 0, compute: seconds });
    return seconds;
  } catch (err) {
    // The hold stays and the sweep charges it at its full amount, to the user and the developer: never less than used.
    logger.error('charging compute failed', { error: err as Error, seconds });
    return 0;
  }
}
