import type { ModelPricing } from '../pricing/prices.ts';
import type { MessagesRequest } from '../providers/types.ts';

/**
 * A generous input-token estimate for the reservation, made before the provider counts: the request's `system`,
 * `messages` and `tools` measured as the characters of their JSON text at one token per three characters (real
 * tokenisers average about four), an image at the 1,600 tokens a full-size image costs, a base64 document at one
 * token per three bytes of its content.
 *
 * The walk uses an explicit stack, never recursion: it runs on client data, and although the body's depth is bounded
 * (lambdas/http/limits.ts), nothing here may depend on that to stay within the call stack.
 */
export const TOKENS_PER_IMAGE = 1_600;

export function estimateInputTokens(body: Pick<MessagesRequest, 'messages' | 'system' | 'tools'>): number {
  let chars = 0;
  let binaryTokens = 0;
  const stack: unknown[] = [body.system, body.messages, body.tools];
  while (stack.length > 0) {
    const value = stack.pop();
    if (value === undefined || value === null) {
      chars += 4;
    } else if (typeof value === 'string') {
      chars += JSON.stringify(value).length;
    } else if (typeof value !== 'object') {
      chars += String(value).length;
    } else if (Array.isArray(value)) {
      chars += 1 + value.length;
      for (const item of value) stack.push(item);
    } else {
      const block = value as { type?: unknown; source?: { type?: unknown; data?: unknown } };
      if (block.type === 'image') {
        binaryTokens += TOKENS_PER_IMAGE;
        chars += 16;
        continue;
      }
      const entries = Object.entries(value);
      chars += 1 + entries.length;
      for (const [key, item] of entries) {
        chars += key.length + 3;
        if (key === 'source' && block.type === 'document' && block.source?.type === 'base64' && typeof block.source.data === 'string') {
          binaryTokens += Math.ceil((block.source.data.length * 3) / 4 / 3);
          chars += 17;
        } else stack.push(item);
      }
    }
  }
  return Math.ceil(chars / 3) + binaryTokens;
}

/** Worst case in microdollars: every input token at the dearest input rate (cache writes cost more) + max_tokens of output. */
export function worstCaseMicros(pricing: ModelPricing, body: MessagesRequest): number {
  const inputTokens = estimateInputTokens(body);
  const rates = pricing.rates(inputTokens);
  const dearestInput = Math.max(rates.input, rates.cacheWrite, rates.cacheWrite1h, rates.cacheRead);
  return Math.ceil((inputTokens * dearestInput + body.max_tokens * rates.output) / 1_000_000);
}
