import { isTimeout } from '../streaming/idle-timeout.ts';
import { PROVIDER_LABELS, type ProviderId } from '../routing/provider-ids.ts';
import type { AnthropicErrorBody, AnthropicErrorType } from './types.ts';

export function anthropicError(type: AnthropicErrorType, message: string): AnthropicErrorBody {
  return { type: 'error', error: { type, message } };
}

/**
 * What the client sees for an upstream HTTP failure (docs/api.md, "Upstream errors"). The client's own mistakes (400, 404, 413) and the
 * upstream's pressure signals (429, 529) pass through with their Anthropic type; a rejected credential is the
 * gateway's (or the project's) configuration, not the caller's token, so it is an api_error; every other failure
 * is a 500 api_error.
 */
export function upstreamFailure(provider: ProviderId, status: number, upstreamMessage: string | undefined): { status: number; body: AnthropicErrorBody } {
  const label = PROVIDER_LABELS[provider];
  const detail = upstreamMessage ? `: ${upstreamMessage}` : '';
  switch (status) {
    case 400:
    case 422:
      return { status: 400, body: anthropicError('invalid_request_error', `${label} rejected the request${detail}`) };
    case 404:
      return { status: 404, body: anthropicError('not_found_error', `${label}: not found${detail}`) };
    case 413:
      return { status: 413, body: anthropicError('request_too_large', `${label}: request too large${detail}`) };
    case 429:
      return { status: 429, body: anthropicError('rate_limit_error', `${label} is rate limiting requests${detail}`) };
    case 529:
      return { status: 529, body: anthropicError('overloaded_error', `${label} is overloaded${detail}`) };
    case 401:
    case 403:
      return {
        status: 500,
        body: anthropicError(
          'api_error',
          provider === 'anthropic'
            ? `${label} rejected the gateway's credentials${detail}`
            : `${label} rejected the project's ${label} API key (set it with "gateway project set-provider-key")${detail}`,
        ),
      };
    default:
      return { status: 500, body: anthropicError('api_error', `${label} failed with HTTP ${status}${detail}`) };
  }
}

/** A network failure or time-out talking to the upstream. */
export function upstreamUnreachable(provider: ProviderId, err: unknown, timeoutMs: number): { status: number; body: AnthropicErrorBody } {
  return {
    status: 500,
    body: anthropicError(
      'api_error',
      isTimeout(err)
        ? `${PROVIDER_LABELS[provider]} did not answer within ${timeoutMs} ms`
        : `Could not reach ${PROVIDER_LABELS[provider]}: ${(err as Error)?.message ?? 'connection failed'}`,
    ),
  };
}
