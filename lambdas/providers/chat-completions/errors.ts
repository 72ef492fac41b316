import { isTimeout } from '../../streaming/idle-timeout.ts';
import { anthropicError, upstreamFailure, upstreamUnreachable } from '../errors.ts';
import { PROVIDER_LABELS } from '../../routing/provider-ids.ts';
import type { AnthropicErrorBody, AnthropicErrorType, ChatPassthroughResult, ProviderResult } from '../types.ts';
import type { ChatProviderId } from './dialect.ts';
import { TranslationError } from './translation-error.ts';

type ErrorResult = Extract<ProviderResult, { kind: 'error' }>;

/** A failure before any answer, for either route: the pass-through keeps the upstream's `param` and `code` from it. */
export type ChatFailure = Extract<ChatPassthroughResult, { kind: 'error' }>;

export { TranslationError };

export function translationFailure(err: TranslationError): ErrorResult {
  return { kind: 'error', status: 400, body: anthropicError('invalid_request_error', err.message) };
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * An error object the upstream sent in place of a chunk, after the stream started (`data: {"error":{…}}`, or an
 * `event: error`): the stream fails with it (api.ts raises it, `streamFailure` reads it). `error` is the object as
 * sent (`{message, type, code}`); the message is the upstream's own, or the object itself when it has none.
 */
export class UpstreamError extends Error {
  constructor(readonly error: unknown) {
    const m = (error as { message?: unknown } | null | undefined)?.message;
    super(m ? (typeof m === 'string' ? m : JSON.stringify(m)) : error ? JSON.stringify(error) : 'the upstream sent an error without a body');
    this.name = 'UpstreamError';
  }
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
function upstreamMessage(error: unknown): string | undefined {
  const m = (error as { message?: unknown } | null | undefined)?.message;
  return typeof m === 'string' && m ? m : undefined;
}

/**
 * No answer: the time-out (`timeoutMs` passed before the answer, a TimeoutError) or a connection failure, named by its
 * root cause — undici's own message is only "fetch failed".
 */
export function connectionFailure(provider: ChatProviderId, err: unknown, timeoutMs: number): ChatFailure {
  if (isTimeout(err)) return { kind: 'error', ...upstreamUnreachable(provider, err, timeoutMs) };
  return { kind: 'error', ...upstreamUnreachable(provider, { message: rootMessage(err) ?? 'connection failed' }, timeoutMs) };
}

/** A non-2xx answer: the gateway's pass-through policy (providers/errors.ts), with the upstream's message, param and code. */
export async function responseFailure(provider: ChatProviderId, res: Response): Promise<ChatFailure> {
  let error: { message?: unknown; param?: unknown; code?: unknown } | undefined;
  try {
    const body = (await res.json()) as { error?: unknown };
    if (isObject(body?.error)) error = body.error;
  } catch {
    // not JSON: the status alone
  }
  return {
    kind: 'error',
    ...upstreamFailure(provider, res.status, upstreamMessage(error)),
    openai: { param: typeof error?.param === 'string' ? error.param : null, code: typeof error?.code === 'string' ? error.code : null },
  };
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
  if (err instanceof UpstreamError) {
    const { type } = classify(err.error);
    return anthropicError(type, `${label} failed mid-stream: ${upstreamMessage(err.error) ?? err.message}`);
  }
  return anthropicError('api_error', `The connection to ${label} failed mid-stream: ${rootMessage(err) ?? 'connection lost'}`);
}

/** A 200 response whose body is an error (OpenRouter does this for some upstream failures). */
export function bodyFailure(provider: ChatProviderId, error: unknown): ErrorResult {
  const { status } = classify(error);
  return { kind: 'error', ...upstreamFailure(provider, status, upstreamMessage(error)) };
}
