import { SQS_MAX_DELAY_SECONDS } from '../config/timing.ts';
import { sqsQueueSender, type QueueSender } from '../queues/sender.ts';
import type { QueueName } from '../store/queues.ts';
import { isScheduleConflict, scheduler, type Scheduler } from './scheduler.ts';

/**
 * "Deliver this message at time T", the one way: SQS delays reach 15 minutes; later, a one-time EventBridge Scheduler
 * schedule (scheduler.ts) onto the same queue. Used by the vessel trigger (lambdas/vessels/trigger.ts) and the
 * webhook attempts (lambdas/deliveries/message.ts).
 */

/** Whether something due at `at` (epoch ms) is further ahead than a queue delay reaches, and so needs a schedule. */
export const needsSchedule = (at: number, now: Date) => at - now.getTime() > SQS_MAX_DELAY_SECONDS * 1000;

/**
 * Whole seconds of queue delay until `at` (epoch ms), at most SQS's 15 minutes. Rounded `down` (default), a message
 * may arrive up to a second early and its consumer waits out the rest; rounded `up`, it never arrives early.
 */
export function delayUntil(at: number, now: Date, round: 'down' | 'up' = 'down'): number {
  const seconds = (at - now.getTime()) / 1000;
  return Math.min(SQS_MAX_DELAY_SECONDS, Math.max(0, round === 'down' ? Math.floor(seconds) : Math.ceil(seconds)));
}

export interface Delivery {
  queue: QueueName;
  /** The message, serialised as JSON (the same bytes whether it goes through a delay or a schedule). */
  message: unknown;
  /** When it is due (epoch ms); now or earlier means at once. */
  at: number;
  now: Date;
  /** The schedule's name, used only when `at` is beyond a queue delay: unique per delivery (64 characters at most). */
  scheduleName: string;
  /** How the queue delay rounds (`delayUntil`): `down`, a second early at most; `up`, never early. */
  round: 'down' | 'up';
  /** A schedule fires this long before `at` (its consumer puts the early message back for the rest). */
  leadMs?: number;
  /**
   * A schedule of that name exists already. `ignore`: it is this delivery's own, made by an earlier hand-off that is
   * being repeated. Otherwise the ScheduleConflictError is thrown.
   */
  onConflict?: 'ignore' | 'throw';
}

/** The queue and the scheduler to deliver through: the instance's, unless a test gives its own. */
export interface DeliveryChannels {
  sender?: QueueSender;
  scheduler?: Scheduler;
}

/** Puts `message` on `queue` for `at`: a (delayed) message within SQS's 15 minutes, else a one-time schedule. */
export async function deliverAt(d: Delivery, channels: DeliveryChannels = {}): Promise<void> {
  if (!needsSchedule(d.at, d.now)) {
    await (channels.sender ?? sqsQueueSender()).send(d.queue, d.message, { delaySeconds: delayUntil(d.at, d.now, d.round) });
    return;
  }
  try {
    await (channels.scheduler ?? scheduler()).schedule({
      name: d.scheduleName,
      at: new Date(d.at - (d.leadMs ?? 0)),
      body: JSON.stringify(d.message),
      queue: d.queue,
    });
  } catch (err) {
    if (!(d.onConflict === 'ignore' && isScheduleConflict(err))) throw err;
  }
}
