import { alertBodyText, getAlert, type StoredAlert } from '../alerts/record.ts';
import type { WebhookMessage } from '../deliveries/message.ts';
import type { StoredWebhook } from '../deliveries/record.ts';
import { keyCipher } from '../registry/key-cipher.ts';
import type { StoredVessel } from '../vessels/record.ts';
import { VesselStates } from '../vessels/states.ts';
import { getVessel } from '../vessels/store.ts';
import { callbackBodyText } from './body.ts';
import { webhookIdOf } from './deliver.ts';
import { alertDelivery, vesselDelivery, type DeliveryLocation } from './store.ts';

/**
 * What the webhook sender delivers, whatever it is about (docs/webhooks.md): a vessel's callback, or a budget alert
 * (lambdas/alerts/). Both hold their delivery record on their own item (`at`); the sender claims, makes and records
 * attempts the same way for both, and asks the subject only for what differs — where the record is, the URL, the body,
 * the secret, and what the dead-letter message says.
 */
export interface DeliverySubject {
  at: DeliveryLocation;
  /** Which item, for log lines and the dead-letter message. */
  ref: { vesselId: string } | { alertId: string };
  /** The delivery record as read (absent on a vessel that ended before records were kept). */
  webhook?: StoredWebhook;
  url: string;
  /** The Standard Webhooks `webhook-id`: the same for every attempt and every redelivery. */
  webhookId: string;
  /** The exact bytes sent and signed. */
  body: string;
  /** The secret in clear, for this attempt only (never logged, never stored in clear). */
  secret(): Promise<string | undefined>;
  /** The rest of the dead-letter message: whose it is, and the operator's command that sends it again. */
  deadLetter: Record<string, string>;
}

/** The subject of a webhook queue message, or undefined when there is nothing to deliver (no such item, not ended). */
export async function subjectOf(m: WebhookMessage): Promise<DeliverySubject | undefined> {
  if ('vesselId' in m) {
    const vessel = await getVessel(m.vesselId);
    return vessel?.callback && VesselStates.isTerminal(vessel.status) ? vesselSubject(vessel) : undefined;
  }
  const alert = await getAlert(m.alertId);
  return alert?.callback ? alertSubject(alert) : undefined;
}

export function vesselSubject(vessel: StoredVessel): DeliverySubject {
  const callback = vessel.callback!;
  return {
    at: vesselDelivery(vessel.vesselId),
    ref: { vesselId: vessel.vesselId },
    ...(vessel.webhook ? { webhook: vessel.webhook } : {}),
    url: callback.url,
    webhookId: webhookIdOf(vessel.vesselId),
    body: callbackBodyText(vessel),
    secret: async () => (callback.secretCiphertext ? keyCipher().decrypt(callback.secretCiphertext, { projectId: vessel.projectId }) : undefined),
    deadLetter: { projectId: vessel.projectId, redeliver: `gateway webhook redeliver --vessel ${vessel.vesselId}` },
  };
}

export function alertSubject(alert: StoredAlert): DeliverySubject {
  return {
    at: alertDelivery(alert.alertId),
    ref: { alertId: alert.alertId },
    webhook: alert.webhook,
    url: alert.callback.url,
    webhookId: webhookIdOf(alert.alertId),
    body: alertBodyText(alert),
    secret: () => keyCipher().decrypt(alert.callback.secretCiphertext, alert.owner),
    deadLetter: {
      event: alert.event,
      ...('projectId' in alert.owner ? { projectId: alert.owner.projectId } : { developerId: alert.owner.developerId }),
      redeliver: `gateway webhook redeliver --alert ${alert.alertId}`,
    },
  };
}
