import { clock } from '../config/clock.ts';
import { logger } from '../observability/logger.ts';
import { handOffCallback } from './callback.ts';
import { firstRound } from '../deliveries/record.ts';
import type { StoredVessel, VesselOutput } from './record.ts';
import { keptOutput } from './size.ts';
import type { VesselStatus } from './states.ts';
import { endedAttributes, moveVessel, redriveAt, touchVessel } from './store.ts';

export type EndStatus = Extract<VesselStatus, 'COMPLETED' | 'FAILED' | 'CANCELED'>;

/**
 * Ends a vessel — one conditional move to COMPLETED, FAILED or CANCELED from `from` (and `when`), its output kept
 * within its share of the item (size.ts: too long a text is truncated and flagged, never refused) — and hands its
 * callback to the webhook sender (its delivery record starts as `pending`). A vessel with a callback stays in the reconcile index until the hand-off is done,
 * so a hand-off lost to a crash between the two writes is made by the reconciler. Returns the ended vessel, or
 * undefined when the condition did not hold (someone else moved it first).
 */
export async function endVessel(
  vessel: StoredVessel,
  end: {
    to: EndStatus;
    from: VesselStatus | readonly VesselStatus[];
    when?: { expression: string; values: Record<string, unknown> };
    output: VesselOutput;
    now: Date;
  },
): Promise<StoredVessel | undefined> {
  // A callback's delivery starts with the end: pending, in the record at once; watched until handed off.
  const watch = vessel.callback ? { reconcileAt: redriveAt(end.now.getTime()), webhook: firstRound() } : {};
  const moved = await moveVessel(vessel.vesselId, {
    to: end.to,
    from: end.from,
    ...(end.when ? { when: end.when } : {}),
    set: { ...endedAttributes(keptOutput(end.output), end.now), ...watch },
    remove: ['runId', 'parkedFor', ...(vessel.callback ? [] : ['reconcileShard', 'reconcileAt'])],
    now: end.now,
  });
  if (!moved.ok) return undefined;
  const ended = moved.vessel;
  if (ended.callback) await handOff(ended);
  return ended;
}

/**
 * Hands an ended vessel's callback to the webhook queue, and notes it. The vessel stays in the reconcile index, as its
 * end (or a redelivery) put it there, while its delivery is pending: looked at again once the hand-off or the next
 * attempt is overdue (docs/webhooks.md, "The delivery record"); the sender takes it out when the delivery is settled.
 * A failed hand-off is made by the reconciler. True when it was handed off.
 */
export async function handOff(ended: StoredVessel): Promise<boolean> {
  try {
    await handOffCallback(ended);
    await touchVessel(ended.vesselId, { status: ended.status, set: { callbackHandedOffAt: clock.now() } });
    return true;
  } catch (err) {
    logger.warn('callback hand-off failed; the reconciler retries it', { vesselId: ended.vesselId, error: err as Error });
    return false;
  }
}
