import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import { completionIdOf, finishForStop, openaiUsage, toolCallOf, type AnthropicUsage, type FinishReason } from '../providers/chat-completions/mapping.ts';
import type { StreamEvent } from '../metering/accumulator.ts';

/**
 * Anthropic answers → OpenAI Chat Completions answers, for `POST /v1/chat/completions` with a Claude model
 * (docs/openai.md): a Message → `chat.completion`, and the stream's Anthropic events → `chat.completion.chunk` SSE.
 * Stop reasons, tool calls, usage and ids go through the shared tables (providers/chat-completions/mapping.ts).
 */

/** The assistant message of a completion, with the reasoning text where DeepSeek-style clients look for it. */
type CompletionMessage = OpenAI.Chat.ChatCompletionMessage & { reasoning_content?: string };

export function chatCompletion(message: Anthropic.Message, opts: { model: string; created: number }): OpenAI.Chat.ChatCompletion {
  const texts: string[] = [];
  const thinking: string[] = [];
  const calls: OpenAI.Chat.ChatCompletionMessageFunctionToolCall[] = [];
  for (const block of message.content ?? []) {
    if (block.type === 'text') texts.push(block.text);
    else if (block.type === 'thinking') thinking.push(block.thinking);
    else if (block.type === 'tool_use') calls.push(toolCallOf(block));
  }
  const reply: CompletionMessage = {
    role: 'assistant',
    // Text blocks of one answer are pieces of one text (split around citations or tool calls): joined as they are.
    content: texts.length || !calls.length ? texts.join('') : null,
    refusal: null,
  };
  if (calls.length) reply.tool_calls = calls;
  if (thinking.length) reply.reasoning_content = thinking.join('');
  return {
    id: completionIdOf(message.id),
    object: 'chat.completion',
    created: opts.created,
    model: opts.model,
    choices: [{ index: 0, message: reply, finish_reason: finishForStop(message.stop_reason), logprobs: null }],
    usage: openaiUsage(message.usage as Partial<AnthropicUsage>),
  };
}

/**
 * Anthropic stream events → Chat Completions chunks, as SSE text (`data: {...}\n\n`):
 *
 *   message_start        a chunk with `delta: {role:"assistant", content:""}`
 *   text / thinking      `delta.content` / `delta.reasoning_content`
 *   tool_use block       `delta.tool_calls[{index, id, type, function:{name, arguments:""}}]`, then its
 *                        input_json_delta fragments as `function.arguments` under the same index
 *   message_stop         the finish chunk (`finish_reason`), the usage chunk (`choices: []`) when include_usage was
 *                        asked, then `data: [DONE]`
 *   error                `data: {"error":{…}}` (the openai SDKs throw it) and nothing after it
 *
 * A stream that ends without `message_stop` (a broken upstream) ends with an error chunk and no `[DONE]`.
 */
export class ChunkTranslator {
  private id = 'chatcmpl-';
  /** Anthropic block index → OpenAI tool call index. */
  private readonly toolIndexes = new Map<number, number>();
  private usage: Partial<AnthropicUsage> = {};
  private stop: string | null | undefined;
  ended = false;

  constructor(private readonly opts: { model: string; created: number; includeUsage: boolean }) {}

  push(event: StreamEvent): string[] {
    if (this.ended) return [];
    switch (event.type) {
      case 'message_start':
        this.id = completionIdOf(event.message.id);
        this.mergeUsage(event.message.usage);
        return [this.chunk({ role: 'assistant', content: '' })];
      case 'content_block_start': {
        const block = event.content_block;
        if (block.type === 'tool_use') {
          const index = this.toolIndexes.size;
          this.toolIndexes.set(event.index, index);
          return [this.chunk({ tool_calls: [{ index, id: block.id, type: 'function', function: { name: block.name, arguments: '' } }] })];
        }
        if (block.type === 'text' && block.text) return [this.chunk({ content: block.text })];
        return [];
      }
      case 'content_block_delta': {
        const delta = event.delta;
        if (delta.type === 'text_delta' && delta.text) return [this.chunk({ content: delta.text })];
        if (delta.type === 'thinking_delta' && delta.thinking) return [this.chunk({ reasoning_content: delta.thinking })];
        const index = this.toolIndexes.get(event.index);
        if (delta.type === 'input_json_delta' && delta.partial_json && index !== undefined) {
          return [this.chunk({ tool_calls: [{ index, function: { arguments: delta.partial_json } }] })];
        }
        return [];
      }
      case 'message_delta':
        if (event.delta?.stop_reason !== undefined) this.stop = event.delta.stop_reason;
        this.mergeUsage(event.usage);
        return [];
      case 'message_stop': {
        this.ended = true;
        const out = [this.chunk({}, finishForStop(this.stop))];
        if (this.opts.includeUsage) out.push(sse({ ...this.envelope(), choices: [], usage: openaiUsage(this.usage) }));
        out.push('data: [DONE]\n\n');
        return out;
      }
      case 'error':
        return [this.fail(event.error?.message ?? 'The upstream failed mid-stream', event.error?.type)];
      default:
        return [];
    }
  }

  /** The Anthropic stream ended: nothing more if it finished, else the error chunk of a broken stream. */
  end(): string[] {
    if (this.ended) return [];
    return [this.fail('The upstream stream ended before the answer was complete', 'api_error')];
  }

  private fail(message: string, type = 'api_error'): string {
    this.ended = true;
    return sse({ error: { message, type: type === 'overloaded_error' || type === 'api_error' ? 'api_error' : type, param: null, code: null } });
  }

  /** Figures present in an event replace the ones known (message_delta carries the final ones). */
  private mergeUsage(usage: unknown): void {
    for (const [key, value] of Object.entries((usage ?? {}) as Record<string, unknown>)) {
      if (typeof value === 'number') (this.usage as Record<string, number>)[key] = value;
    }
  }

  private envelope() {
    return { id: this.id, object: 'chat.completion.chunk', created: this.opts.created, model: this.opts.model };
  }

  private chunk(delta: Record<string, unknown>, finish: FinishReason | null = null): string {
    const chunk: Record<string, unknown> = { ...this.envelope(), choices: [{ index: 0, delta, logprobs: null, finish_reason: finish }] };
    if (this.opts.includeUsage) chunk.usage = null;
    return sse(chunk);
  }
}

function sse(data: unknown): string {
  return `data: ${JSON.stringify(data)}\n\n`;
}
