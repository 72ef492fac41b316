import { defineStates, type PlaceholderOptions } from '../store/record-states.ts';

/**
 * A webhook delivery's record (docs/webhooks.md, "The delivery record"), kept on the item it delivers: a vessel's
 * callback on the vessel (attribute `webhook`, lambdas/vessels/record.ts), a budget alert on its alert item
 * (lambdas/alerts/record.ts). The item is the source of truth; the webhook queue only says "try attempt N of round R
 * now" (message.ts). Both producers start the record and lambdas/webhooks/ makes the attempts and writes them to it
 * (webhooks/store.ts): this folder is what they share, below all of them.
 *
 * A *round* is the first attempt and its retries; an operator's redelivery (`gateway webhook redeliver`) starts the
 * next round. Within a round, attempt N is made at most once at a time: a sender claims it (`claim`) before calling
 * the receiver, and records it (`tried` = N) in one conditional write afterwards.
 */

/**
 * A delivery's status flow. An attempt that failed with retries left keeps the round pending (its next attempt is
 * due); an operator's redelivery starts a new round, pending, whatever became of the last one (docs/webhooks.md,
 * "Dead letters and redelivery"). Every change is one conditional write on the delivered item (lambdas/webhooks/store.ts).
 */
export const WebhookStates = defineStates({
  pending: ['pending', 'delivered', 'failed'],
  delivered: ['pending'],
  failed: ['pending'],
});

export type WebhookStatus = (typeof WebhookStates.statuses)[number];

/** The status is `webhook.status` on the item, beside a vessel's own `status`: placeholders of its own. */
export const WEBHOOK_STATUS_PLACEHOLDERS = {
  within: { attribute: 'webhook', name: '#w' },
  attribute: 'status',
  name: '#wstatus',
  valuePrefix: ':ws',
} as const satisfies PlaceholderOptions;

/** Why a round ended without a delivery. */
export type WebhookFailure =
  /** Every attempt of the schedule failed; the delivery was put on the webhook dead-letter queue. */
  | 'exhausted'
  /** The receiver answered 410 Gone: no more attempts. */
  | 'gone'
  /** The URL or the address it resolved to is not allowed (docs/contract.md, "Outbound safety"). */
  | 'refused';

export interface StoredAttempt {
  round: number;
  /** 1 for the first attempt of the round. */
  attempt: number;
  /** When the request was sent (epoch ms). */
  at: number;
  durationMs: number;
  /** The receiver's HTTP status, when it answered. */
  statusCode?: number;
  /** What went wrong when there was no answer (time-out, refused address, connection error). */
  error?: string;
}

export interface StoredWebhook {
  status: WebhookStatus;
  round: number;
  /** Attempts made in the current round. */
  tried: number;
  /** Every attempt of every round, oldest first. */
  attempts: StoredAttempt[];
  /** The attempt a sender is making now, and when it started (epoch ms); a claim older than WEBHOOK_CLAIM_STALE_MS (config/timing.ts) is void. */
  claim?: { attempt: number; at: number; by: string };
  /** While pending after a failed attempt: when the next one is due (epoch ms). */
  nextAttemptAt?: number;
  failure?: WebhookFailure;
  /** When an exhausted round was put on the dead-letter queue (epoch ms). */
  deadLetteredAt?: number;
}

/** The delivery state of a callback or alert about to be handed off: round 1, nothing tried. */
export const firstRound = (): StoredWebhook => ({ status: 'pending', round: 1, tried: 0, attempts: [] });

const iso = (ms: number) => new Date(ms).toISOString();

/** The `webhook` of the vessel status record (and of `gateway webhook show`). */
export function webhookView(w: StoredWebhook) {
  return {
    status: w.status,
    ...(w.failure ? { failure: w.failure } : {}),
    attempts: w.attempts.map((a) => ({
      round: a.round,
      attempt: a.attempt,
      time: iso(a.at),
      ...(a.statusCode === undefined ? {} : { statusCode: a.statusCode }),
      ...(a.error === undefined ? {} : { error: a.error }),
      durationMs: a.durationMs,
    })),
    ...(w.status === 'pending' && w.nextAttemptAt !== undefined ? { nextAttemptAt: iso(w.nextAttemptAt) } : {}),
  };
}
export type WebhookView = ReturnType<typeof webhookView>;
