import OpenAI from 'openai';
import { isTimeout } from '../../streaming/idle-timeout.ts';
import { anthropicError, upstreamFailure, upstreamUnreachable } from '../errors.ts';
import { PROVIDER_LABELS } from '../../routing/provider-ids.ts';
import type { AnthropicErrorBody, AnthropicErrorType, ProviderResult } from '../types.ts';
import type { ChatProviderId } from './dialect.ts';
import { TranslationError } from './translation-error.ts';

type ErrorResult = Extract<ProviderResult, { kind: 'error' }>;

export { TranslationError };

export function translationFailure(err: TranslationError): ErrorResult {
  return { kind: 'error', status: 400, body: anthropicError('invalid_request_error', err.message) };
}

/** The innermost message of an error chain (`fetch failed` → `connect ECONNREFUSED 127.0.0.1:1`). */
function rootMessage(err: unknown): string | undefined {
  let message: string | undefined;
  let current: unknown = err;
  for (let depth = 0; current && depth < 5; depth++) {
    const m = (current as { message?: unknown }).message;
    if (typeof m === 'string' && m) message = m;
    current = (current as { cause?: unknown }).cause;
  }
  return message;
}

/** The upstream's own message from an OpenAI-style error object (`{message, type, code}`). */
function upstreamMessage(err: InstanceType<typeof OpenAI.APIError>): string | undefined {
  const m = (err.error as { message?: unknown } | undefined)?.message;
  return typeof m === 'string' && m ? m : undefined;
}

/**
 * An error thrown by the SDK before any answer came: an HTTP status → the gateway's pass-through policy
 * (`upstreamFailure`), a time-out or a connection failure → `upstreamUnreachable`.
 */
export function requestFailure(provider: ChatProviderId, err: unknown, timeoutMs: number): ErrorResult {
  // The SDK's own time-out (APIConnectionTimeoutError) or an aborted TimeoutError signal: "did not answer within".
  if (isTimeout(err)) return { kind: 'error', ...upstreamUnreachable(provider, err, timeoutMs) };
  if (err instanceof OpenAI.APIError && typeof err.status === 'number') {
    return { kind: 'error', ...upstreamFailure(provider, err.status, upstreamMessage(err)) };
  }
  if (err instanceof OpenAI.APIError && err.status === undefined && err.error !== undefined) {
    // An error body without a status (OpenRouter may answer 200 with `{error:{code, message}}`).
    const { status } = classify(err.error);
    return { kind: 'error', ...upstreamFailure(provider, status, upstreamMessage(err)) };
  }
  return { kind: 'error', ...upstreamUnreachable(provider, { message: rootMessage(err) ?? 'connection failed' }, timeoutMs) };
}

/** An error object of a response body or stream chunk → an HTTP-like status and an Anthropic error type. */
function classify(error: unknown): { status: number; type: AnthropicErrorType } {
  const e = (error ?? {}) as { code?: unknown; type?: unknown; status?: unknown };
  const numeric = [e.code, e.status].find((v): v is number => typeof v === 'number' && v >= 400 && v <= 599);
  const kind = `${typeof e.type === 'string' ? e.type : ''} ${typeof e.code === 'string' ? e.code : ''}`;
  if (numeric === 429 || /rate_limit|insufficient_quota/.test(kind)) return { status: 429, type: 'rate_limit_error' };
  if (numeric === 529 || numeric === 503 || /overloaded/.test(kind)) return { status: numeric ?? 529, type: 'overloaded_error' };
  if (numeric === 400 || /invalid_request/.test(kind)) return { status: 400, type: 'invalid_request_error' };
  return { status: numeric ?? 500, type: 'api_error' };
}

/**
 * The body of the `event: error` written when a stream fails after it started: an `{error:…}` chunk from the
 * upstream (its type and message kept), a broken connection, or an idle time-out.
 */
export function streamFailure(provider: ChatProviderId, err: unknown, timeoutMs: number): AnthropicErrorBody {
  const label = PROVIDER_LABELS[provider];
  if (isTimeout(err)) {
    return anthropicError('api_error', `${label} stopped sending data for ${timeoutMs} ms in the middle of the stream`);
  }
  if (err instanceof OpenAI.APIError && err.error !== undefined) {
    const { type } = classify(err.error);
    const message = upstreamMessage(err) ?? err.message;
    return anthropicError(type, `${label} failed mid-stream: ${message}`);
  }
  return anthropicError('api_error', `The connection to ${label} failed mid-stream: ${rootMessage(err) ?? 'connection lost'}`);
}

/** A 200 response whose body is an error (OpenRouter does this for some upstream failures). */
export function bodyFailure(provider: ChatProviderId, error: unknown): ErrorResult {
  const { status } = classify(error);
  const m = (error as { message?: unknown } | undefined)?.message;
  return { kind: 'error', ...upstreamFailure(provider, status, typeof m === 'string' ? m : undefined) };
}
