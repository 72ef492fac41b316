import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ChatChunkMeter, trustedChatUsage } from '../../lambdas/metering/chat-chunks.ts';
import { chatWorstCaseOf } from '../../lambdas/metering/chat-call.ts';
import {
  ANTHROPIC_DEFINED_TOOL_TOKENS,
  estimateInput,
  OPENAI_IMAGE_MAX_TOKENS,
  PDF_DOCUMENT_ALLOWANCE_TOKENS,
  SYSTEM_PREAMBLE_TOKENS,
  UNSEEN_DOCUMENT_TOKENS,
} from '../../lambdas/metering/estimate.ts';
import { worstCaseMicros } from '../../lambdas/metering/reservation.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';

/**
 * The worst case of a Chat Completions body passed through (metering/chat-call.ts `chatWorstCaseOf`) and the usage it
 * is settled to (metering/chat-chunks.ts): OpenAI's content parts, tools and response format are bounded like
 * Anthropic's, the output once per choice, and the charge never above the reservation.
 */
const GPT = priceFor('gpt-4o', 'openai')!;
const base = { model: 'gpt-4o', messages: [{ role: 'user', content: 'hello' }] };
const tokens = (body: Record<string, unknown>) => estimateInput(body).tokens;

describe('chatWorstCaseOf', () => {
  it('the output limit once per choice, the prompt once, at gpt-4o’s rates (input $2.50, output $10 per Mtok)', () => {
    const one = chatWorstCaseOf(GPT, base, 1, false);
    const three = chatWorstCaseOf(GPT, base, 3, false);
    expect(one.outputRate).toBe(10_000_000);
    expect(three.outputRate).toBe(30_000_000);
    expect(three.inputPico).toBe(one.inputPico);
    // No cache_control: the input side at the input rate (OpenAI bills no cache writes; reads are cheaper).
    expect(one.inputPico).toBe(tokens(base) * 2_500_000);
    expect(worstCaseMicros(three, 100)).toBe(Math.ceil((tokens(base) * 2_500_000 + 100 * 30_000_000) / 1_000_000));
  });

  it('a web search adds its fee ($10 per 1,000) where the price has one', () => {
    expect(chatWorstCaseOf(GPT, base, 1, true).feesPico - chatWorstCaseOf(GPT, base, 1, false).feesPico).toBe(10_000_000_000); // 10,000 µ$ in picodollars
  });

  it('OpenAI’s parts: an image_url is an image, a file inline per byte, a file id unseen; a function tool is the client’s schema; response_format is read', () => {
    const withParts = (part: unknown) => tokens({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }, part] }] });
    const textOnly = tokens({ ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }] });
    const image = withParts({ type: 'image_url', image_url: { url: 'https://example.com/cat.png', detail: 'high' } });
    expect(image - textOnly).toBeGreaterThanOrEqual(OPENAI_IMAGE_MAX_TOKENS);
    const data = 'A'.repeat(4000);
    const pdf = withParts({ type: 'file', file: { filename: 'a.pdf', file_data: `data:application/pdf;base64,${data}` } });
    expect(pdf - textOnly).toBeGreaterThanOrEqual(3000 + PDF_DOCUMENT_ALLOWANCE_TOKENS);
    expect(withParts({ type: 'file', file: { file_id: 'file-abc' } }) - textOnly).toBeGreaterThanOrEqual(UNSEEN_DOCUMENT_TOKENS);

    const fn = { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } };
    const withTool = tokens({ ...base, tools: [fn] });
    expect(withTool - tokens(base)).toBeLessThan(ANTHROPIC_DEFINED_TOOL_TOKENS);
    expect(withTool - tokens(base)).toBeGreaterThan(SYSTEM_PREAMBLE_TOKENS);
    const format = { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object' } } };
    expect(tokens({ ...base, response_format: format }) - tokens(base)).toBeGreaterThan(SYSTEM_PREAMBLE_TOKENS);
  });

  it('a cache_control breakpoint (OpenRouter passes them to Anthropic models) prices the input at the dearest rate', () => {
    const claude = priceFor('anthropic/claude-sonnet-4.5', 'openrouter')!;
    const body = { ...base, messages: [{ role: 'user', content: [{ type: 'text', text: 'hello', cache_control: { type: 'ephemeral' } }] }] };
    const rates = claude.rates(tokens(body));
    expect(chatWorstCaseOf(claude, body, 1, false).inputPico).toBe(tokens(body) * Math.max(rates.input, rates.cacheWrite, rates.cacheWrite1h));
  });

  it('property: for any usage within the bounds (prompt ≤ the input bound, completion ≤ limit × n), the charge fits the reservation', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 8 }), fc.integer({ min: 1, max: 4000 }), fc.nat(), fc.nat(), fc.nat(), (n, limit, p, c, k) => {
        const worst = chatWorstCaseOf(GPT, base, n, false);
        const prompt = p % (worst.inputTokens + 1);
        const cached = k % (prompt + 1);
        const completion = c % (limit * n + 1);
        const usage = trustedChatUsage({ prompt_tokens: prompt, completion_tokens: completion, prompt_tokens_details: { cached_tokens: cached } })!;
        expect(charge(GPT, usage).microdollars).toBeLessThanOrEqual(worstCaseMicros(worst, limit));
      }),
    );
  });
});

describe('metering a Chat Completions answer', () => {
  it('usage: prompt_tokens less the cached ones are input, the cached ones cache reads; implausible figures are not believed', () => {
    expect(trustedChatUsage({ prompt_tokens: 120, completion_tokens: 30, prompt_tokens_details: { cached_tokens: 20 } })).toEqual({
      input_tokens: 100,
      cache_read_input_tokens: 20,
      cache_creation_input_tokens: 0,
      output_tokens: 30,
      web_search_requests: 0,
    });
    expect(trustedChatUsage({ prompt_tokens: 10, completion_tokens: 1, prompt_tokens_details: { cached_tokens: 11 } })).toBeUndefined();
    expect(trustedChatUsage({ prompt_tokens: -1, completion_tokens: 1 })).toBeUndefined();
    expect(trustedChatUsage({ prompt_tokens: 1e12, completion_tokens: 1 })).toBeUndefined();
  });

  it('a stream: the usage chunk, whatever the chunking; without it, the input bound and what was produced, never above the limit', () => {
    const sse = [
      'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}],"usage":null}\n\n',
      'data: {"choices":[{"index":0,"delta":{"content":"Hello"}}],"usage":null}\n\n',
      ': OPENROUTER PROCESSING\n\n',
      'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}\n\n',
      'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,"total_tokens":11}}\n\n',
      'data: [DONE]\n\n',
    ].join('');
    const bytes = new TextEncoder().encode(sse);
    for (const cut of [1, 7, 50, bytes.length]) {
      const meter = new ChatChunkMeter();
      for (let i = 0; i < bytes.length; i += cut) meter.push(bytes.slice(i, i + cut));
      meter.end();
      expect(meter.doneSeen).toBe(true);
      expect(meter.usageUntrusted).toBe(false);
      expect(meter.tokens(500, 100)).toMatchObject({ input_tokens: 9, output_tokens: 2, cache_read_input_tokens: 0 });
    }
    const cut = new ChatChunkMeter();
    cut.push(new TextEncoder().encode('data: {"choices":[{"index":0,"delta":{"content":"Hello there, how are you"}}]}\n\n'));
    expect(cut.inputReported).toBe(true);
    const partial = cut.tokens(500, 3);
    expect(partial.input_tokens).toBe(500);
    expect(partial.output_tokens).toBe(3);
  });
});
