import type OpenAI from 'openai';
import { PROVIDER_LABELS } from '../../routing/provider-ids.ts';
import { readWithin } from '../../streaming/idle-timeout.ts';
import { encodeSse } from '../../streaming/sse.ts';
import { estimateProducedTokens } from '../token-estimates.ts';
import type { AnthropicErrorBody } from '../types.ts';
import type { ChatProviderId } from './dialect.ts';
import { streamFailure } from './errors.ts';
import { anthropicMessage, anthropicUsage, messageId, reasoningOf, stopReason, type AnswerContext, type AnthropicUsage, type Block } from './response.ts';

/**
 * Chat Completion chunks → Anthropic stream events.
 *
 *   message_start                      once, at the first chunk (usage: the input estimate — real figures come at the end)
 *   content_block_start/delta/stop     one block at a time, indexes 0, 1, 2…: thinking (thinking_delta), text
 *                                      (text_delta), then one tool_use block per tool call (input_json_delta)
 *   message_delta                      stop_reason + the final usage, once the usage chunk (`choices: []`) came
 *                                      (or the stream ended without one)
 *   message_stop
 *
 * A failure after the start is one `event: error` and the end of the stream (no further events).
 */

export interface StreamEvent {
  event: string;
  data: unknown;
}

type Open = { kind: 'thinking' | 'text'; index: number } | { kind: 'tool'; index: number; toolIndex: number };

export class StreamTranslator {
  private started = false;
  private nextIndex = 0;
  private open: Open | undefined;
  /** OpenAI tool call index → Anthropic block index. */
  private readonly toolBlocks = new Map<number, number>();
  private finish: string | null | undefined;
  private matchedStop: unknown;
  private hasToolCalls = false;
  private usage: OpenAI.CompletionUsage | undefined;
  private producedChars = 0;
  private deltas = 0;
  /** The `usage` object of the usage chunk as sent (OpenRouter adds `cost`). */
  rawUsage: unknown;
  ended = false;

  constructor(
    private readonly ctx: AnswerContext,
    /** Input tokens to report in message_start, and at the end when the upstream never sends usage. */
    private readonly inputEstimate = 0,
  ) {}

  /** True once the upstream said why it finished. */
  get finished(): boolean {
    return this.finish !== undefined && this.finish !== null;
  }

  push(chunk: OpenAI.Chat.ChatCompletionChunk): StreamEvent[] {
    const out: StreamEvent[] = [];
    if (this.ended) return out;
    this.start(out, chunk.id);
    if (chunk.usage) {
      this.usage = chunk.usage;
      this.rawUsage = chunk.usage;
    }
    for (const choice of chunk.choices ?? []) {
      if (choice.index !== undefined && choice.index !== 0) continue;
      const delta = (choice.delta ?? {}) as OpenAI.Chat.ChatCompletionChunk.Choice.Delta;
      const reasoning = reasoningOf(delta, this.ctx.dialect);
      if (reasoning) {
        this.ensure(out, 'thinking');
        this.delta(out, { type: 'thinking_delta', thinking: reasoning }, reasoning.length);
      }
      const text = delta.content || delta.refusal;
      if (text) {
        this.ensure(out, 'text');
        this.delta(out, { type: 'text_delta', text }, text.length);
      }
      for (const call of delta.tool_calls ?? []) this.toolCall(out, call);
      if (choice.finish_reason) {
        this.finish = delta.refusal && !delta.content ? 'content_filter' : choice.finish_reason;
        this.matchedStop = (choice as { stop_reason?: unknown }).stop_reason;
      }
    }
    return out;
  }

  /** The upstream ended normally: close the open block, report why and how much, stop. */
  end(): StreamEvent[] {
    const out: StreamEvent[] = [];
    if (this.ended) return out;
    this.start(out, undefined);
    this.close(out);
    const stop = stopReason(this.finish, { hasToolCalls: this.hasToolCalls, matched: this.matchedStop, stopSequences: this.ctx.stopSequences });
    out.push({
      event: 'message_delta',
      data: { type: 'message_delta', delta: { stop_reason: stop.stop_reason, stop_sequence: stop.stop_sequence }, usage: this.finalUsage() },
    });
    out.push({ event: 'message_stop', data: { type: 'message_stop' } });
    this.ended = true;
    return out;
  }

  /** The stream failed after it started: one error event, and nothing after it. */
  fail(body: AnthropicErrorBody): StreamEvent[] {
    if (this.ended) return [];
    this.ended = true;
    return [{ event: 'error', data: body }];
  }

  /** Usage as reported; without a usage chunk, the input estimate and the produced-token estimate. */
  finalUsage(): AnthropicUsage {
    if (this.usage) return anthropicUsage(this.usage);
    return {
      input_tokens: this.inputEstimate,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: estimateProducedTokens(this.deltas, this.producedChars),
    };
  }

