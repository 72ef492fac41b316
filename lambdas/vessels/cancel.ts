import { setTimeout as sleep } from 'node:timers/promises';
import { clock } from '../config/clock.ts';
import type { Caller } from '../auth/claims.ts';
import { CANCEL_POLL_MS, CANCEL_WAIT_MS } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import type { Refusable, Refusal } from '../refusals/refusal.ts';
import { scheduler } from '../scheduling/scheduler.ts';
import { endVessel } from './end.ts';
import { endedWithoutRun, type StoredVessel } from './record.ts';
import { isWaiting, VesselStates } from './states.ts';
import { getVessel, touchVessel } from './store.ts';

/**
 * Who may see or cancel a vessel: a token of the project and the user that queued it. Anyone else is told it does
 * not exist, exactly as for an unknown id (no existence leak across projects or users).
 */
export async function ownedVessel(caller: Caller | undefined, vesselId: string): Promise<Refusable<{ vessel: StoredVessel }>> {
  const v = caller && vesselId.length <= 128 ? await getVessel(vesselId) : undefined;
  if (!v || !caller || v.projectId !== caller.projectId || v.userId !== caller.userId) return { ok: false, refusal: vesselNotFound(vesselId) };
  return { ok: true, vessel: v };
}

export const vesselNotFound = (vesselId: string): Refusal => ({
  kind: 'vessel_not_found',
  message: `No vessel ${vesselId.slice(0, 128)} for this token: a vessel is visible only with a valid token of the project and user that queued it (Authorization: Bearer <token>)`,
});

/**
 * Cancels a vessel (docs/incubate.md, "Cancel"): waiting (PENDING, QUEUED) → CANCELED at once, its schedule removed;
 * EXECUTING → a cancel request the run sees within CANCEL_POLL_MS, aborting the model call in flight, then CANCELED
 * (answered once that happened, or after CANCEL_WAIT_MS with `cancelRequested`); ended → 409 with its status.
 */
export async function cancelVessel(v: StoredVessel): Promise<Refusable<{ vessel: StoredVessel }>> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const now = new Date(clock.now());
    if (VesselStates.isTerminal(v.status)) {
      return {
        ok: false,
        refusal: {
          kind: 'vessel_not_cancelable',
          status: v.status,
          message: `Vessel ${v.vesselId} has already ended (${v.status}); only a waiting or executing vessel can be canceled`,
        },
      };
    }
    if (isWaiting(v.status)) {
      const ended = await endVessel(v, { to: 'CANCELED', from: v.status, output: endedWithoutRun('canceled', 'The vessel was canceled before it ran'), now });
      if (ended) {
        if (v.scheduleName) await removeSchedule(v.scheduleName);
        return { ok: true, vessel: ended };
      }
    } else {
      const requested = await touchVessel(v.vesselId, { status: 'EXECUTING', set: { cancelRequested: true }, now });
      if (requested.ok) return { ok: true, vessel: await awaitEnd(requested.vessel) };
    }
    const again = await getVessel(v.vesselId);
    if (!again) return { ok: false, refusal: vesselNotFound(v.vesselId) };
    v = again;
  }
  throw new Error(`Vessel ${v.vesselId} kept changing while it was being canceled`);
}

async function awaitEnd(v: StoredVessel): Promise<StoredVessel> {
  const until = clock.now() + CANCEL_WAIT_MS;
  let latest = v;
  while (clock.now() < until) {
    await sleep(CANCEL_POLL_MS / 2);
    latest = (await getVessel(v.vesselId)) ?? latest;
    if (VesselStates.isTerminal(latest.status)) break;
  }
  return latest;
}

/** A canceled vessel's schedule is removed; one that cannot be removed fires into a canceled vessel, which ignores it. */
async function removeSchedule(name: string): Promise<void> {
  try {
    await scheduler().cancel(name);
  } catch (err) {
    logger.warn("removing a canceled vessel's schedule failed; its trigger will find the vessel canceled", { scheduleName: name, error: err as Error });
  }
}
