import type Anthropic from '@anthropic-ai/sdk';
import { estimateProducedTokens, type TokenUsage } from '../pricing/prices.ts';
import { SseDecoder } from '../streaming/sse.ts';

/**
 * Watches Anthropic SSE bytes as they pass and keeps the usage they report: `message_start` carries the input side,
 * `message_delta` the final output count. A stream cut short never sends the final count, so the meter also counts
 * what was produced (`estimateProducedTokens`); the larger of that and any reported figure is charged.
 */
export class StreamMeter {
  private readonly decoder = new SseDecoder();
  private usage: TokenUsage = { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 };
  private deltas = 0;
  private producedChars = 0;
  /** True once `message_delta` (with the final usage) arrived. */
  finalUsageSeen = false;
  stopSeen = false;
  errorSeen = false;

  push(chunk: Uint8Array): void {
    for (const { data } of this.decoder.push(chunk)) this.observe(data);
  }

  end(): void {
    for (const { data } of this.decoder.end()) this.observe(data);
  }

  private observe(data: string): void {
    let event: Anthropic.RawMessageStreamEvent | { type: 'error' } | { type: 'ping' };
    try {
      event = JSON.parse(data) as typeof event;
    } catch {
      return;
    }
    switch (event.type) {
      case 'message_start':
        this.merge(event.message.usage);
        break;
      case 'message_delta':
        this.merge(event.usage as Partial<Anthropic.Usage>);
        this.finalUsageSeen = true;
        break;
      case 'content_block_delta': {
        this.deltas++;
        const d = event.delta as { text?: string; thinking?: string; partial_json?: string };
        this.producedChars += (d.text ?? d.thinking ?? d.partial_json ?? '').length;
        break;
      }
      case 'message_stop':
        this.stopSeen = true;
        break;
      case 'error':
        this.errorSeen = true;
        break;
    }
  }

  private merge(u: Partial<Anthropic.Usage> | undefined): void {
    if (!u) return;
    if (typeof u.input_tokens === 'number') this.usage.input_tokens = u.input_tokens;
    if (typeof u.output_tokens === 'number') this.usage.output_tokens = u.output_tokens;
    if (typeof u.cache_read_input_tokens === 'number') this.usage.cache_read_input_tokens = u.cache_read_input_tokens;
    if (typeof u.cache_creation_input_tokens === 'number') this.usage.cache_creation_input_tokens = u.cache_creation_input_tokens;
    const oneHour = (u as { cache_creation?: { ephemeral_1h_input_tokens?: number } }).cache_creation?.ephemeral_1h_input_tokens;
    if (typeof oneHour === 'number') this.usage.cache_creation_1h_input_tokens = oneHour;
  }

  /** Usage to charge: as reported when the stream completed, else at least what was produced. */
  tokens(): TokenUsage {
    if (this.finalUsageSeen) return { ...this.usage };
    const produced = estimateProducedTokens(this.deltas, this.producedChars);
    return { ...this.usage, output_tokens: Math.max(this.usage.output_tokens, produced) };
  }
}
