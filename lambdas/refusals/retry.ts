import { BUSY_RETRY_AFTER_SECONDS } from '../config/timing.ts';
import type { Refusal } from './refusal.ts';

/**
 * The retry hints of a refusal, the same on the Anthropic and the OpenAI route (both SDKs read `x-should-retry` before
 * their own status rules, and wait `retry-after`): a spent budget is not retried (only the window's reset cures it),
 * a budget held by requests in flight or a full concurrency limit is retried shortly; a 405 names what is allowed.
 */
export function retryHeaders(refusal: Refusal): Record<string, string> {
  switch (refusal.kind) {
    case 'budget_exhausted':
      return { 'x-should-retry': 'false', ...(refusal.retryAfterSeconds === undefined ? {} : { 'retry-after': String(refusal.retryAfterSeconds) }) };
    case 'budget_held':
    case 'concurrent_limit_reached':
      return { 'x-should-retry': 'true', 'retry-after': String(BUSY_RETRY_AFTER_SECONDS) };
    case 'developer_budget_exhausted':
      return { 'x-should-retry': 'false' };
    case 'method_not_allowed':
      return refusal.allow.length ? { allow: refusal.allow.join(', ') } : {};
    default:
      return {};
  }
}
