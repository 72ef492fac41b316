import { MAX_DELAY_SECONDS } from '../queues/sender.ts';

/**
 * When a message should be delivered at a time: SQS delays reach 15 minutes; later, EventBridge Scheduler
 * (scheduler.ts). Shared by the vessel trigger (lambdas/vessels/trigger.ts) and webhook retries
 * (lambdas/webhooks/message.ts).
 */

/** Whether something due at `at` (epoch ms) is further ahead than a queue delay reaches, and so needs a schedule. */
export const needsSchedule = (at: number, now: Date) => at - now.getTime() > MAX_DELAY_SECONDS * 1000;

/**
 * Whole seconds of queue delay until `at` (epoch ms), at most SQS's 15 minutes. Rounded `down` (default), a message
 * may arrive up to a second early and its consumer waits out the rest; rounded `up`, it never arrives early.
 */
export function delayUntil(at: number, now: Date, round: 'down' | 'up' = 'down'): number {
  const seconds = (at - now.getTime()) / 1000;
  return Math.min(MAX_DELAY_SECONDS, Math.max(0, round === 'down' ? Math.floor(seconds) : Math.ceil(seconds)));
}
