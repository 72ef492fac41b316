import { anthropicError } from '../providers/errors.ts';
import type { AnthropicErrorBody, AnthropicErrorType } from '../providers/types.ts';
import { messageOf } from './describe.ts';
import { statusOf, type Refusal } from './refusal.ts';
import { retryHeaders } from './retry.ts';

/**
 * Refusals in Anthropic's envelope, for the proxy (docs/api.md, "Errors"): `{type:"error", error:{type, message}}`
 * with the status of `statusOf`. Anthropic's SDKs retry when `x-should-retry` says so (otherwise on 429 and 5xx), so
 * a refusal that waiting cannot cure says `false`, or a client like Claude Code retries it for minutes.
 */
export function anthropicRefusal(refusal: Refusal, headers: Record<string, string> = {}): Response {
  if (refusal.kind === 'upstream') return anthropicEnvelope(refusal.status, refusal.body, headers);
  const status = statusOf(refusal);
  return anthropicEnvelope(status, anthropicError(TYPES[refusal.kind], messageOf(refusal)), { ...retryHeaders(refusal), ...headers });
}

/** An Anthropic-envelope response with the SDKs' retry hint (429, 529 and 5xx are retryable unless said otherwise). */
export function anthropicEnvelope(status: number, body: AnthropicErrorBody, headers: Record<string, string> = {}): Response {
  return Response.json(body, {
    status,
    headers: { 'x-should-retry': String(status === 429 || status === 529 || status >= 500), ...headers },
  });
}

const TYPES: Record<Exclude<Refusal['kind'], 'upstream'>, AnthropicErrorType> = {
  invalid_request: 'invalid_request_error',
  unpriced_model: 'invalid_request_error',
  missing_provider_key: 'invalid_request_error',
  method_not_allowed: 'invalid_request_error',
  request_too_large: 'request_too_large',
  not_found: 'not_found_error',
  token: 'authentication_error',
  origin_not_allowed: 'permission_error',
  unsupported_media_type: 'invalid_request_error',
  budget_exhausted: 'rate_limit_error',
  budget_held: 'rate_limit_error',
  concurrent_limit_reached: 'rate_limit_error',
  developer_budget_exhausted: 'billing_error',
  cost_cap_reached: 'billing_error',
  missing_idempotency_key: 'invalid_request_error',
  idempotency_key_conflict: 'invalid_request_error',
  vessel_not_found: 'not_found_error',
  vessel_not_cancelable: 'invalid_request_error',
  trigger_failed: 'api_error',
};
