import * as z from 'zod';
import { clock } from '../config/clock.ts';
import { deliverAt } from '../scheduling/delay.ts';

/**
 * The webhook queue's message: "make attempt N of round R of this delivery, not before T". A delivery is a vessel's
 * callback (`vesselId`) or a budget alert (`alertId`, lambdas/alerts/record.ts); everything else — the URL, the
 * encrypted secret, the body — is read from that item, which holds the delivery's state (record.ts). The producers
 * (a vessel's end, an alert that fired) hand a delivery off with it and the webhook sender (lambdas/webhooks/sender.ts)
 * consumes it.
 * Retries due within SQS's 15-minute delay are delayed messages; later ones are one-time EventBridge Scheduler
 * schedules onto the webhook queue, named after the attempt so a repeated hand-off cannot schedule it twice.
 */
const Attempt = {
  round: z.number().int().min(1).default(1),
  attempt: z.number().int().min(1).default(1),
  /** Epoch ms: a message that arrives earlier (a schedule fires to the second) is put back for the rest. */
  notBefore: z.number().int().optional(),
};
export const WebhookMessage = z.union([z.object({ vesselId: z.string().min(1), ...Attempt }), z.object({ alertId: z.string().min(1), ...Attempt })]);
export type WebhookMessage = z.infer<typeof WebhookMessage>;

/** The id of the item a message is about: a vessel's, or an alert's (`alert_…`: the two never collide). */
export const deliveryIdOf = (m: WebhookMessage): string => ('vesselId' in m ? m.vesselId : m.alertId);

/** The schedule of a far attempt (EventBridge allows 64 characters: 20 + an id of at most 38 characters). */
const scheduleNameOf = (m: WebhookMessage) => `webhook-${deliveryIdOf(m)}-${m.round}-${m.attempt}`;

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
