import { env } from '../config/env.ts';
import { MAX_RETRY_AFTER_SECONDS } from '../config/timing.ts';

/**
 * When a failed delivery is tried again (docs/webhooks.md, "Retries"): after the waits of WEBHOOK_RETRY_WAITS — by
 * default Svix's 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h, so 1 + 7 attempts over about 27.6 hours — then never.
 * A receiver that answers 429 or 503 with `Retry-After` is given at least the time it asked for.
 */

/** The waits of the schedule, in seconds: retry N comes waits[N-1] after attempt N. */
export const retryWaits = (): readonly number[] => env().WEBHOOK_RETRY_WAITS;

/** Attempts in a round: the first and one per wait. */
export const attemptsPerRound = (): number => retryWaits().length + 1;

/**
 * When attempt `attempt + 1` is due after attempt `attempt` failed at `now` (epoch ms), or undefined when that was
 * the round's last. `retryAfterSeconds` (from a 429/503) lengthens the wait, never shortens it.
 */
export function nextAttemptAt(attempt: number, now: number, retryAfterSeconds?: number): number | undefined {
  const wait = retryWaits()[attempt - 1];
  if (wait === undefined) return undefined;
  const asked = retryAfterSeconds === undefined ? 0 : Math.min(retryAfterSeconds, MAX_RETRY_AFTER_SECONDS);
  return now + Math.max(wait, asked) * 1000;
}

/**
 * A `Retry-After` value in seconds from `now`: delta-seconds or an HTTP date (RFC 9110 §10.2.3); undefined when absent
 * or unreadable. A date in the past is 0.
 */
export function parseRetryAfter(value: string | null | undefined, now: number): number | undefined {
  if (value == null) return undefined;
  const text = value.trim();
  if (/^\d+$/.test(text)) return Number(text);
  const date = Date.parse(text);
  if (Number.isNaN(date)) return undefined;
  return Math.max(0, Math.ceil((date - now) / 1000));
}
