import * as z from 'zod';
import { deliverAt } from '../scheduling/delay.ts';

/**
 * The webhook queue's message: "make attempt N of round R of this vessel's delivery, not before T". Everything else —
 * the URL, the encrypted secret, the body — is read from the vessel, which holds the delivery's state (record.ts).
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

/** The Standard Webhooks `webhook-id` of a vessel's delivery: the same for every attempt and every redelivery. */
export const webhookIdOf = (vesselId: string) => `msg_${vesselId}`;

/** The schedule of a far attempt (EventBridge allows 64 characters: 20 + a 36-character id at most). */
const scheduleNameOf = (m: WebhookMessage) => `webhook-${m.vesselId}-${m.round}-${m.attempt}`;

/** Puts `message` on the webhook queue for its `notBefore` (now when absent). */
export async function sendWebhookMessage(message: WebhookMessage, now: number = Date.now()): Promise<void> {
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
