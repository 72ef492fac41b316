import { clock } from '../config/clock.ts';
import { parseJsonBody, readBodyText } from '../http/body.ts';
import { afterResponse } from '../instance/unfinished.ts';
import { meteredCall } from '../metering/call.ts';
import { meteredChatCompletion } from '../metering/chat-call.ts';
import type { ChatChunk } from '../metering/chat-chunks.ts';
import type { Caller } from '../auth/claims.ts';
import { accessRecord, timePhase } from '../observability/access-log.ts';
import { passthroughRequest, type PassthroughRequest } from '../openai-ingress/passthrough.ts';
import { anthropicRequest } from '../openai-ingress/request.ts';
import { chatCompletion, ChunkTranslator } from '../openai-ingress/response.ts';
import type { MessagesRequest } from '../providers/types.ts';
import { describeIssue } from '../refusals/describe.ts';
import { openaiRefusal } from '../refusals/openai.ts';
import { Refused } from '../refusals/refusal.ts';
import { routeModel } from '../routing/route.ts';
import { proxyCaller } from './caller.ts';
import { chargeHeaders, clampHeaders, streamHeaders } from './messages.ts';
import { MessagesBody } from './schema.ts';

/**
 * POST /v1/chat/completions (DESIGN §11, docs/openai.md): OpenAI's Chat Completions format on the channeling URL, with
 * the token, budgets, hard cap and pricing of /v1/messages. The model decides the way (routing/route.ts):
 * - a Claude model: the request is translated to Anthropic's format (openai-ingress/request.ts), checked by the same
 *   schema as /v1/messages, goes through the one metered model call, and its answer — JSON or stream — is translated
 *   back (openai-ingress/response.ts);
 * - an OpenAI or OpenRouter model: the request is passed through with every field it carries
 *   (openai-ingress/passthrough.ts), metered by the same call for this format (metering/chat-call.ts), and its answer
 *   comes back as the upstream sent it.
 * Refusals are rendered in OpenAI's envelope (refusals/openai.ts; the app picks it for this path).
 */
export async function handleChatCompletions(req: Request): Promise<Response> {
  const log = accessRecord();
  let phaseStart = performance.now();
  const caller = await proxyCaller(req);
  timePhase(log, 'token', phaseStart);
  phaseStart = performance.now();
  const chat = parseJsonBody(await readBodyText(req));
  const model = (chat as { model?: unknown })?.model;
  if (typeof model === 'string' && model) {
    log.model = model;
    const route = routeModel(model);
    if (route.provider !== 'anthropic') {
      const request = passthroughRequest(chat as Record<string, unknown> & { model: string }, route.provider, route.upstreamModel);
      timePhase(log, 'parse', phaseStart);
      return passThrough(caller, request);
    }
  }
  const translated = anthropicRequest(chat);
  const parsed = MessagesBody.safeParse(translated.body);
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  timePhase(log, 'parse', phaseStart);
  const body = parsed.data as unknown as MessagesRequest;

  const call = await meteredCall({ caller, body });
  if (!call.ok) return openaiRefusal(call.refusal, clampHeaders(call.clampedMaxTokens));
  const created = Math.floor(clock.now() / 1000);
  if (call.kind === 'message') {
    afterResponse(accessRecord(), call.settle);
    return Response.json(chatCompletion(call.message, { model: body.model, created }), { headers: chargeHeaders(call.clampedMaxTokens, call.charge) });
  }
  const translator = new ChunkTranslator({ model: body.model, created, includeUsage: translated.includeUsage });
  return new Response(
    chunkStream(call.stream.body, translator, (emit) => call.stream.accumulator.onEvent((event) => emit(translator.push(event)))),
    { headers: streamHeaders(call.clampedMaxTokens) },
  );
}

