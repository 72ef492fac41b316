import type Anthropic from '@anthropic-ai/sdk';
import type { TokenUsage } from '../pricing/prices.ts';
import { estimateProducedTokens } from '../providers/token-estimates.ts';
import { SseDecoder } from '../streaming/sse.ts';
import { trustedAnthropicUsage } from './usage.ts';

/** One decoded event of an Anthropic stream (`error` and `ping` included, which the SDK's union leaves out). */
export type StreamEvent = Anthropic.RawMessageStreamEvent | { type: 'error'; error?: { type?: string; message?: string } } | { type: 'ping' };

/**
 * Reads Anthropic SSE bytes once, as they pass, for everyone who needs them (the SDK's `MessageStream` is the
 * model): it meters the usage the stream reports, accumulates the message — text, thinking, and `tool_use` blocks with
 * their input parsed from its JSON deltas — and hands each decoded event to listeners (the agent runtime forwards
 * text deltas to its own client from here instead of decoding the stream a second time).
 *
 * Metering trusts nothing blindly (metering/usage.ts): an implausible usage object is ignored; input never reported
 * is charged at the gateway's own input bound; output is the final count when one arrived and is at least the number
 * of content deltas delivered (each carries a token), otherwise what was produced (`estimateProducedTokens`).
 */
export class MessageAccumulator {
  private readonly decoder = new SseDecoder();
  private readonly listeners: ((event: StreamEvent) => void)[] = [];
  private usage: TokenUsage = { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: 0, cache_creation_input_tokens: 0, web_search_requests: 0 };
  private inputSeen = false;
  private outputSeen = false;
  private deltas = 0;
  private producedChars = 0;
  private snapshot: Anthropic.Message | undefined;
  /** Raw JSON of each open tool block's input, by block index, until the block stops. */
  private readonly partialJson = new Map<number, string>();
  /** An usage figure was present but not believable. */
  implausible = false;
  stopSeen = false;
  /** The stream's `error` event, when it carried one. */
  error: { type?: string; message?: string } | undefined;

  /** Calls `listener` with every event decoded from now on. */
  onEvent(listener: (event: StreamEvent) => void): this {
    this.listeners.push(listener);
    return this;
  }

  push(chunk: Uint8Array): void {
    for (const { data } of this.decoder.push(chunk)) this.observe(data);
  }

  end(): void {
    for (const { data } of this.decoder.end()) this.observe(data);
  }

  get errorSeen(): boolean {
    return this.error !== undefined;
  }

  private observe(data: string): void {
    let event: StreamEvent;
    try {
      event = JSON.parse(data) as StreamEvent;
    } catch {
      return;
    }
    if (!event || typeof event !== 'object') return;
    switch (event.type) {
      case 'message_start':
        this.merge(event.message?.usage, 'start');
        this.snapshot = { ...event.message, content: [] } as Anthropic.Message;
        break;
      case 'message_delta':
        this.merge(event.usage, 'delta');
        if (this.snapshot && event.delta) {
          if (event.delta.stop_reason !== undefined) this.snapshot.stop_reason = event.delta.stop_reason;
          if (event.delta.stop_sequence !== undefined) this.snapshot.stop_sequence = event.delta.stop_sequence;
        }
        break;
      case 'content_block_start':
        if (this.snapshot && event.content_block) {
          this.snapshot.content[event.index] = structuredClone(event.content_block) as Anthropic.ContentBlock;
          if ('input' in event.content_block) this.partialJson.set(event.index, '');
        }
        break;
      case 'content_block_delta': {
        this.deltas++;
        const d = (event.delta ?? {}) as { type?: string; text?: string; thinking?: string; partial_json?: string; signature?: string; citation?: unknown };
        this.producedChars += (d.text ?? d.thinking ?? d.partial_json ?? '').length;
        this.applyDelta(event.index, d);
        break;
      }
      case 'content_block_stop':
        this.closeBlock(event.index);
        break;
      case 'message_stop':
        this.stopSeen = true;
        break;
      case 'error':
        this.error = event.error ?? {};
        break;
    }
    for (const listener of this.listeners) listener(event);
  }

  private applyDelta(
    index: number,
    d: { type?: string; text?: string; thinking?: string; partial_json?: string; signature?: string; citation?: unknown },
  ): void {
    const block = this.snapshot?.content[index] as (Record<string, unknown> & { type: string }) | undefined;
    if (!block) return;
    switch (d.type) {
      case 'text_delta':
        block.text = `${(block.text as string | undefined) ?? ''}${d.text ?? ''}`;
        break;
      case 'thinking_delta':
        block.thinking = `${(block.thinking as string | undefined) ?? ''}${d.thinking ?? ''}`;
        break;
      case 'signature_delta':
        block.signature = d.signature;
        break;
      case 'citations_delta':
        block.citations = [...((block.citations as unknown[] | null | undefined) ?? []), d.citation];
        break;
      case 'input_json_delta':
        this.partialJson.set(index, `${this.partialJson.get(index) ?? ''}${d.partial_json ?? ''}`);
        break;
    }
  }

  /** A tool block's input is its accumulated JSON, parsed once the block is complete (empty means `{}`). */
  private closeBlock(index: number): void {
    const json = this.partialJson.get(index);
    const block = this.snapshot?.content[index] as { input?: unknown } | undefined;
    if (json === undefined || !block) return;
    this.partialJson.delete(index);
    if (json.trim() === '') return;
    try {
      block.input = JSON.parse(json);
    } catch {
      // A tool input cut off mid-JSON (a broken stream) stays as the block started: the caller sees the stop reason.
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
    // The cache writes, or (when only their 5-minute / 1-hour split is repeated) the split's sum.
    if ('cache_creation_input_tokens' in u || 'cache_creation' in u) this.usage.cache_creation_input_tokens = trusted.cache_creation_input_tokens;
    if ('cache_creation' in u) this.usage.cache_creation_1h_input_tokens = trusted.cache_creation_1h_input_tokens;
    if ('server_tool_use' in u) {
      this.usage.web_search_requests = trusted.web_search_requests;
      this.usage.web_fetch_requests = trusted.web_fetch_requests;
    }
    // The other billed dimensions (metering/usage.ts): each as last reported (message_delta's are cumulative).
    if ('iterations' in u) this.usage.iterations = trusted.iterations;
    if ('speed' in u) this.usage.speed = trusted.speed;
    if ('inference_geo' in u) this.usage.inference_geo = trusted.inference_geo;
    if ('fallback_credit' in u) this.usage.fallback_credit_redeemed = trusted.fallback_credit_redeemed === true;
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

  /**
   * The message as accumulated so far (complete once the stream has ended): undefined before `message_start`. Blocks
   * never started (a gap in indexes) are left out.
   */
  message(): Anthropic.Message | undefined {
    if (!this.snapshot) return undefined;
    return { ...this.snapshot, content: this.snapshot.content.filter((b) => b !== undefined) };
  }
}
