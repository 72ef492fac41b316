import { setTimeout as sleep } from 'node:timers/promises';
import { clock } from '../config/clock.ts';
import { runAdmitted } from '../agent/admitted-run.ts';
import { END_WRITE_BACKOFF_MS, HELD_BUDGET_BACKOFF_MAX_SECONDS, leaseTtlMs, MAX_RUN_SECONDS, WAIT_OUT_MS } from '../config/timing.ts';
import type { RunResult } from '../agent/result.ts';
import { withAccessRecord, writeAccessLog, type VesselRunAccess } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { admitRun, withdrawAdmission, type RunAdmission } from '../plans/admission.ts';
import { conjureRefusalParts } from '../refusals/conjure.ts';
import { messageOf } from '../refusals/describe.ts';
import type { Refusal } from '../refusals/refusal.ts';
import { endVessel } from './end.ts';
import { isItemTooLarge } from '../store/item-size.ts';
import { endedWithoutRun, runOptionsOf, runOutput, type StoredVessel, type VesselOutput } from './record.ts';
import { keptOutput, MAX_VESSEL_OUTPUT_BYTES } from './size.ts';
import { isWaiting } from './states.ts';
import { parkVessel } from './park.ts';
import { getVessel, moveVessel } from './store.ts';
import { delayUntil } from '../scheduling/delay.ts';
import { putBackIfEarly } from '../scheduling/early.ts';
import { RunMessage, sendRunMessage } from './trigger.ts';
import { watchExecution } from './watch.ts';

/**
 * The run queue's consumer (docs/incubate.md, "Execution"). A message only says "look at vessel X"; the table says
 * what to do:
 * - gone, ended, already executing, or a stale trigger → nothing (a duplicate delivery never runs a vessel twice);
 * - early → put back with the remaining delay (a second or less is waited out here);
 * - due → the admission step (plan, lease, the user's budget): every slot taken → parked in the developer's line
 *   (park.ts: no message left in the queue; woken when a run of the developer ends); the user's budget only held by
 *   their runs in flight → the message comes back after a growing, jittered back-off (a new message, so waiting never
 *   counts as a failed receive); a spent budget or plan → FAILED;
 * - admitted → one conditional move to EXECUTING, then the /prompt agent runtime under the admission, watched for a
 *   cancel; the end is one conditional move to COMPLETED, FAILED or CANCELED (only by this execution).
 * A vessel runs at most once: an execution that does not write its end — it died, lost its lease, or could not store
 * its end — leaves the vessel to the reconciler, which ends it FAILED and never runs it again (reconciler.ts).
 * Each run, and each vessel ended here without one (refused when due), logs one access line (`vessel_run`:
 * observability/access-log.ts) with its outcome and its whole cost, as charged.
 */

/** Tries at writing a run's end before the message is failed (and the reconciler ends the vessel FAILED). */
const END_WRITE_ATTEMPTS = 4;

/**
 * The output's size at each try of an end refused for its size: its share of the item (size.ts), then 4 KiB, then
 * the figures alone (no text). Each is flagged `truncated` when it cut something.
 */
const END_OUTPUT_BYTES = [MAX_VESSEL_OUTPUT_BYTES, 4_096, 0] as const;

/** Back-off while the user's budget is held: 1 s, doubling per wait, at most 30 s, jittered between half and all of it. */
export function heldBudgetBackoffSeconds(waits: number, random = Math.random()): number {
  const base = Math.min(HELD_BUDGET_BACKOFF_MAX_SECONDS, 2 ** Math.min(waits, 10));
  return Math.max(1, Math.ceil(base / 2 + (random * base) / 2));
}

