import type { ModelPrice } from '@pydantic/genai-prices';
import { clock } from '../config/clock.ts';
import type { CustomPrice } from '../registry/model.ts';
import { activePrices, findCatalogModel, hasConditionalPrices } from './catalog.ts';
import type { PriceProvider } from './catalog-providers.ts';

/**
 * Exact pricing in integers. Price tables quote USD per million tokens; one USD per Mtok is one microdollar per
 * token, so rates are held as picodollars per token (USD/Mtok × 10^6, an integer for every published price) and a
 * request's cost is Σ tokens × rate, rounded UP once to whole microdollars. No floating-point sums, no $0 charges
 * for unknown models.
 */

export type { PriceProvider } from './catalog-providers.ts';

/** The token counts of one sampling step: the top-level usage, or one entry of Anthropic's `usage.iterations`. */
export interface TokenCounts {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  /** Of the cache writes, how many were 1-hour writes (`cache_creation.ephemeral_1h_input_tokens`; the rest are 5-minute writes). */
  cache_creation_1h_input_tokens?: number | null;
}

/**
 * One entry of Anthropic's `usage.iterations` (SDK types BetaMessageIterationUsage, BetaCompactionIterationUsage,
 * BetaAdvisorMessageIterationUsage, BetaFallbackMessageIterationUsage): `message` (a sampling step of a server-tool
 * loop), `compaction` (the summarising pass, on the request's model, NOT included in the top-level counts),
 * `advisor_message` (the advisor's sub-inference, on the advisor's `model`) and `fallback_message` (the fallback
 * model that served the answer, on its `model`).
 */
export interface IterationUsage extends TokenCounts {
  type: string;
  model?: string | null;
}

/** Usage as Anthropic reports it: input_tokens excludes cache reads and cache writes. */
export interface TokenUsage extends TokenCounts {
  /** Server-side web searches the provider ran (Anthropic's `usage.server_tool_use.web_search_requests`). */
  web_search_requests?: number | null;
  /** Server-side web fetches (`usage.server_tool_use.web_fetch_requests`). */
  web_fetch_requests?: number | null;
  /** When present and non-empty, the bill: each iteration at its own model's rates (see `charge`). */
  iterations?: IterationUsage[] | null;
  /** `usage.speed`: "fast" is billed at the model's fast-mode premium. */
  speed?: string | null;
  /** `usage.inference_geo`: "us" (US-only inference) is billed at US_ONLY_MULTIPLIER. */
  inference_geo?: string | null;
  /** `usage.fallback_credit.status.type === "redeemed"`: the request's cache writes are billed at the cache-read rate. */
  fallback_credit_redeemed?: boolean;
}

/** Picodollars per token for each kind of token. */
export interface Rates {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  cacheWrite1h: number;
}

/** A rational multiplier, kept exact: numerator / denominator. */
export interface Ratio {
  num: number;
  den: number;
}

export interface ModelPricing {
  /** The model name as asked for. */
  model: string;
  source: 'custom' | 'catalog';
  /** Rates that apply at a given total prompt size (some models price long prompts higher). */
  rates(totalInputTokens: number): Rates;
  /** Fees per server-tool use, in picodollars, where the table prices them (web search; web fetch: 0 on Anthropic). */
  fees: { webSearch?: number; webFetch?: number };
  /**
   * What the provider multiplies every token rate by (cache rates included, fees not): `fast` when the request runs
   * in fast mode (`speed: "fast"`), `usOnly` when it runs with US-only inference (`inference_geo: "us"`). 1 and
   * undefined where the provider bills no such premium.
   */
  premiums: { fast: number; usOnly?: Ratio };
  /**
   * The pricing of another model served by the same provider with the same custom prices (an advisor's or a fallback
   * model's iterations are billed at that model's rates), or undefined when it has no known price.
   */
  other(model: string): ModelPricing | undefined;
}

export interface Charge {
  microdollars: number;
  /**
   * tokens × rate for each kind, in picodollars (summed over the iterations, the fast-mode premium included): the
   * trace from tokens to the charge. The US-only premium, when it applies, multiplies the token part once more.
   */
  picodollars: { input: number; output: number; cacheRead: number; cacheWrite: number; fees: number };
  /** The rates of the request's own model at the request's size (the first iteration's, when iterations are billed). */
  rates: Rates;
  /** The US-only premium applied to the token part, when it did. */
  usOnly?: Ratio;
}

