import * as z from 'zod';
import { clock } from '../config/clock.ts';
import { deliverAt } from '../scheduling/delay.ts';
import type { StoredVessel } from './record.ts';

/**
 * The webhook queue's message: "make attempt N of round R of this vessel's delivery, not before T". Everything else —
 * the URL, the encrypted secret, the body — is read from the vessel, which holds the delivery's state (delivery.ts).
 * The vessels hand a callback off with it and the webhook sender (lambdas/webhooks/sender.ts) consumes it, as the
 * run queue's message is the trigger's (trigger.ts): it lives with the vessels, which lambdas/webhooks/ depends on.
 * Retries due within SQS's 15-minute delay are delayed messages; later ones are one-time EventBridge Scheduler
 * schedules onto the webhook queue, named after the attempt so a repeated hand-off cannot schedule it twice.
 */
export const WebhookMessage = z.object({
  vesselId: z.string().min(1),
  round: z.number().int().min(1).default(1),
  attempt: z.number().int().min(1).default(1),
  /** Epoch ms: a message that arrives earlier (a schedule fires to the second) is put back for the rest. */
  notBefore: z.number().int().optional(),
});
export type WebhookMessage = z.infer<typeof WebhookMessage>;

/** The schedule of a far attempt (EventBridge allows 64 characters: 20 + a 36-character id at most). */
const scheduleNameOf = (m: WebhookMessage) => `webhook-${m.vesselId}-${m.round}-${m.attempt}`;

/** Puts `message` on the webhook queue for its `notBefore` (now when absent). */
export async function sendWebhookMessage(message: WebhookMessage, now: number = clock.now()): Promise<void> {
  // Rounded up: an attempt never comes before its time (a schedule, to the second, may: the sender puts it back). A
  // schedule of the attempt's name is the one an earlier hand-off of the same attempt made.
  await deliverAt({
    queue: 'webhook',
    message,
    at: message.notBefore ?? now,
    now: new Date(now),
    scheduleName: scheduleNameOf(message),
    round: 'up',
    onConflict: 'ignore',
  });
}

/**
 * Hands an ended vessel's callback to the webhook sender (docs/webhooks.md): the first attempt of its current round,
 * now. Nothing to do without a callback. The vessel carries the delivery's state, so repeating a hand-off (the
 * reconciler after a crash) makes no second delivery.
 */
export async function handOffCallback(v: StoredVessel): Promise<boolean> {
  if (!v.callback) return false;
  await sendWebhookMessage({ vesselId: v.vesselId, round: v.webhook?.round ?? 1, attempt: 1 });
  return true;
}
