import { clock } from '../config/clock.ts';
import { parseJsonBody, readBodyText } from '../http/body.ts';
import { afterResponse } from '../instance/unfinished.ts';
import { meteredCall, type MeteredStream } from '../metering/call.ts';
import { accessRecord, timePhase } from '../observability/access-log.ts';
import { anthropicRequest } from '../openai-ingress/request.ts';
import { chatCompletion, ChunkTranslator } from '../openai-ingress/response.ts';
import type { MessagesRequest } from '../providers/types.ts';
import { describeIssue } from '../refusals/describe.ts';
import { openaiRefusal } from '../refusals/openai.ts';
import { Refused } from '../refusals/refusal.ts';
import { routeModel } from '../routing/route.ts';
import { proxyCaller } from './caller.ts';
import { COST_HEADER, MAX_TOKENS_HEADER, REMAINING_HEADER } from './messages.ts';
import { MessagesBody } from './schema.ts';

/**
 * POST /v1/chat/completions (DESIGN §11, docs/openai.md): OpenAI's Chat Completions format on the channeling URL, with
 * the token, budgets, hard cap and pricing of /v1/messages. The request is translated to Anthropic's format
 * (openai-ingress/request.ts), checked by the same schema as /v1/messages, goes through the one metered model call,
 * and its answer — JSON or stream — is translated back (openai-ingress/response.ts). Refusals are rendered in OpenAI's
 * envelope (refusals/openai.ts; the app picks it for this path).
 */
export async function handleChatCompletions(req: Request): Promise<Response> {
  const log = accessRecord();
  let phaseStart = performance.now();
  const caller = await proxyCaller(req);
  timePhase(log, 'token', phaseStart);
  phaseStart = performance.now();
  const chat = parseJsonBody(await readBodyText(req));
  const model = (chat as { model?: unknown })?.model;
  if (typeof model === 'string') {
    log.model = model;
    if (routeModel(model).provider !== 'anthropic') throw notServedYet(model);
  }
  const translated = anthropicRequest(chat);
  const parsed = MessagesBody.safeParse(translated.body);
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  timePhase(log, 'parse', phaseStart);
  const body = parsed.data as unknown as MessagesRequest;

  const call = await meteredCall({ caller, body });
  const clamp: Record<string, string> = call.clampedMaxTokens === undefined ? {} : { [MAX_TOKENS_HEADER]: String(call.clampedMaxTokens) };
  if (!call.ok) return openaiRefusal(call.refusal, clamp);
  const created = Math.floor(clock.now() / 1000);
  if (call.kind === 'message') {
    afterResponse(accessRecord(), call.settle);
    const headers: Record<string, string> = { ...clamp, [COST_HEADER]: String(call.charge.microdollars) };
    if (call.charge.remaining !== undefined) headers[REMAINING_HEADER] = String(call.charge.remaining);
    return Response.json(chatCompletion(call.message, { model: body.model, created }), { headers });
  }
  const translator = new ChunkTranslator({ model: body.model, created, includeUsage: translated.includeUsage });
  return new Response(chunkStream(call.stream, translator), {
    headers: { ...clamp, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' },
  });
}

/** Other providers on this route come with the passthrough (issue 29's later part): this one refusal goes then. */
function notServedYet(model: string): Refused {
  return new Refused({
    kind: 'invalid_request',
    param: 'model',
    message: `model: "${model}" is not served on /v1/chat/completions yet; only claude-* models are served on this route for now (use /v1/messages for other models)`,
  });
}

/**
 * The metered stream's Anthropic events as Chat Completions chunks. The metered body is read as the client reads
 * (its accumulator decodes each piece and hands the events to the translator), so metering, settlement and the
 * upstream's back-pressure are exactly /v1/messages' — the stream is metered whether or not the client asked for
 * usage; cancelling this stream cancels the metered one (which stops the upstream and settles what was produced).
 */
function chunkStream(stream: MeteredStream, translator: ChunkTranslator): ReadableStream<Uint8Array> {
  const queue: string[] = [];
  stream.accumulator.onEvent((event) => queue.push(...translator.push(event)));
  const reader = stream.body.getReader();
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