/**
 * US-only inference: "For Claude Opus 4.6 and newer models, specifying US-only inference via inference_geo incurs a
 * 1.1x multiplier on all token pricing categories, including input tokens, output tokens, cache writes, and cache
 * reads" (https://platform.claude.com/docs/en/about-claude/pricing, "Data residency pricing";
 * https://docs.aws.amazon.com/claude-platform/latest/userguide/data-residency.html: "US: ... A 1.1x pricing
 * multiplier applies"). The bundled catalog has no such figure.
 */
export const US_ONLY_MULTIPLIER: Ratio = { num: 11, den: 10 };

/**
 * Models that accept `inference_geo` ("supported on Claude Opus 4.6, Claude Sonnet 4.6, and later models"; older
 * ones answer 400): Opus/Sonnet 4.6 and later, every Claude generation from 5, and the Fable and Mythos families.
 */
const US_ONLY_MODELS = /^claude-(?:(?:opus|sonnet)-4-(?:[6-9]|\d{2})|[a-z]+-(?:[5-9]|\d{2})(?:-|$)|fable|mythos)/;

/**
 * Fast mode (`speed: "fast"`) multiplies every token rate of the model, cache rates included ("Fast mode pricing
 * applies across the full context window"; "prompt caching multipliers apply on top of fast mode pricing";
 * https://platform.claude.com/docs/en/build-with-claude/fast-mode, https://platform.claude.com/docs/en/about-claude/pricing):
 * Opus 4.6 at $30/$150 per MTok, 6× its $5/$25 (also https://openrouter.ai/anthropic/claude-opus-4.6-fast: "premium
 * 6x pricing"); Opus 4.7 6× (https://octavus.ai/docs/protocol/fast-mode); Opus 4.8 and the Opus 5 family 2×
 * ($10/$50 for Opus 5, https://openrouter.ai/anthropic/claude-opus-4.8-fast, https://vercel.com/ai-gateway/models/claude-opus-5-fast).
 * Sonnet and Haiku have no fast mode (a request asking for it runs, and is billed, at standard speed). The catalog
 * has no fast-mode prices. First match wins.
 */
const FAST_MODE_MULTIPLIERS: [RegExp, number][] = [
  [/^claude-opus-4-[67](?:-|$)/, 6],
  [/^claude-opus-4-8(?:-|$)/, 2],
  [/^claude-opus-5(?:-|$)/, 2],
  [/^claude-(?:sonnet|haiku)-/, 1],
  [/^claude-(?:opus|[a-z]+)-[0-3](?:-|$)/, 1],
];
/** A Claude model billed as fast whose premium is not published above is charged the dearest published premium. */
export const FAST_MODE_UNKNOWN_MULTIPLIER = 6;

function anthropicPremiums(model: string): ModelPricing['premiums'] {
  const name = model.toLowerCase();
  const fast = FAST_MODE_MULTIPLIERS.find(([pattern]) => pattern.test(name))?.[1] ?? FAST_MODE_UNKNOWN_MULTIPLIER;
  return US_ONLY_MODELS.test(name) ? { fast, usOnly: US_ONLY_MULTIPLIER } : { fast };
}

/**
 * Web fetch: "Web fetch usage has no additional charges beyond standard token costs"
 * (https://platform.claude.com/docs/en/agents-and-tools/tool-use/web-fetch-tool, "Usage and pricing"): its fee is 0,
 * the fetched content being billed as input tokens. The catalog has no web-fetch figure.
 */
export const ANTHROPIC_WEB_FETCH_FEE = 0;

const PICO_PER_USD_PER_MTOK = 1_000_000;

/** USD per Mtok → integer picodollars per token. Rounded to absorb binary float noise such as 0.3 × 10^6. */
export function toRate(usdPerMtok: number): number {
  return Math.round(usdPerMtok * PICO_PER_USD_PER_MTOK);
}

type TablePrice = number | { base: number; tiers?: { start: number; price: number }[] } | undefined;

function tablePriceAt(price: TablePrice, totalInput: number): number | undefined {
  if (price === undefined) return undefined;
  if (typeof price === 'number') return price;
  let chosen = price.base;
  for (const tier of price.tiers ?? []) if (totalInput > tier.start) chosen = tier.price;
  return chosen;
}

type Other = ModelPricing['other'];

/** Premiums and fees by provider: only Anthropic bills fast mode, US-only inference and (free) web fetches. */
function providerExtras(model: string, provider: PriceProvider): Pick<ModelPricing, 'premiums'> & { webFetch?: number } {
  return provider === 'anthropic' ? { premiums: anthropicPremiums(model), webFetch: ANTHROPIC_WEB_FETCH_FEE } : { premiums: { fast: 1 } };
}

