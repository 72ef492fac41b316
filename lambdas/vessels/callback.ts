import { sendWebhookMessage } from '../deliveries/message.ts';
import type { StoredVessel } from './record.ts';

/**
 * Hands an ended vessel's callback to the webhook sender (docs/webhooks.md): the first attempt of its current round,
 * now, as the webhook queue's message (lambdas/deliveries/message.ts). Nothing to do without a callback. The vessel
 * carries the delivery's state, so repeating a hand-off (the reconciler after a crash) makes no second delivery.
 */
export async function handOffCallback(v: StoredVessel): Promise<boolean> {
  if (!v.callback) return false;
  await sendWebhookMessage({ vesselId: v.vesselId, round: v.webhook?.round ?? 1, attempt: 1 });
  return true;
}