/** An OpenAI or OpenRouter model: the request passed through and metered; the answer as the upstream sent it. */
async function passThrough(caller: Caller, request: PassthroughRequest): Promise<Response> {
  const call = await meteredChatCompletion({ caller, ...request });
  if (!call.ok) return openaiRefusal(call.refusal, clampHeaders(call.clampedMaxTokens), call.openai);
  if (call.kind === 'completion') {
    afterResponse(accessRecord(), call.settle);
    return new Response(call.text, { headers: { ...chargeHeaders(call.clampedMaxTokens, call.charge), 'content-type': 'application/json' } });
  }
  // The client asked for the usage chunk: the upstream's bytes as they are. Otherwise the same chunks, less the usage
  // the gateway asked for on its own behalf.
  const headers = streamHeaders(call.clampedMaxTokens);
  if (request.includeUsage) return new Response(call.stream.body, { headers });
  const filter = new UsageChunkFilter();
  return new Response(
    chunkStream(call.stream.body, filter, (emit) => call.stream.accumulator.onData((data, chunk) => emit(filter.push(data, chunk)))),
    { headers },
  );
}

/**
 * A passed-through stream without the usage the client did not ask for (OpenAI's own behaviour without
 * `stream_options.include_usage`): the usage chunk (`choices: []`) is dropped, a usage field on another chunk removed;
 * every other chunk is passed on as its `data:` line.
 */
class UsageChunkFilter {
  ended = false;
  private failed = false;

  push(data: string, chunk: ChatChunk | undefined): string[] {
    if (this.ended) return [];
    if (!chunk) {
      if (data.trim() === '[DONE]') this.ended = true;
      return [`data: ${data}\n\n`];
    }
    if (chunk.error !== undefined && chunk.error !== null) this.failed = true;
    if (!('usage' in chunk)) return [`data: ${data}\n\n`];
    if (chunk.usage !== null && (!Array.isArray(chunk.choices) || chunk.choices.length === 0)) return [];
    const { usage: _usage, ...rest } = chunk;
    return [`data: ${JSON.stringify(rest)}\n\n`];
  }

  /** The upstream's stream ended: nothing more if it finished or said why not, else the error chunk of a broken stream. */
  end(): string[] {
    if (this.ended || this.failed) return [];
    this.ended = true;
    return [
      `data: ${JSON.stringify({ error: { message: 'The upstream stream ended before the answer was complete', type: 'api_error', param: null, code: null } })}\n\n`,
    ];
  }
}

/**
 * A metered stream re-rendered for the client: `subscribe` registers the listener through which the stream's meter
 * hands each decoded piece, and `emit`s what to send for it (translated chunks, or the passed-through chunks less a
 * usage the client did not ask for). The metered body is read as the client reads, so metering, settlement and the
 * upstream's back-pressure are exactly /v1/messages' — the stream is metered whether or not the client asked for
 * usage; cancelling this stream cancels the metered one (which stops the upstream and settles what was produced).
 */
function chunkStream(
  source: ReadableStream<Uint8Array>,
  translator: { end(): string[]; readonly ended: boolean },
  subscribe: (emit: (pieces: string[]) => void) => void,
): ReadableStream<Uint8Array> {
  const queue: string[] = [];
  subscribe((pieces) => queue.push(...pieces));
  const reader = source.getReader();
  const encoder = new TextEncoder();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        // Read until there is something to send: some events (pings, block stops) have no chunk.
        for (;;) {
          let { done } = await reader.read();
          if (done) queue.push(...translator.end());
          const sent = queue.length > 0;
          if (sent) controller.enqueue(encoder.encode(queue.splice(0).join('')));
          if (translator.ended && !done) {
            // [DONE] (or an error chunk) was the last word: clients stop reading there (the openai SDKs do, without
            // cancelling), so the metered stream is read to its end now and this one closed — its settlement waits
            // for that end.
            while (!(await reader.read()).done);
            done = true;
          }
          if (done) {
            controller.close();
            return;
          }
          if (sent) return;
        }
      },
      cancel: (reason) => reader.cancel(reason),
    },
    { highWaterMark: 0 },
  );
}