function fromCustom(model: string, custom: CustomPrice, provider: PriceProvider, other: Other): ModelPricing {
  const input = toRate(custom.inputUsdPerMtok);
  const cacheWrite = custom.cacheWriteUsdPerMtok === undefined ? input : toRate(custom.cacheWriteUsdPerMtok);
  const fixed: Rates = {
    input,
    output: toRate(custom.outputUsdPerMtok),
    cacheRead: custom.cacheReadUsdPerMtok === undefined ? input : toRate(custom.cacheReadUsdPerMtok),
    cacheWrite,
    cacheWrite1h: cacheWrite,
  };
  const { premiums, webFetch } = providerExtras(model, provider);
  return { model, source: 'custom', rates: () => fixed, fees: webFetch === undefined ? {} : { webFetch }, premiums, other };
}

function fromTable(model: string, prices: ModelPrice, provider: PriceProvider, other: Other): ModelPricing | undefined {
  const table = prices as Record<string, TablePrice>;
  if (table.input_mtok === undefined || table.output_mtok === undefined) return undefined;
  // The table quotes server-tool fees in USD per thousand uses: × 10^9 is picodollars per use.
  const webSearch = typeof table.web_searches_kcount === 'number' ? Math.round(table.web_searches_kcount * 1e9) : undefined;
  const { premiums, webFetch } = providerExtras(model, provider);
  return {
    model,
    source: 'catalog',
    fees: { ...(webSearch === undefined ? {} : { webSearch }), ...(webFetch === undefined ? {} : { webFetch }) },
    premiums,
    other,
    rates(totalInput) {
      const input = tablePriceAt(table.input_mtok, totalInput)!;
      // A table without cache prices means the provider does not discount or surcharge them: charge as input.
      const cacheWrite = tablePriceAt(table.cache_write_mtok, totalInput) ?? input;
      return {
        input: toRate(input),
        output: toRate(tablePriceAt(table.output_mtok, totalInput)!),
        cacheRead: toRate(tablePriceAt(table.cache_read_mtok, totalInput) ?? input),
        cacheWrite: toRate(cacheWrite),
        cacheWrite1h: toRate(tablePriceAt(table.cache_write_1h_mtok, totalInput) ?? cacheWrite),
      };
    },
  };
}

/**
 * Catalog lookups by provider and requested name, kept for the instance's life: resolving a name scans the provider's
 * models (OpenRouter lists ~700) on every request otherwise. A model whose prices depend on the date or time of day
 * keeps only its catalog entry here, and its prices are chosen again at each call, as before. Names are the
 * callers' own (any name that starts like a catalog model resolves to it), so the map is emptied when it is full.
 */
type CatalogLookup = { pricing: ModelPricing | undefined } | { conditional: NonNullable<ReturnType<typeof findCatalogModel>> };
const catalogLookups = new Map<string, CatalogLookup>();
const MAX_CATALOG_LOOKUPS = 4096;

const catalogOther =
  (provider: PriceProvider): Other =>
  (name) =>
    fromCatalog(name, provider);

function fromCatalog(model: string, provider: PriceProvider): ModelPricing | undefined {
  const key = `${provider}\n${model}`;
  let lookup = catalogLookups.get(key);
  if (!lookup) {
    const found = findCatalogModel(provider, model);
    lookup =
      found && hasConditionalPrices(found)
        ? { conditional: found }
        : { pricing: found && fromTable(model, activePrices(found, new Date(clock.now())), provider, catalogOther(provider)) };
    if (catalogLookups.size >= MAX_CATALOG_LOOKUPS) catalogLookups.clear();
    catalogLookups.set(key, lookup);
  }
  return 'pricing' in lookup ? lookup.pricing : fromTable(model, activePrices(lookup.conditional, new Date(clock.now())), provider, catalogOther(provider));
}

/**
 * The project's custom price for the model wins; otherwise the bundled catalog for the provider serving it.
 * Undefined means the model cannot be priced and must be refused.
 */
export function priceFor(model: string, provider: PriceProvider, custom: Record<string, CustomPrice> = {}): ModelPricing | undefined {
  const own = Object.hasOwn(custom, model) ? custom[model] : undefined;
  if (own) return fromCustom(model, own, provider, (name) => priceFor(name, provider, custom));
  if (Object.keys(custom).length === 0) return fromCatalog(model, provider);
  const catalog = fromCatalog(model, provider);
  // Another model (an advisor's, a fallback's) is priced with the same custom prices first.
  return catalog && { ...catalog, other: (name) => priceFor(name, provider, custom) };
}

const count = (n: number | null | undefined) => (typeof n === 'number' && n > 0 ? Math.floor(n) : 0);

