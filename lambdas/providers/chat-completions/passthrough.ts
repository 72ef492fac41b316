import { accessRecord, timePhase } from '../../observability/access-log.ts';
import { withIdleTimeout } from '../../streaming/idle-timeout.ts';
import { upstreamFailure, upstreamUnreachable } from '../errors.ts';
import type { ChatPassthroughRequest, ChatPassthroughResult } from '../types.ts';
import type { Dialect } from './dialect.ts';
import { bodyFailure } from './errors.ts';

/**
 * Chat Completions passed through to a provider that speaks it (docs/openai.md, "OpenAI and OpenRouter models"):
 * the client's body goes up with every field it sent, and the upstream's answer comes back unchanged — JSON bytes,
 * or SSE bytes chunk by chunk. Plain `fetch`, not the openai SDK: nothing is translated, so nothing of the SDK's
 * request building or parsing is needed, and the bytes stay the upstream's.
 */

type ErrorResult = Extract<ChatPassthroughResult, { kind: 'error' }>;

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * The body sent upstream: the client's, with
 * - `model` the upstream's name (`or:` stripped);
 * - each output limit the client set lowered to `maxTokens` (the reservation's; equal to it unless clamped), or the
 *   dialect's limit field set to it when the client set none;
 * - for a stream, `stream_options.include_usage: true`: the stream is metered from its usage chunk, asked for or not;
 * - the dialect's extra fields (OpenRouter's `usage: {include: true}`, its reported cost) under the client's own.
 */
export function forwardedBody(dialect: Dialect, req: ChatPassthroughRequest): Record<string, unknown> {
  const body: Record<string, unknown> = { ...(dialect.extraParams ?? {}), ...req.body, model: req.upstreamModel };
  let limited = false;
  for (const field of ['max_completion_tokens', 'max_tokens'] as const) {
    if (typeof body[field] !== 'number') continue;
    body[field] = Math.min(body[field] as number, req.maxTokens);
    limited = true;
  }
  if (!limited) body[dialect.limitField] = req.maxTokens;
  if (body.stream === true) body.stream_options = { ...(isObject(body.stream_options) ? body.stream_options : {}), include_usage: true };
  if (dialect.extraParams?.usage && isObject(req.body.usage)) body.usage = { ...dialect.extraParams.usage, ...req.body.usage, include: true };
  return body;
}

/** An upstream error response: the gateway's pass-through policy (providers/errors.ts), the upstream's param and code kept. */
async function errorOf(dialect: Dialect, res: Response): Promise<ErrorResult> {
  let error: { message?: unknown; param?: unknown; code?: unknown } | undefined;
  try {
    const body = (await res.json()) as { error?: unknown };
    if (isObject(body?.error)) error = body.error;
  } catch {
    // not JSON: the status alone
  }
  const message = typeof error?.message === 'string' && error.message ? error.message : undefined;
  return {
    kind: 'error',
    ...upstreamFailure(dialect.id, res.status, message),
    openai: { param: typeof error?.param === 'string' ? error.param : null, code: typeof error?.code === 'string' ? error.code : null },
  };
}

export async function passThrough(dialect: Dialect, req: ChatPassthroughRequest): Promise<ChatPassthroughResult> {
  const body = forwardedBody(dialect, req);
  const stream = body.stream === true;
  let res: Response;
  const started = performance.now();
  try {
    res = await fetch(`${req.baseUrl.replace(/\/+$/, '')}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${req.apiKey}`, accept: stream ? 'text/event-stream' : 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.any([req.signal, AbortSignal.timeout(req.timeoutMs)]),
    });
  } catch (err) {
    return { kind: 'error', ...upstreamUnreachable(dialect.id, err, req.timeoutMs) };
  }
  timePhase(accessRecord(), 'connect', started);
  if (!res.ok) return errorOf(dialect, res);
  const cost = dialect.reportedCostMicros;
  if (stream && res.body && (res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    return { kind: 'stream', body: withIdleTimeout(res.body, req.timeoutMs), ...(cost ? { reportedCostMicros: cost } : {}) };
  }
  let text: string;
  let completion: Record<string, unknown>;
  try {
    const read = performance.now();
    text = await res.text();
    timePhase(accessRecord(), 'firstByte', read);
    const parsed = JSON.parse(text) as unknown;
    if (!isObject(parsed)) throw new Error('the upstream answered something other than a JSON object');
    completion = parsed;
  } catch (err) {
    return { kind: 'error', ...upstreamUnreachable(dialect.id, err, req.timeoutMs) };
  }
  // OpenRouter may answer 200 with an error body (and, asked for a stream, with JSON).
  if (completion.error !== undefined && !(Array.isArray(completion.choices) && completion.choices.length)) return bodyFailure(dialect.id, completion.error);
  if (stream) return { kind: 'error', ...upstreamUnreachable(dialect.id, new Error('the upstream answered a stream request without a stream'), req.timeoutMs) };
  const reported = cost?.(completion.usage);
  return { kind: 'completion', text, completion, ...(reported === undefined ? {} : { reportedCostMicros: reported }) };
}
