import type Anthropic from '@anthropic-ai/sdk';
import { estimateProducedTokens, trustedAnthropicUsage } from '../metering/usage.ts';
import type { TokenUsage } from '../pricing/prices.ts';
import { SseDecoder } from '../streaming/sse.ts';

/**
 * Watches Anthropic SSE bytes as they pass and keeps the usage they report: `message_start` carries the input side,
 * `message_delta` the final output count (and server-tool uses). Nothing reported is taken blindly
 * (metering/usage.ts): an implausible usage object is ignored; input never reported is charged at the gateway's
 * own input bound; output is the final count when one arrived and is at least the number of content deltas
 * delivered (each carries a token), otherwise what was produced (`estimateProducedTokens`).
 */
export class StreamMeter {
  private readonly decoder = new SseDecoder();
  private usage: TokenUsage = { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, web_search_requests: 0 };
  private inputSeen = false;
  private outputSeen = false;
  private deltas = 0;
  private producedChars = 0;
  /** An usage figure was present but not believable. */
  implausible = false;
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
        this.merge(event.message?.usage, 'start');
        break;
      case 'message_delta':
        this.merge(event.usage, 'delta');
        break;
      case 'content_block_delta': {
        this.deltas++;
        const d = (event.delta ?? {}) as { text?: string; thinking?: string; partial_json?: string };
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

  /**
   * message_start's usage has every field; message_delta's repeats only some (cumulative), and may give the others as
   * null (the SDK types them `number | null`): a null is an absent field, not a bad one. Every field present is
   * judged by the one trust rule (metering/usage.ts); if any is implausible the whole object is noted and left out.
   */
  private merge(raw: unknown, phase: 'start' | 'delta'): void {
    if (!raw || typeof raw !== 'object') return;
    const u = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null && v !== undefined));
    // Filling the required fields lets the trust rule judge an object that repeats only some of them.
    const trusted = trustedAnthropicUsage({ input_tokens: 0, output_tokens: 0, ...u });
    if (!trusted) {
      this.implausible = true;
      return;
    }
    if ('input_tokens' in u) {
      this.usage.input_tokens = trusted.input_tokens;
      this.inputSeen = true;
    }
    if ('output_tokens' in u) {
      // message_start's count is what was produced so far; only message_delta's is the final one.
      this.usage.output_tokens = trusted.output_tokens;
      if (phase === 'delta') this.outputSeen = true;
    }
    if ('cache_read_input_tokens' in u) this.usage.cache_read_input_tokens = trusted.cache_read_input_tokens;
    if ('cache_creation_input_tokens' in u) this.usage.cache_creation_input_tokens = trusted.cache_creation_input_tokens;
    if ('cache_creation' in u) this.usage.cache_creation_1h_input_tokens = trusted.cache_creation_1h_input_tokens;
    if ('server_tool_use' in u) this.usage.web_search_requests = trusted.web_search_requests;
  }

  /** True once the provider has reported the input side (message_start). */
  get inputReported(): boolean {
    return this.inputSeen;
  }

  /**
   * The provider's usage could not be trusted: a figure was implausible, or a stream that completed (message_stop)
   * lacked its counts. A stream cut short is charged from what was produced too, but that is expected, not distrust.
   */
  get usageUntrusted(): boolean {
    return this.implausible || (this.stopSeen && (!this.inputSeen || !this.outputSeen || this.usage.output_tokens < this.deltas));
  }

  /**
   * Usage to charge; `inputBound` stands in for an input count the stream never reported, and the produced-token
   * estimate never exceeds `maxTokens` (the provider cannot have produced more), so it stays inside the reservation.
   */
  tokens(inputBound: number, maxTokens: number): TokenUsage {
    const produced = Math.min(estimateProducedTokens(this.deltas, this.producedChars), maxTokens);
    const output = this.outputSeen && this.usage.output_tokens >= this.deltas ? this.usage.output_tokens : Math.max(this.usage.output_tokens, produced);
    return { ...this.usage, input_tokens: this.inputSeen ? this.usage.input_tokens : inputBound, output_tokens: output };
  }
}
