import * as z from 'zod';
import { SCHEDULE_LEAD_SECONDS } from '../config/timing.ts';
import { sqsQueueSender } from '../queues/sender.ts';
import { deliverAt } from '../scheduling/delay.ts';
import type { StoredVessel } from './record.ts';

/**
 * How a vessel is woken: a message on the run queue naming it. The table decides what happens (the queue is only a
 * trigger), so a message may be late, early, duplicated or lost — the executor checks, the reconciler re-drives.
 *
 * Due within SQS's 15-minute delay: a delayed message. Later: a one-time EventBridge Scheduler schedule that puts
 * the message on the run queue SCHEDULE_LEAD_SECONDS before the vessel is due; the executor puts an early message
 * back with the exact remaining delay, so the precision is the queue's (about a second), not the scheduler's
 * (docs/incubate.md, "Scheduling precision").
 */

export const RunMessage = z.object({
  vesselId: z.string().min(1),
  /** The vessel's current trigger; a message naming an older one is stale. */
  driveId: z.string().min(1),
  /** How many times the vessel has waited for capacity (the back-off grows with it). */
  waits: z.number().int().min(0).optional(),
});
export type RunMessage = z.infer<typeof RunMessage>;

/** The name of the schedule a vessel's trigger would use (unique per trigger; EventBridge allows 64 characters). */
export const scheduleNameOf = (v: Pick<StoredVessel, 'vesselId' | 'driveId'>) => `vessel-${v.vesselId}-${v.driveId.slice(0, 8)}`;

/** Sends the vessel's trigger for its due time: a (delayed) run message, or a schedule for a far one. */
export async function triggerVessel(v: Pick<StoredVessel, 'vesselId' | 'driveId' | 'scheduledFor'>, now: Date): Promise<void> {
  const message: RunMessage = { vesselId: v.vesselId, driveId: v.driveId };
  // Rounded down: a message may come up to a second early, and the executor waits it out or puts it back.
  await deliverAt({ queue: 'run', message, at: v.scheduledFor, now, scheduleName: scheduleNameOf(v), round: 'down', leadMs: SCHEDULE_LEAD_SECONDS * 1000 });
}

/** A run message, delivered after `delaySeconds` (whole seconds, at most SQS's 15 minutes: see `delayUntil`). */
export async function sendRunMessage(message: RunMessage, delaySeconds = 0): Promise<void> {
  await sqsQueueSender().send('run', message, { delaySeconds });
}