  private start(out: StreamEvent[], upstreamId: string | undefined): void {
    if (this.started) return;
    this.started = true;
    const message = anthropicMessage({
      id: messageId(upstreamId),
      model: this.ctx.requestedModel,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      // The estimate until message_delta brings the upstream's figures: a stream that breaks is still charged input.
      usage: { input_tokens: this.inputEstimate, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
    });
    out.push({ event: 'message_start', data: { type: 'message_start', message } });
  }

  private ensure(out: StreamEvent[], kind: 'thinking' | 'text'): void {
    if (this.open?.kind === kind) return;
    this.close(out);
    const block: Block = kind === 'thinking' ? { type: 'thinking', thinking: '', signature: '' } : { type: 'text', text: '' };
    this.open = { kind, index: this.nextIndex++ };
    out.push({ event: 'content_block_start', data: { type: 'content_block_start', index: this.open.index, content_block: block } });
  }

  private close(out: StreamEvent[]): void {
    if (!this.open) return;
    out.push({ event: 'content_block_stop', data: { type: 'content_block_stop', index: this.open.index } });
    this.open = undefined;
  }

  private delta(out: StreamEvent[], delta: Record<string, string>, chars: number, index = this.open?.index ?? 0): void {
    this.deltas++;
    this.producedChars += chars;
    out.push({ event: 'content_block_delta', data: { type: 'content_block_delta', index, delta } });
  }

  private toolCall(out: StreamEvent[], call: OpenAI.Chat.ChatCompletionChunk.Choice.Delta.ToolCall): void {
    this.hasToolCalls = true;
    const toolIndex = call.index ?? 0;
    let blockIndex = this.toolBlocks.get(toolIndex);
    if (blockIndex === undefined) {
      // A new call: its first chunk carries the id, the name and often the first fragment of the arguments.
      this.close(out);
      blockIndex = this.nextIndex++;
      this.toolBlocks.set(toolIndex, blockIndex);
      this.open = { kind: 'tool', index: blockIndex, toolIndex };
      const block: Block = {
        type: 'tool_use',
        id: call.id ?? `call_${messageId(undefined).slice(4)}`,
        name: this.ctx.names.restore(call.function?.name ?? ''),
        input: {},
      };
      out.push({ event: 'content_block_start', data: { type: 'content_block_start', index: blockIndex, content_block: block } });
    }
    const fragment = call.function?.arguments;
    // A fragment of a call whose block was closed (servers that interleave parallel calls) still goes to its own
    // block index, where Anthropic's SDKs accumulate it.
    if (fragment) this.delta(out, { type: 'input_json_delta', partial_json: fragment }, fragment.length, blockIndex);
  }
}

/**
 * Runs the upstream's chunks (api.ts `chatCompletionChunks`) through a StreamTranslator into Anthropic SSE bytes. Pull-driven (nothing is read from
 * the upstream before the consumer asks), an idle gap longer than `timeoutMs` aborts the upstream and ends with an
 * error event, and cancelling the result aborts the upstream request.
 */
export function anthropicSseStream(opts: {
  chunks: AsyncIterable<OpenAI.Chat.ChatCompletionChunk>;
  translator: StreamTranslator;
  provider: ChatProviderId;
  timeoutMs: number;
  /** Aborts the upstream request. */
  abort: (reason?: unknown) => void;
}): ReadableStream<Uint8Array> {
  const { translator, provider, timeoutMs, abort } = opts;
  let iterator: AsyncIterator<OpenAI.Chat.ChatCompletionChunk> | undefined;
  const encode = (events: StreamEvent[]) => events.map((e) => encodeSse(e.event, e.data));

  const next = (): Promise<IteratorResult<OpenAI.Chat.ChatCompletionChunk>> => {
    iterator ??= opts.chunks[Symbol.asyncIterator]();
    return readWithin(iterator.next(), timeoutMs);
  };

  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        // Read until there is something to send: some chunks (role-only, empty content) produce no event.
        for (;;) {
          let events: StreamEvent[];
          let done = false;
          try {
            const result = await next();
            if (result.done) {
              done = true;
              events = translator.finished
                ? translator.end()
                : translator.fail(streamFailure(provider, new Error(`the stream ended before ${PROVIDER_LABELS[provider]} finished its answer`), timeoutMs));
            } else {
              events = translator.push(result.value);
            }
          } catch (err) {
            abort(err);
            done = true;
            events = translator.fail(streamFailure(provider, err, timeoutMs));
          }
          for (const bytes of encode(events)) controller.enqueue(bytes);
          if (done) {
            controller.close();
            return;
          }
          if (events.length) return;
        }
      },
      async cancel(reason) {
        abort(reason);
        await iterator?.return?.().catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
}
