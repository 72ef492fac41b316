import { sqsQueueSender } from '../queues/sender.ts';
import type { StoredVessel } from './record.ts';

/**
 * What a vessel that ended hands to the webhook queue when it has a callback: everything the delivery needs, so
 * the webhook sender (docs/webhooks.md) never has to reconstruct it — the URL, the encrypted secret, the stable
 * delivery id, and the exact body to sign and send.
 */
export interface WebhookMessage {
  vesselId: string;
  projectId: string;
  /** Stable across every attempt of this delivery: the Standard Webhooks `webhook-id`. */
  webhookId: string;
  url: string;
  secretCiphertext?: string;
  /** The callback body, serialised once: the bytes that are signed are the bytes that are sent. */
  body: string;
}

/** The interface's callback body, plus which vessel it is about (documented additions). */
export function callbackBody(v: Pick<StoredVessel, 'vesselId' | 'idempotencyKey' | 'status' | 'output'>) {
  const output = v.output;
  return {
    success: output?.success ?? false,
    text: output?.text ?? '',
    result: {
      type: 'result',
      subtype: output?.result.subtype ?? 'error_during_execution',
      total_cost_usd: output?.result.total_cost_usd ?? 0,
      usage: output?.result.usage ?? { input_tokens: 0, output_tokens: 0 },
    },
    vesselId: v.vesselId,
    idempotencyKey: v.idempotencyKey,
    status: v.status,
  };
}

export function webhookMessage(v: StoredVessel): WebhookMessage | undefined {
  if (!v.callback) return undefined;
  return {
    vesselId: v.vesselId,
    projectId: v.projectId,
    webhookId: `msg_${v.vesselId}`,
    url: v.callback.url,
    ...(v.callback.secretCiphertext ? { secretCiphertext: v.callback.secretCiphertext } : {}),
    body: JSON.stringify(callbackBody(v)),
  };
}

/** Puts the vessel's callback on the webhook queue (nothing to do without one). */
export async function handOffCallback(v: StoredVessel): Promise<boolean> {
  const message = webhookMessage(v);
  if (!message) return false;
  await sqsQueueSender().send('webhook', message);
  return true;
}
