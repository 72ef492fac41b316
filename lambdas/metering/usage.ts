import type { IterationUsage, TokenCounts, TokenUsage } from '../pricing/prices.ts';
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

/** At most this many `usage.iterations` entries are believed (a server-tool loop is bounded far below it). */
export const MAX_ITERATIONS = 1024;

type RawCounts = Record<string, unknown> & {
  cache_creation?: { ephemeral_1h_input_tokens?: unknown; ephemeral_5m_input_tokens?: unknown } | null;
};

const optionalCount = (value: unknown) => value === undefined || value === null || plausibleCount(value);
const orZero = (value: unknown) => (value as number | null | undefined) ?? 0;

/**
 * The counts of one sampling step (the top level or an iteration), or undefined when one is not believable. Cache
 * writes are `cache_creation_input_tokens`, split into 1-hour and 5-minute writes by `cache_creation`
 * (`ephemeral_1h_input_tokens` / `ephemeral_5m_input_tokens`); a report that gives only the split counts their sum.
 */
function trustedCounts(u: RawCounts): TokenCounts | undefined {
  if (!plausibleCount(u.input_tokens) || !plausibleCount(u.output_tokens)) return undefined;
  const split = u.cache_creation;
  if (split !== undefined && split !== null && typeof split !== 'object') return undefined;
  const write1h = split?.ephemeral_1h_input_tokens;
  const write5m = split?.ephemeral_5m_input_tokens;
  for (const value of [u.cache_read_input_tokens, u.cache_creation_input_tokens, write1h, write5m]) if (!optionalCount(value)) return undefined;
  const writes = u.cache_creation_input_tokens ?? (split ? orZero(write1h) + orZero(write5m) : 0);
  return {
    input_tokens: u.input_tokens,
    output_tokens: u.output_tokens,
    cache_read_input_tokens: orZero(u.cache_read_input_tokens),
    cache_creation_input_tokens: writes as number,
    cache_creation_1h_input_tokens: orZero(write1h),
  };
}

/** `usage.iterations`: undefined when absent, null when not believable (then the whole usage is not). */
function trustedIterations(raw: unknown): IterationUsage[] | undefined | null {
  if (raw === undefined || raw === null) return undefined;
  if (!Array.isArray(raw) || raw.length > MAX_ITERATIONS) return null;
  const out: IterationUsage[] = [];
  for (const entry of raw as unknown[]) {
    if (!entry || typeof entry !== 'object') return null;
    const e = entry as RawCounts & { type?: unknown; model?: unknown };
    const counts = trustedCounts(e);
    if (!counts || typeof e.type !== 'string' || (e.model !== undefined && e.model !== null && typeof e.model !== 'string')) return null;
    out.push({ ...counts, type: e.type, model: (e.model as string | null | undefined) ?? null });
  }
  return out;
}

/**
 * An Anthropic usage object as the gateway meters it (SDK type BetaUsage): undefined when it cannot be trusted.
 * Besides the counts: `server_tool_use` (web searches and fetches), `iterations` (each entry's counts judged by the
 * same rule), `speed`, `inference_geo`, and whether `fallback_credit` was redeemed. A figure of a kind the gateway
 * does not price passes through untouched (forwarding is verbatim) and is ignored here.
 */
export function trustedAnthropicUsage(raw: unknown): TokenUsage | undefined {
  if (!raw || typeof raw !== 'object') return undefined;
  const u = raw as RawCounts & {
    server_tool_use?: { web_search_requests?: unknown; web_fetch_requests?: unknown } | null;
    iterations?: unknown;
    speed?: unknown;
    inference_geo?: unknown;
    fallback_credit?: { status?: { type?: unknown } | null } | null;
  };
  const counts = trustedCounts(u);
  if (!counts) return undefined;
  const tools = u.server_tool_use;
  if (tools !== undefined && tools !== null && typeof tools !== 'object') return undefined;
  if (!optionalCount(tools?.web_search_requests) || !optionalCount(tools?.web_fetch_requests)) return undefined;
  const iterations = trustedIterations(u.iterations);
  if (iterations === null) return undefined;
  return {
    ...counts,
    web_search_requests: orZero(tools?.web_search_requests),
    web_fetch_requests: orZero(tools?.web_fetch_requests),
    ...(iterations ? { iterations } : {}),
    ...(typeof u.speed === 'string' ? { speed: u.speed } : {}),
    ...(typeof u.inference_geo === 'string' ? { inference_geo: u.inference_geo } : {}),
    ...(u.fallback_credit?.status?.type === 'redeemed' ? { fallback_credit_redeemed: true } : {}),
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
