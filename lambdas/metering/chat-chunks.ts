import { anthropicUsage } from '../providers/chat-completions/mapping.ts';
import { estimateProducedTokens } from '../providers/token-estimates.ts';
import type { TokenUsage } from '../pricing/prices.ts';
import { openaiError } from '../refusals/openai.ts';
import { SseDecoder } from '../streaming/sse.ts';
import type { StreamMeter } from './call.ts';
import { plausibleCount } from './usage.ts';

/**
 * Metering of OpenAI's Chat Completions answers passed through (`POST /v1/chat/completions` with an OpenAI or
 * OpenRouter model, metering/chat-call.ts): the usage object read with the same trust rule as Anthropic's
 * (metering/usage.ts), mapped with the one usage table (providers/chat-completions/mapping.ts), and the stream's
 * chunks read once, as they pass, by `ChatChunkMeter` — Anthropic's MessageAccumulator's counterpart.
 */

/** One decoded `data:` chunk of a Chat Completions stream (only what the gateway reads of it). */
export interface ChatChunk {
  choices?: { index?: number; delta?: Record<string, unknown> | null; finish_reason?: string | null }[] | null;
  usage?: unknown;
  error?: unknown;
}

/** An OpenAI usage object as the gateway meters it, or undefined when it cannot be trusted. */
export function trustedChatUsage(raw: unknown): TokenUsage | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const u = raw as { prompt_tokens?: unknown; completion_tokens?: unknown; prompt_tokens_details?: { cached_tokens?: unknown } | null };
  if (!plausibleCount(u.prompt_tokens) || !plausibleCount(u.completion_tokens)) return undefined;
  const cached = u.prompt_tokens_details?.cached_tokens;
  if (cached !== undefined && cached !== null && (!plausibleCount(cached) || cached > u.prompt_tokens)) return undefined;
  return { ...anthropicUsage(raw as Parameters<typeof anthropicUsage>[0]), web_search_requests: 0 };
}

/** What the choices of a complete answer produced, for when its usage cannot be trusted. */
export function producedByCompletion(choices: unknown): number {
  if (!Array.isArray(choices)) return 0;
  let pieces = 0;
  let characters = 0;
  for (const choice of choices as { message?: Record<string, unknown> }[]) {
    const counted = countProduced(choice?.message);
    pieces += counted.pieces;
    characters += counted.characters;
  }
  return estimateProducedTokens(pieces, characters);
}

/** Text a message or a delta carries: content, reasoning (either field), a refusal, tool names and arguments. */
function countProduced(part: Record<string, unknown> | null | undefined): { pieces: number; characters: number } {
  if (!part || typeof part !== 'object') return { pieces: 0, characters: 0 };
  let pieces = 0;
  let characters = 0;
  for (const field of ['content', 'reasoning_content', 'reasoning', 'refusal'] as const) {
    const text = part[field];
    if (typeof text === 'string' && text) {
      pieces++;
      characters += text.length;
    }
  }
  if (Array.isArray(part.tool_calls)) {
    for (const call of part.tool_calls as { function?: { name?: unknown; arguments?: unknown } }[]) {
      const fn = call?.function;
      const text = `${typeof fn?.name === 'string' ? fn.name : ''}${typeof fn?.arguments === 'string' ? fn.arguments : ''}`;
      if (text) {
        pieces++;
        characters += text.length;
      }
    }
  }
  return { pieces, characters };
}

/** The bytes that end a Chat Completions stream when the upstream fails mid-stream (the openai SDKs throw it). */
export function chatStreamFailure(message: string): Uint8Array {
  return new TextEncoder().encode(`data: ${JSON.stringify(openaiError(message, 'api_error'))}\n\n`);
}

/**
 * Reads Chat Completions SSE bytes once, as they pass: the usage chunk (the gateway always asks for it), what was
 * produced (for a stream cut short, or one whose usage cannot be trusted), an error chunk, `[DONE]`; and hands each
 * `data:` payload to listeners (the route drops the usage chunk from them when its client did not ask for it).
 *
 * Charged as MessageAccumulator charges: the reported usage when it arrived and is believable; otherwise the input
 * bound and what was produced, never above the output limit.
 */
export class ChatChunkMeter implements StreamMeter {
  private readonly decoder = new SseDecoder();
  private readonly listeners: ((data: string, chunk: ChatChunk | undefined) => void)[] = [];
  private usage: TokenUsage | undefined;
  private pieces = 0;
  private characters = 0;
  private started = false;
  /** The last usage object as the upstream sent it (OpenRouter's carries the cost). */
  rawUsage: unknown;
  /** A usage object was present but not believable. */
  implausible = false;
  /** `data: [DONE]` arrived: the stream completed. */
  doneSeen = false;
  /** The stream's `{error}` chunk, when it carried one. */
  error: unknown;

  /** Calls `listener` with every `data:` payload from now on, and the chunk parsed from it (undefined for `[DONE]`). */
  onData(listener: (data: string, chunk: ChatChunk | undefined) => void): this {
    this.listeners.push(listener);
    return this;
  }

  push(bytes: Uint8Array): void {
    for (const { data } of this.decoder.push(bytes)) this.observe(data);
  }

  end(): void {
    for (const { data } of this.decoder.end()) this.observe(data);
  }

  /**
   * OpenAI reports the input only in the usage chunk at the end: nothing can be learned by reading on after a
   * disconnect, so the input counts as reported once the stream has started (and is charged at its bound unless the
   * usage chunk arrived).
   */
  get inputReported(): boolean {
    return this.started;
  }

  /** The upstream's usage could not be trusted: implausible, or missing from a stream that completed. */
  get usageUntrusted(): boolean {
    return this.implausible || (this.doneSeen && this.usage === undefined);
  }

  /** Usage to charge: the reported one, else `inputBound` and what was produced (at most `maxOutput`). */
  tokens(inputBound: number, maxOutput: number): TokenUsage {
    if (this.usage) return this.usage;
    return { input_tokens: inputBound, output_tokens: Math.min(estimateProducedTokens(this.pieces, this.characters), maxOutput), web_search_requests: 0 };
  }

  private observe(data: string): void {
    this.started = true;
    let chunk: ChatChunk | undefined;
    if (data.trim() === '[DONE]') this.doneSeen = true;
    else {
      try {
        const parsed = JSON.parse(data) as unknown;
        if (parsed && typeof parsed === 'object') chunk = parsed as ChatChunk;
      } catch {
        // not JSON: passed on, not metered
      }
    }
    if (chunk) {
      if (chunk.error !== undefined && chunk.error !== null) this.error = chunk.error;
      if (chunk.usage !== undefined && chunk.usage !== null) {
        this.rawUsage = chunk.usage;
        const trusted = trustedChatUsage(chunk.usage);
        if (trusted) this.usage = trusted;
        else this.implausible = true;
      }
      if (Array.isArray(chunk.choices)) {
        for (const choice of chunk.choices) {
          const counted = countProduced(choice?.delta);
          this.pieces += counted.pieces;
          this.characters += counted.characters;
        }
      }
    }
    for (const listener of this.listeners) listener(data, chunk);
  }
}