export async function processRunMessage(body: unknown): Promise<void> {
  emit('VesselTriggers', 1);
  const parsed = RunMessage.safeParse(body);
  if (!parsed.success) {
    // Not a trigger this consumer understands: retrying would not change it.
    logger.warn('run message dropped: not a vessel trigger');
    return;
  }
  const message = parsed.data;
  const vessel = await getVessel(message.vesselId);
  if (!vessel || vessel.driveId !== message.driveId || !isWaiting(vessel.status)) return;

  const putBack = () => sendRunMessage(message, delayUntil(vessel.scheduledFor, new Date(clock.now())));
  if (await putBackIfEarly({ due: vessel.scheduledFor, now: clock.now(), putBack, waitOutMs: WAIT_OUT_MS })) return;

  const now = new Date(clock.now());
  const admission = await admitRun(vessel.caller, { sessionId: vessel.vesselId, kind: 'vessel', maxSeconds: MAX_RUN_SECONDS }, now);
  if (admission.ok) return start(vessel, admission, now);
  if (admission.refusal.kind !== 'concurrent_limit_reached') return refused(vessel, message, admission.refusal, now);

  // Every slot is taken: park it, no message left behind (park.ts). A slot freed between the refusal and the park
  // would wake nobody, so once parked it looks once more.
  const parked = await parkVessel(vessel, vessel.developerId, now);
  if (!parked.ok) return;
  const again = await admitRun(parked.vessel.caller, { sessionId: vessel.vesselId, kind: 'vessel', maxSeconds: MAX_RUN_SECONDS }, new Date(clock.now()));
  if (again.ok) return start(parked.vessel, again, new Date(clock.now()));
  // Still no room: it waits in the line, woken when a run of the developer ends (or by the reconciler).
}

/** Moves an admitted vessel to EXECUTING (only from the trigger it was read with) and runs it. */
async function start(vessel: StoredVessel, admission: Extract<RunAdmission, { ok: true }>, now: Date): Promise<void> {
  const started = await moveVessel(vessel.vesselId, {
    to: 'EXECUTING',
    from: ['PENDING', 'QUEUED'],
    when: { expression: 'driveId = :drive', values: { ':drive': vessel.driveId } },
    set: {
      runId: admission.lease.leaseId,
      startedAt: vessel.startedAt ?? now.getTime(),
      attempts: vessel.attempts + 1,
      reconcileAt: now.getTime() + leaseTtlMs(),
    },
    remove: ['parkedFor', 'parkedAt'],
    now,
  });
  if (!started.ok) {
    // Canceled, or started by another delivery, between the read and the move: the slot goes to the next in line.
    await withdrawAdmission(admission);
    return;
  }
  await execute(started.vessel, admission, now.getTime());
}

/** No room in the user's budget (held by their runs in flight: wait; spent: end), or no plan: the vessel ends. */
async function refused(vessel: StoredVessel, message: RunMessage, refusal: Refusal, now: Date): Promise<void> {
  if (refusal.kind === 'budget_held') {
    if (vessel.status === 'PENDING') {
      await moveVessel(vessel.vesselId, { to: 'QUEUED', from: 'PENDING', when: { expression: 'driveId = :drive', values: { ':drive': vessel.driveId } }, now });
    }
    const waits = (message.waits ?? 0) + 1;
    await sendRunMessage({ ...message, waits }, heldBudgetBackoffSeconds(waits));
    return;
  }
  const revoked = refusal.kind === 'token' && refusal.code === 'token_revoked';
  const subtype =
    refusal.kind === 'budget_exhausted'
      ? 'error_user_budget_exhausted'
      : refusal.kind === 'developer_budget_exhausted'
        ? 'error_developer_budget_exhausted'
        : revoked
          ? 'error_token_revoked'
          : 'error_during_execution';
  const text =
    refusal.kind === 'token' && !revoked ? 'The vessel could not run: its project no longer exists' : `The vessel could not run: ${messageOf(refusal)}`;
  const ended = await endVessel(vessel, {
    to: 'FAILED',
    from: ['PENDING', 'QUEUED'],
    when: { expression: 'driveId = :drive', values: { ':drive': vessel.driveId } },
    output: endedWithoutRun(subtype, text),
    now,
  });
  if (!ended) return;
  // Nothing ran, and nothing was charged.
  writeAccessLog({
    ...runLine(vessel),
    outcome: 'FAILED',
    subtype,
    error: String(conjureRefusalParts(refusal).body.error),
    costMicrodollars: 0,
    computeSeconds: 0,
  });
}

/** The access line of a vessel's run (or of its end without one): who, what, and — added as the run goes — its cost. */
function runLine(vessel: StoredVessel, runId?: string): VesselRunAccess {
  return {
    unit: 'vessel_run',
    vesselId: vessel.vesselId,
    ...(runId ? { runId } : {}),
    project: vessel.caller.projectId,
    user: vessel.caller.userId,
    model: runOptionsOf(vessel).model,
  };
}

/**
 * Runs an EXECUTING vessel to its end, under its admission, watched for a cancel; logs the run's access line once its
 * end is written (or known not to be this execution's).
 */
