import { clock } from '../config/clock.ts';
import { WEBHOOK_ATTEMPT_TIMEOUT_MS } from '../config/timing.ts';
import { outboundFetch, readCapped } from '../outbound/fetch.ts';
import { OutboundRefused } from '../outbound/guard.ts';
import type { StoredAttempt } from '../deliveries/record.ts';
import { parseRetryAfter } from './schedule.ts';
import { hexSignature, standardSignature } from './signature.ts';

/**
 * One delivery attempt (docs/webhooks.md, "Delivery"): a POST of the body to the callback URL through the
 * outbound-safety guard (no private or metadata addresses, no redirects followed), cut at 10 s, and what came of it.
 */

/** The receiver's answer is not kept: at most this much of it is read, so the connection can be reused. */
const RESPONSE_BYTES_READ = 4 * 1024;
export const WEBHOOK_USER_AGENT = 'prompt-gateway-webhooks/1.0';

/** What an attempt means for the round. */
export type Verdict =
  /** 2xx. */
  | 'delivered'
  /** Any other answer (3xx included: never followed), a time-out or a network error: try again later. */
  | 'retry'
  /** 410 Gone: the receiver asked for no more. */
  | 'gone'
  /** The outbound guard refused the URL or its address: trying again would be refused again. */
  | 'refused';

export interface AttemptOutcome {
  attempt: Omit<StoredAttempt, 'round' | 'attempt'>;
  verdict: Verdict;
  /** From a 429 or 503's Retry-After. */
  retryAfterSeconds?: number;
}

/** The Standard Webhooks `webhook-id` of a delivery (a vessel's, or an alert's): the same for every attempt and every redelivery. */
export const webhookIdOf = (deliveryId: string) => `msg_${deliveryId}`;

/** The headers of one attempt: Standard Webhooks' trio (signature only with a secret), the hex signature, identity. */
export function deliveryHeaders(input: { webhookId: string; timestamp: number; body: string; secret?: string | undefined }): Record<string, string> {
  const { webhookId, timestamp, body, secret } = input;
  return {
    'content-type': 'application/json',
    'user-agent': WEBHOOK_USER_AGENT,
    'webhook-id': webhookId,
    'webhook-timestamp': String(timestamp),
    ...(secret === undefined
      ? {}
      : {
          'webhook-signature': `v1,${standardSignature(webhookId, timestamp, body, secret)}`,
          'X-Service-Signature': hexSignature(body, secret),
        }),
  };
}

export async function attemptDelivery(url: string, body: string, headers: Record<string, string>, now: () => number = clock.now): Promise<AttemptOutcome> {
  const at = now();
  const took = () => Math.max(0, now() - at);
  try {
    const res = await outboundFetch(url, { method: 'POST', headers, body }, { timeoutMs: WEBHOOK_ATTEMPT_TIMEOUT_MS });
    await drain(res);
    const statusCode = res.status;
    const attempt = { at, durationMs: took(), statusCode };
    if (statusCode >= 200 && statusCode < 300) return { attempt, verdict: 'delivered' };
    if (statusCode === 410) return { attempt, verdict: 'gone' };
    const retryAfter = statusCode === 429 || statusCode === 503 ? parseRetryAfter(res.headers.get('retry-after'), now()) : undefined;
    return { attempt, verdict: 'retry', ...(retryAfter === undefined ? {} : { retryAfterSeconds: retryAfter }) };
  } catch (err) {
    const attempt = { at, durationMs: took(), error: describe(err) };
    return { attempt, verdict: err instanceof OutboundRefused ? 'refused' : 'retry' };
  }
}

/** Reads a little of the answer and lets the rest go (the body is never stored: only the status counts). */
async function drain(res: Response): Promise<void> {
  await readCapped(res, RESPONSE_BYTES_READ).catch(() => undefined);
}

/**
 * An attempt's error as recorded: what happened, never a header or the body. At most ERROR_CHARS printable ASCII
 * characters, so every attempt stays within the share of the vessel's item its delivery record has
 * (lambdas/vessels/size.ts).
 */
function describe(err: unknown): string {
  const text = describeFully(err).replace(/[^\x20-\x7e]/g, '?');
  return text.length > ERROR_CHARS ? `${text.slice(0, ERROR_CHARS - 3)}...` : text;
}

const ERROR_CHARS = 200;

function describeFully(err: unknown): string {
  if (err instanceof OutboundRefused) return `refused: ${err.message}`;
  const e = err as { name?: string; message?: string; cause?: { code?: string; message?: string } };
  if (e?.name === 'TimeoutError') return `timed out: ${e.message ?? `no answer within ${WEBHOOK_ATTEMPT_TIMEOUT_MS} ms`}`;
  const code = e?.cause?.code;
  if (code) return `connection failed: ${code}`;
  return `connection failed: ${e?.cause?.message ?? e?.message ?? String(err)}`;
}