/**
 * The pricing an iteration is billed at: the request's own model for the top level, `compaction` entries and entries
 * without a model (or naming the request's model); otherwise the named model's (an advisor's or a fallback's own
 * rates). A named model without a known price is billed at the request's model's rates.
 */
function iterationPricing(pricing: ModelPricing, iteration: IterationUsage): ModelPricing {
  const model = iteration.model;
  if (iteration.type === 'compaction' || typeof model !== 'string' || model === '' || model === pricing.model) return pricing;
  return pricing.other(model) ?? pricing;
}

/**
 * The exact charge of a usage report. When `iterations` is present and non-empty it is the bill: every entry at its
 * own model's rates (a compaction entry's tokens are not in the top-level counts, an advisor's are billed at the
 * advisor's rates), each at the rate tier of its own prompt size; otherwise the top-level counts at the request's
 * model. Then: fast mode (`speed: "fast"`) multiplies each non-advisor iteration's token cost by its model's
 * premium (the advisor's sub-inference is not the request's fast-mode model); a redeemed fallback credit bills the
 * cache writes at the cache-read rate; server-tool fees are added per use (web search $10/1k, web fetch free); and
 * US-only inference (`inference_geo: "us"`) multiplies the token part by 1.1. Summed in integer picodollars
 * (BigInt: a large prompt at a premium passes 2^53) and rounded up once to whole microdollars; never below zero.
 */
export function charge(pricing: ModelPricing, usage: TokenUsage): Charge {
  const iterations = Array.isArray(usage.iterations) && usage.iterations.length > 0 ? usage.iterations : [{ ...usage, type: 'message', model: null }];
  const fast = usage.speed === 'fast';
  const credited = usage.fallback_credit_redeemed === true;
  const sums = { input: 0n, output: 0n, cacheRead: 0n, cacheWrite: 0n };
  let rates: Rates | undefined;
  for (const iteration of iterations) {
    const priced = iterationPricing(pricing, iteration);
    const input = count(iteration.input_tokens);
    const output = count(iteration.output_tokens);
    const cacheRead = count(iteration.cache_read_input_tokens);
    const cacheWriteAll = count(iteration.cache_creation_input_tokens);
    const cacheWrite1h = Math.min(count(iteration.cache_creation_1h_input_tokens), cacheWriteAll);
    const r = priced.rates(input + cacheRead + cacheWriteAll);
    rates ??= priced === pricing ? r : pricing.rates(input + cacheRead + cacheWriteAll);
    const premium = BigInt(fast && iteration.type !== 'advisor_message' ? priced.premiums.fast : 1);
    const write5m = credited ? r.cacheRead : r.cacheWrite;
    const write1h = credited ? r.cacheRead : r.cacheWrite1h;
    sums.input += BigInt(input) * BigInt(r.input) * premium;
    sums.output += BigInt(output) * BigInt(r.output) * premium;
    sums.cacheRead += BigInt(cacheRead) * BigInt(r.cacheRead) * premium;
    sums.cacheWrite += (BigInt(cacheWriteAll - cacheWrite1h) * BigInt(write5m) + BigInt(cacheWrite1h) * BigInt(write1h)) * premium;
  }
  const fees =
    BigInt(count(usage.web_search_requests)) * BigInt(pricing.fees.webSearch ?? 0) +
    BigInt(count(usage.web_fetch_requests)) * BigInt(pricing.fees.webFetch ?? 0);
  const usOnly = usage.inference_geo === 'us' ? pricing.premiums.usOnly : undefined;
  const { num, den } = usOnly ?? { num: 1, den: 1 };
  const tokensPico = sums.input + sums.output + sums.cacheRead + sums.cacheWrite;
  // ⌈(tokens × num / den + fees) / 10^6⌉, in integers.
  const scaled = tokensPico * BigInt(num) + fees * BigInt(den);
  const divisor = BigInt(den) * BigInt(PICO_PER_USD_PER_MTOK);
  const microdollars = scaled <= 0n ? 0 : Number((scaled + divisor - 1n) / divisor);
  return {
    microdollars,
    picodollars: {
      input: Number(sums.input),
      output: Number(sums.output),
      cacheRead: Number(sums.cacheRead),
      cacheWrite: Number(sums.cacheWrite),
      fees: Number(fees),
    },
    rates: rates ?? pricing.rates(0),
    ...(usOnly ? { usOnly } : {}),
  };
}

/** Microdollars → USD for display (never used for arithmetic). */
export function microsToUsd(microdollars: number): number {
  return microdollars / 1_000_000;
}
