import { getAlert, type StoredAlert } from '../alerts/record.ts';
import { clock } from '../config/clock.ts';
import { sendWebhookMessage } from '../deliveries/message.ts';
import { webhookView, type WebhookView } from '../deliveries/record.ts';
import type { StoredVessel } from '../vessels/record.ts';
import { handOff } from '../vessels/end.ts';
import { VesselStates } from '../vessels/states.ts';
import { getVessel } from '../vessels/store.ts';
import { startAlertRound, startRound } from './store.ts';

/**
 * Rounds a vessel's delivery may have. Every attempt stays on the vessel's item (DynamoDB's limit is 400 KB), and
 * twenty rounds of eight attempts is more than any fix-and-retry needs.
 */
export const MAX_ROUNDS = 20;

/** Why an operator's redelivery (or look at a delivery) was refused: the CLI prints `message`. */
export class RedeliveryRefused extends Error {
  override readonly name = 'RedeliveryRefused';
}

/**
 * An operator's redelivery of a vessel's callback (`gateway webhook redeliver --vessel ID`, docs/webhooks.md): a new
 * round of attempts, starting now, with the same `webhook-id` and body, whatever became of the earlier rounds (a
 * pending round is superseded: its remaining attempts are dropped). The round's first attempt is handed to the webhook
 * queue as a vessel's end hands off its callback; if the queue does not take it, the reconciler does it within
 * minutes (`handedOff: false`). Answers the delivery record as it now stands.
 */
export async function redeliverWebhook(
  vesselId: string,
  now: number = clock.now(),
): Promise<{ vesselId: string; round: number; handedOff: boolean; webhook: WebhookView }> {
  for (let tries = 0; tries < 3; tries++) {
    const vessel = await vesselWithCallback(vesselId);
    if (!VesselStates.isTerminal(vessel.status)) {
      throw new RedeliveryRefused(`Vessel ${vesselId} has not ended (${vessel.status}): its callback is sent when it ends`);
    }
    if ((vessel.webhook?.round ?? 0) >= MAX_ROUNDS) {
      throw new RedeliveryRefused(`Vessel ${vesselId}'s callback has been delivered in ${MAX_ROUNDS} rounds already, the most a vessel keeps`);
    }
    const started = await startRound(vessel, now);
    if (!started?.webhook) continue; // another redelivery, or an attempt, changed it meanwhile: look again
    const handedOff = await handOff(started);
    return { vesselId, round: started.webhook.round, handedOff, webhook: webhookView(started.webhook) };
  }
  throw new RedeliveryRefused(`Vessel ${vesselId}'s delivery kept changing while redelivering; try again`);
}

/** The delivery record of a vessel, for operators (`gateway webhook show`). */
export async function webhookOf(vesselId: string): Promise<{ vesselId: string; status: string; url: string; signed: boolean; webhook?: WebhookView }> {
  const vessel = await vesselWithCallback(vesselId);
  const callback = vessel.callback!;
  return {
    vesselId,
    status: vessel.status,
    url: callback.url,
    signed: callback.secretCiphertext !== undefined,
    ...(vessel.webhook ? { webhook: webhookView(vessel.webhook) } : {}),
  };
}

/** The vessel, refused when it does not exist or has no callback (nothing to show or deliver). */
async function vesselWithCallback(vesselId: string): Promise<StoredVessel> {
  const vessel = await getVessel(vesselId);
  if (!vessel) throw new RedeliveryRefused(`Vessel ${vesselId} does not exist (ended vessels are kept 30 days)`);
  if (!vessel.callback) throw new RedeliveryRefused(`Vessel ${vesselId} has no callback: there is nothing to deliver`);
  return vessel;
}

/**
 * An operator's redelivery of a budget alert (`gateway webhook redeliver --alert ID`): as a vessel's, a new round of
 * attempts starting now, with the same `webhook-id` and body. The first attempt is handed to the webhook queue here;
 * if the queue does not take it, the command fails and can be run again (no reconciler watches alerts).
 */
export async function redeliverAlert(alertId: string): Promise<{ alertId: string; round: number; webhook: WebhookView }> {
  for (let tries = 0; tries < 3; tries++) {
    const alert = await existingAlert(alertId);
    if (alert.webhook.round >= MAX_ROUNDS) {
      throw new RedeliveryRefused(`Alert ${alertId} has been delivered in ${MAX_ROUNDS} rounds already, the most an alert keeps`);
    }
    const started = await startAlertRound(alertId, alert.webhook.round);
    if (!started) continue; // another redelivery, or an attempt, changed it meanwhile: look again
    await sendWebhookMessage({ alertId, round: started.round, attempt: 1 });
    return { alertId, round: started.round, webhook: webhookView(started) };
  }
  throw new RedeliveryRefused(`Alert ${alertId}'s delivery kept changing while redelivering; try again`);
}

/** The delivery record of an alert, for operators (`gateway webhook show --alert ID`): what it said, where, each attempt. */
export async function alertWebhookOf(alertId: string) {
  const alert = await existingAlert(alertId);
  return {
    alertId,
    event: alert.event,
    fields: alert.fields,
    firedAt: new Date(alert.firedAt).toISOString(),
    url: alert.callback.url,
    signed: true as const,
    webhook: webhookView(alert.webhook),
  };
}

async function existingAlert(alertId: string): Promise<StoredAlert> {
  const alert = await getAlert(alertId);
  if (!alert) throw new RedeliveryRefused(`Alert ${alertId} does not exist (alerts are kept as long as the window or month they are about)`);
  return alert;
}
