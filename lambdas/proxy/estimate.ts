import type { ModelPricing } from '../pricing/prices.ts';
import type { MessagesRequest } from '../providers/types.ts';

/**
 * A generous input-token estimate for the reservation, made before the provider counts: text at one token per three
 * characters (real tokenisers average about four), an image at the 1,600 tokens a full-size image costs, a document
 * at one token per three bytes of its content.
 */
export const TOKENS_PER_IMAGE = 1_600;

export function estimateInputTokens(body: Pick<MessagesRequest, 'messages' | 'system' | 'tools'>): number {
  let binaryTokens = 0;
  const text = JSON.stringify({ system: body.system, messages: body.messages, tools: body.tools }, (key, value: unknown) => {
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      const block = value as { type?: string; source?: { type?: string; data?: string } };
      if (block.type === 'image') {
        binaryTokens += TOKENS_PER_IMAGE;
        return { type: 'image' };
      }
      if (block.type === 'document' && block.source?.type === 'base64' && typeof block.source.data === 'string') {
        binaryTokens += Math.ceil((block.source.data.length * 3) / 4 / 3);
        return { ...block, source: { type: 'base64' } };
      }
    }
    return value;
  });
  return Math.ceil(text.length / 3) + binaryTokens;
}

/** Worst case in microdollars: every input token at the dearest input rate (cache writes cost more) + max_tokens of output. */
export function worstCaseMicros(pricing: ModelPricing, body: MessagesRequest): number {
  const inputTokens = estimateInputTokens(body);
  const rates = pricing.rates(inputTokens);
  const dearestInput = Math.max(rates.input, rates.cacheWrite, rates.cacheWrite1h, rates.cacheRead);
  return Math.ceil((inputTokens * dearestInput + body.max_tokens * rates.output) / 1_000_000);
}
