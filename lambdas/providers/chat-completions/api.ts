import type OpenAI from 'openai';
import { accessRecord, timePhase } from '../../observability/access-log.ts';
import { SseDecoder, type SseEvent } from '../../streaming/sse.ts';
import type { ChatPassthroughRequest } from '../types.ts';
import type { ChatProviderId } from './dialect.ts';
import { bodyFailure, type ChatFailure, connectionFailure, responseFailure, UpstreamError } from './errors.ts';

/**
 * The Chat Completions API of OpenAI and OpenRouter, over plain `fetch`: one POST to `<baseUrl>/chat/completions`, a
 * JSON answer read whole, a stream's SSE read into chunks. Both routes use it: the pass-through (passthrough.ts) and
 * the translation from Anthropic's Messages (provider.ts).
 *
 * Not the openai SDK: its client loads every API resource it has (386 KB minified) into each Lambda bundle that
 * reaches this folder — Channeling, Prompt, VesselExecutor, SessionTurn — for this one call, whose retries are off
 * and whose errors the gateway maps back to its own anyway. What of the SDK the translation relied on is here:
 * the headers, the time-out, `[DONE]` ending a stream, and an `{error}` chunk failing it.
 */

/** Where and how to call: the fields a ProviderRequest and a ChatPassthroughRequest share. */
export type Upstream = Pick<ChatPassthroughRequest, 'baseUrl' | 'apiKey' | 'signal' | 'timeoutMs'>;

export interface PostOptions {
  /** Asks for SSE (the body says `stream: true`). */
  stream: boolean;
  /**
   * What `timeoutMs` bounds: the whole exchange, body included (`'whole'`: every JSON answer, and a passed-through
   * stream, as the Anthropic provider's), or only the wait for a 2xx's headers (`'headers'`: a translated stream, as
   * the openai SDK bounded it — after that, only each gap between chunks is, by `readWithin` in stream.ts).
   */
  deadline: 'whole' | 'headers';
  /** Stops the request, body included, besides the client's signal (a translated stream's own abort). */
  signal?: AbortSignal;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** POSTs `body` with the project's key: the 2xx response, or the failure it is (providers/errors.ts's policy). */
export async function postChatCompletions(provider: ChatProviderId, to: Upstream, body: unknown, opts: PostOptions): Promise<Response | ChatFailure> {
  const signals = [to.signal, ...(opts.signal ? [opts.signal] : [])];
  let headersDeadline: NodeJS.Timeout | undefined;
  if (opts.deadline === 'whole') {
    signals.push(AbortSignal.timeout(to.timeoutMs));
  } else {
    const deadline = new AbortController();
    headersDeadline = setTimeout(() => deadline.abort(new DOMException(`No answer within ${to.timeoutMs} ms`, 'TimeoutError')), to.timeoutMs);
    signals.push(deadline.signal);
  }
  const started = performance.now();
  try {
    let res: Response;
    try {
      res = await fetch(`${to.baseUrl.replace(/\/+$/, '')}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${to.apiKey}`, accept: opts.stream ? 'text/event-stream' : 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.any(signals),
      });
    } catch (err) {
      return connectionFailure(provider, err, to.timeoutMs);
    }
    timePhase(accessRecord(), 'connect', started);
    // An error's body is still part of the answer the deadline waits for.
    return res.ok ? res : await responseFailure(provider, res);
  } finally {
    clearTimeout(headersDeadline);
  }
}

/**
 * A JSON answer, read whole: its bytes and their parse. A body that is not a JSON object is a failure to reach the
 * upstream; one that is an error without choices (OpenRouter may answer 200 with `{error:{code, message}}`) is that
 * error.
 */
export async function readCompletion(
  provider: ChatProviderId,
  res: Response,
  timeoutMs: number,
): Promise<{ kind: 'completion'; text: string; completion: Record<string, unknown> } | ChatFailure> {
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
    return connectionFailure(provider, err, timeoutMs);
  }
  if (completion.error !== undefined && !(Array.isArray(completion.choices) && completion.choices.length)) return bodyFailure(provider, completion.error);
  return { kind: 'completion', text, completion };
}

/**
 * A stream's SSE body → its chunks, read only as they are asked for. As the openai SDK's stream did: `data: [DONE]`
 * ends it; an `{error:…}` chunk or an `event: error` fails it with an UpstreamError; and once `signal` is aborted (the
 * client left, or the reader gave up on the upstream) it just ends. Ending the iteration early cancels the body.
 */
export async function* chatCompletionChunks(res: Response, signal: AbortSignal): AsyncGenerator<OpenAI.Chat.ChatCompletionChunk> {
  if (!res.body) throw new Error('the upstream answered the stream without a body');
  const reader = res.body.getReader();
  const sse = new SseDecoder();
  try {
    for (;;) {
      if (signal.aborted) return;
      let read: ReadableStreamReadResult<Uint8Array>;
      try {
        read = await reader.read();
      } catch (err) {
        if (signal.aborted) return;
        throw err;
      }
      for (const event of read.done ? sse.end() : sse.push(read.value)) {
        if (event.data === '[DONE]') return;
        yield chunkOf(event);
      }
      if (read.done) return;
    }
  } finally {
    reader.cancel().catch(() => undefined);
  }
}

function chunkOf(event: SseEvent): OpenAI.Chat.ChatCompletionChunk {
  let data: unknown;
  try {
    data = JSON.parse(event.data);
  } catch {
    throw new SyntaxError('Error reading response: malformed server-sent event JSON.');
  }
  const error = (data as { error?: unknown } | null)?.error;
  if (event.event === 'error') throw new UpstreamError(error ?? data);
  if (error) throw new UpstreamError(error);
  return data as OpenAI.Chat.ChatCompletionChunk;
}