async function execute(vessel: StoredVessel, admission: Extract<RunAdmission, { ok: true }>, started: number): Promise<void> {
  // Every model call of the run adds its charge to the line, and the run its compute (agent/admitted-run.ts).
  const line: VesselRunAccess = { ...runLine(vessel, admission.lease.leaseId), costMicrodollars: 0, computeSeconds: 0 };
  try {
    line.outcome = await runAndEnd(vessel, admission, started, line);
  } finally {
    line.outcome ??= 'lost';
    line.totalMs = clock.now() - started;
    writeAccessLog(line);
  }
}

/** The run and its end: answers the end written (its status), or undefined when this execution wrote none. */
async function runAndEnd(
  vessel: StoredVessel,
  admission: Extract<RunAdmission, { ok: true }>,
  started: number,
  line: VesselRunAccess,
): Promise<string | undefined> {
  const runId = admission.lease.leaseId;
  const abort = new AbortController();
  const watch = watchExecution(vessel.vesselId, runId, abort);
  let leaseLost = false;
  let result: RunResult | undefined;
  let refusedForBudget: Refusal | undefined;
  try {
    ({ result, refusedForBudget } = await withAccessRecord(line, () =>
      runAdmitted({
        caller: vessel.caller,
        admission,
        message: vessel.message,
        options: runOptionsOf(vessel),
        started,
        signal: abort.signal,
        ticker: watch.ticker,
        onLeaseLost: () => {
          leaseLost = true;
          abort.abort('The run lost its concurrency lease (the executor stalled)');
        },
      }),
    ));
  } catch (err) {
    logger.error('vessel run failed', { vesselId: vessel.vesselId, error: err as Error });
    line.error = 'internal_error';
  } finally {
    watch.stop();
  }
  if (result) line.subtype = result.subtype;
  if (refusedForBudget) line.error = String(conjureRefusalParts(refusedForBudget).body.error);
  // The vessel moved on without this execution (the reconciler ended it), or this one lost its lease: the end is not
  // this execution's to write. A vessel left EXECUTING stops being renewed, so the reconciler ends it FAILED once its
  // lease has lapsed.
  if (watch.takenOver() || leaseLost) return undefined;
  const canceled = watch.canceled();
  // Refused for the user's budget at its first model call: no call was made and nothing charged, as when the budget
  // is found spent at admission (refused() above).
  const output = refusedForBudget
    ? endedWithoutRun('error_user_budget_exhausted', `The vessel could not run: ${messageOf(refusedForBudget)}`)
    : result
      ? runOutput(result, canceled)
      : endedWithoutRun('error_during_execution', 'The gateway failed during the run');
  const to = canceled ? 'CANCELED' : output.success ? 'COMPLETED' : 'FAILED';
  line.subtype = output.result.subtype;
  // The run has been paid for and will not run again (reconciler.ts): its end is written even through a store hiccup,
  // and an end refused for its size is written again smaller — the text shorter, flagged `truncated` — rather than lost.
  // (The shares of size.ts make that refusal impossible for a vessel queued within them; a vessel stored before them
  // may still meet it.)
  const end = (kept: VesselOutput) =>
    endVessel(vessel, { to, from: 'EXECUTING', when: { expression: 'runId = :run', values: { ':run': runId } }, output: kept, now: new Date(clock.now()) });
  let ended: Awaited<ReturnType<typeof end>>;
  let shrink = 0;
  for (let attempt = 1; ; attempt++) {
    try {
      ended = await end(keptOutput(output, END_OUTPUT_BYTES[shrink]));
      break;
    } catch (err) {
      if (isItemTooLarge(err) && shrink < END_OUTPUT_BYTES.length - 1) {
        shrink++;
        logger.warn("a vessel's end was refused for its size; writing it with a shorter output", {
          vesselId: vessel.vesselId,
          outputBytes: END_OUTPUT_BYTES[shrink],
        });
        continue;
      }
      if (attempt >= END_WRITE_ATTEMPTS) throw err;
      logger.warn("writing a vessel's end failed; retrying", { vesselId: vessel.vesselId, error: err as Error });
      await sleep(END_WRITE_BACKOFF_MS * 2 ** attempt);
    }
  }
  if (!ended) {
    logger.warn('vessel end not written: the vessel moved meanwhile', { vesselId: vessel.vesselId, runId });
    return undefined;
  }
  return to;
}
