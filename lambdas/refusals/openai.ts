import { messageOf } from './describe.ts';
import { statusOf, type Refusal } from './refusal.ts';
import { retryHeaders } from './retry.ts';

/**
 * Refusals in OpenAI's envelope, for the OpenAI-compatible route `POST /v1/chat/completions` (docs/openai.md,
 * "Errors"): `{error:{message, type, param, code}}` with OpenAI's statuses and vocabulary, so the openai SDKs raise
 * their usual error classes (AuthenticationError, RateLimitError, BadRequestError…). The retry hints are the Anthropic
 * route's (`retry.ts`): the openai SDKs read `x-should-retry` and `retry-after` the same way.
 */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

export function openaiError(message: string, type: string, opts: { param?: string | null; code?: string | null } = {}): OpenAIErrorBody {
  return { error: { message, type, param: opts.param ?? null, code: opts.code ?? null } };
}

/**
 * `upstream`: an OpenAI-format upstream's own `param` and `code` (a Chat Completions request passed through), kept
 * for its client's mistakes (4xx) — `context_length_exceeded` is what an openai client branches on.
 */
export function openaiRefusal(refusal: Refusal, headers: Record<string, string> = {}, upstream?: { param: string | null; code: string | null }): Response {
  if (refusal.kind === 'upstream') {
    const { status, type, code } = upstreamStatus(refusal.status);
    const own = upstream && status < 500 && status !== 429 ? upstream : undefined;
    return openaiEnvelope(status, openaiError(messageOf(refusal), type, { param: own?.param, code: own?.code ?? code }), headers);
  }
  const { type, code } = VOCABULARY[refusal.kind];
  const param =
    refusal.kind === 'invalid_request' ? refusal.param : refusal.kind === 'unpriced_model' || refusal.kind === 'missing_provider_key' ? 'model' : undefined;
  return openaiEnvelope(statusOf(refusal), openaiError(messageOf(refusal), type, { param, code }), { ...retryHeaders(refusal), ...headers });
}

/** An OpenAI-envelope response with the SDKs' retry hint (429 and 5xx are retryable unless said otherwise). */
export function openaiEnvelope(status: number, body: OpenAIErrorBody, headers: Record<string, string> = {}): Response {
  return Response.json(body, { status, headers: { 'x-should-retry': String(status === 429 || status >= 500), ...headers } });
}

/** OpenAI's rate-limit words (its own 429s say `type: "requests"` or `"tokens"`, `code: "rate_limit_exceeded"`). */
const RATE_LIMITED = { type: 'requests', code: 'rate_limit_exceeded' };
const INVALID = 'invalid_request_error';

/** Each refusal's OpenAI `type` and `code` (the status is `statusOf`'s, the same on every surface). */
const VOCABULARY: Record<Exclude<Refusal['kind'], 'upstream'>, { type: string; code: string | null }> = {
  invalid_request: { type: INVALID, code: null },
  unpriced_model: { type: INVALID, code: 'model_not_priced' },
  missing_provider_key: { type: INVALID, code: 'missing_provider_key' },
  method_not_allowed: { type: INVALID, code: 'method_not_allowed' },
  request_too_large: { type: INVALID, code: 'request_too_large' },
  not_found: { type: INVALID, code: 'not_found' },
  // The openai SDKs raise AuthenticationError on any 401; the message says whether the token expired or was revoked.
  token: { type: INVALID, code: 'invalid_api_key' },
  origin_not_allowed: { type: INVALID, code: 'origin_not_allowed' },
  unsupported_media_type: { type: INVALID, code: 'unsupported_media_type' },
  // A spent budget is OpenAI's "You exceeded your current quota": 429, type and code insufficient_quota, not retried.
  budget_exhausted: { type: 'insufficient_quota', code: 'insufficient_quota' },
  budget_held: RATE_LIMITED,
  concurrent_limit_reached: RATE_LIMITED,
  developer_budget_exhausted: { type: 'insufficient_quota', code: 'insufficient_quota' },
  cost_cap_reached: { type: 'insufficient_quota', code: 'insufficient_quota' },
  missing_idempotency_key: { type: INVALID, code: null },
  idempotency_key_conflict: { type: INVALID, code: null },
  vessel_not_found: { type: INVALID, code: 'not_found' },
  vessel_not_cancelable: { type: INVALID, code: null },
  trigger_failed: { type: 'api_error', code: null },
};

/**
 * A provider failure (its status as the gateway's pass-through policy gave it, providers/errors.ts) in OpenAI's
 * statuses: the client's own mistakes keep theirs (400, 404, 413), the upstream's rate limit stays 429, its overload
 * (Anthropic's 529, which OpenAI clients do not know) is 503, and every other failure is 502 — the gateway's own
 * failures are 500.
 */
export function upstreamStatus(status: number): { status: number; type: string; code: string | null } {
  if (status === 429) return { status: 429, ...RATE_LIMITED };
  if (status === 529 || status === 503) return { status: 503, type: 'api_error', code: 'overloaded' };
  if (status >= 500) return { status: 502, type: 'api_error', code: 'upstream_error' };
  return { status, type: INVALID, code: null };
}
