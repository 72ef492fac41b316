import type { TokenUsage } from '../pricing/prices.ts';
import { estimateProducedTokens } from '../providers/token-estimates.ts';

/**
 * Usage figures from an upstream are never trusted blindly (docs/contract.md, "Never trust a number"): each count
 * must be a non-negative safe integer no larger than MAX_PLAUSIBLE_TOKENS. No request can carry more — a 6 MB body
 * is at most about 6.3 million input tokens, and `max_tokens` is at most 1,000,000 — so anything above is a broken
 * or hostile upstream, not a bill. A usage object that is missing, or has an implausible figure, is replaced by the
 * gateway's own count of what it passed (its input bound and the produced-token estimate of
 * providers/token-estimates.ts, the one a translated stream announces).
 */
export const MAX_PLAUSIBLE_TOKENS = 10_000_000;

export function plausibleCount(n: unknown): n is number {
  return typeof n === 'number' && Number.isSafeInteger(n) && n >= 0 && n <= MAX_PLAUSIBLE_TOKENS;
}

/** An Anthropic usage object as the gateway meters it: undefined when it cannot be trusted. */
export function trustedAnthropicUsage(raw: unknown): TokenUsage | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const u = raw as Record<string, unknown> & {
    cache_creation?: { ephemeral_1h_input_tokens?: unknown } | null;
    server_tool_use?: { web_search_requests?: unknown } | null;
  };
  if (!plausibleCount(u.input_tokens) || !plausibleCount(u.output_tokens)) return undefined;
  const optional = {
    cache_read_input_tokens: u.cache_read_input_tokens,
    cache_creation_input_tokens: u.cache_creation_input_tokens,
    cache_creation_1h_input_tokens: u.cache_creation?.ephemeral_1h_input_tokens,
    web_search_requests: u.server_tool_use?.web_search_requests,
  };
  for (const value of Object.values(optional)) if (value !== undefined && value !== null && !plausibleCount(value)) return undefined;
  return {
    input_tokens: u.input_tokens,
    output_tokens: u.output_tokens,
    cache_read_input_tokens: (optional.cache_read_input_tokens as number | null | undefined) ?? 0,
    cache_creation_input_tokens: (optional.cache_creation_input_tokens as number | null | undefined) ?? 0,
    cache_creation_1h_input_tokens: (optional.cache_creation_1h_input_tokens as number | null | undefined) ?? 0,
    web_search_requests: (optional.web_search_requests as number | null | undefined) ?? 0,
  };
}

/** What a complete (non-streamed) Anthropic message produced, for when its usage cannot be trusted. */
export function producedByMessage(content: unknown): number {
  if (!Array.isArray(content)) return 0;
  let characters = 0;
  for (const block of content as Record<string, unknown>[]) {
    if (typeof block?.text === 'string') characters += block.text.length;
    if (typeof block?.thinking === 'string') characters += block.thinking.length;
    if (block?.input !== undefined) characters += JSON.stringify(block.input)?.length ?? 0;
  }
  return estimateProducedTokens(content.length, characters);
}
