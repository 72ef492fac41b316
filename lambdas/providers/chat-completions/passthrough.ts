import { withIdleTimeout } from '../../streaming/idle-timeout.ts';
import { upstreamUnreachable } from '../errors.ts';
import type { ChatPassthroughRequest, ChatPassthroughResult } from '../types.ts';
import { postChatCompletions, readCompletion } from './api.ts';
import type { Dialect } from './dialect.ts';

/**
 * Chat Completions passed through to a provider that speaks it (docs/openai.md, "OpenAI and OpenRouter models"):
 * the client's body goes up with every field it sent, and the upstream's answer comes back unchanged — JSON bytes,
 * or SSE bytes chunk by chunk (api.ts sends it; nothing is parsed but a JSON answer, to meter it).
 */

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

export async function passThrough(dialect: Dialect, req: ChatPassthroughRequest): Promise<ChatPassthroughResult> {
  const body = forwardedBody(dialect, req);
  const stream = body.stream === true;
  const res = await postChatCompletions(dialect.id, req, body, { stream, deadline: 'whole' });
  if (!(res instanceof Response)) return res;
  const cost = dialect.reportedCostMicros;
  if (stream && res.body && (res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    return { kind: 'stream', body: withIdleTimeout(res.body, req.timeoutMs), ...(cost ? { reportedCostMicros: cost } : {}) };
  }
  // A JSON answer; OpenRouter may answer a stream request with one (an error, which readCompletion tells).
  const answer = await readCompletion(dialect.id, res, req.timeoutMs);
  if (answer.kind === 'error') return answer;
  if (stream) return { kind: 'error', ...upstreamUnreachable(dialect.id, new Error('the upstream answered a stream request without a stream'), req.timeoutMs) };
  const reported = cost?.(answer.completion.usage);
  return reported === undefined ? answer : { ...answer, reportedCostMicros: reported };
}
