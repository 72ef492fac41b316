import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { sendWebhookMessage } from '../deliveries/message.ts';
import { firstRound } from '../deliveries/record.ts';
import { logger } from '../observability/logger.ts';
import type { CipherOwner } from '../registry/key-cipher.ts';
import { conditionalPut } from '../store/conditional.ts';
import { alertIdOf, alertKey, type AlertPayload, type StoredAlert } from './record.ts';

/**
 * Fires one alert, exactly once (docs/webhooks.md, "Budget alerts"): one conditional write creates its item
 * (`attribute_not_exists(pk)`, the item's key derived from the crossing itself: record.ts), and only the writer that
 * created it hands the delivery to the webhook queue — every other writer of the same crossing (a second charge that
 * saw the threshold crossed, a repeated send of the same write) finds the item there and does nothing. From the hand-off on,
 * the webhook sender delivers it as it delivers a vessel's callback: claimed attempts, retries, the dead-letter queue,
 * every attempt recorded on the alert's item. True when this call fired it.
 */
export async function fireAlert(input: {
  alert: AlertPayload;
  owner: CipherOwner;
  target: { url: string; secretCiphertext: string };
  /** The item's TTL (epoch seconds): kept as long as the window (or month) it is about. */
  expiresAt?: number;
  now?: number;
}): Promise<boolean> {
  const alertId = alertIdOf(input.alert);
  const item: StoredAlert = {
    ...alertKey(alertId),
    alertId,
    kind: 'alert',
    event: input.alert.event,
    fields: input.alert.fields,
    owner: input.owner,
    callback: { url: input.target.url, secretCiphertext: input.target.secretCiphertext },
    webhook: firstRound(),
    firedAt: input.now ?? clock.now(),
    ...(input.expiresAt === undefined ? {} : { expiresAt: input.expiresAt }),
  };
  // Made: by this send, or by a first send whose answer was lost (store/conditional.ts); refused: fired already.
  const put = await conditionalPut({ TableName: env().USAGE_TABLE, Item: { ...item }, ConditionExpression: 'attribute_not_exists(pk)' });
  if (!put.ok) return false;
  logger.info('budget alert fired', { alertId, event: item.event, meter: item.fields.meter, threshold: item.fields.threshold });
  await sendWebhookMessage({ alertId, round: 1, attempt: 1 });
  return true;
}
