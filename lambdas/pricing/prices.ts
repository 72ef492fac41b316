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

/** Tokens as Anthropic reports them: input_tokens excludes cache reads and cache writes. */
export interface TokenUsage {
  input_tokens: number;
  output_tokens: number;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  /** Of the cache writes, how many were 1-hour writes (priced higher where the table says so). */
  cache_creation_1h_input_tokens?: number | null;
  /** Server-side web searches the provider ran (Anthropic's `usage.server_tool_use.web_search_requests`). */
  web_search_requests?: number | null;
}

/** Picodollars per token for each kind of token. */
export interface Rates {
  input: number;
  output: number;
  cacheRead: number;
  cacheWrite: number;
  cacheWrite1h: number;
}

export interface ModelPricing {
  /** The model name as asked for. */
  model: string;
  source: 'custom' | 'catalog';
  /** Rates that apply at a given total prompt size (some models price long prompts higher). */
  rates(totalInputTokens: number): Rates;
  /** Fees per server-tool use, in picodollars, where the table prices them (web search today). */
  fees: { webSearch?: number };
}

export interface Charge {
  microdollars: number;
  /** tokens × rate for each kind, in picodollars: the trace from tokens to the charge. */
  picodollars: { input: number; output: number; cacheRead: number; cacheWrite: number; fees: number };
  rates: Rates;
}

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

function fromCustom(model: string, custom: CustomPrice): ModelPricing {
  const input = toRate(custom.inputUsdPerMtok);
  const cacheWrite = custom.cacheWriteUsdPerMtok === undefined ? input : toRate(custom.cacheWriteUsdPerMtok);
  const fixed: Rates = {
    input,
    output: toRate(custom.outputUsdPerMtok),
    cacheRead: custom.cacheReadUsdPerMtok === undefined ? input : toRate(custom.cacheReadUsdPerMtok),
    cacheWrite,
    cacheWrite1h: cacheWrite,
  };
  return { model, source: 'custom', rates: () => fixed, fees: {} };
}

function fromTable(model: string, prices: ModelPrice): ModelPricing | undefined {
  const table = prices as Record<string, TablePrice>;
  if (table.input_mtok === undefined || table.output_mtok === undefined) return undefined;
  // The table quotes server-tool fees in USD per thousand uses: × 10^9 is picodollars per use.
  const webSearch = typeof table.web_searches_kcount === 'number' ? Math.round(table.web_searches_kcount * 1e9) : undefined;
  return {
    model,
    source: 'catalog',
    fees: webSearch === undefined ? {} : { webSearch },
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

function fromCatalog(model: string, provider: PriceProvider): ModelPricing | undefined {
  const key = `${provider}\n${model}`;
  let lookup = catalogLookups.get(key);
  if (!lookup) {
    const found = findCatalogModel(provider, model);
    lookup = found && hasConditionalPrices(found) ? { conditional: found } : { pricing: found && fromTable(model, activePrices(found, new Date(clock.now()))) };
    if (catalogLookups.size >= MAX_CATALOG_LOOKUPS) catalogLookups.clear();
    catalogLookups.set(key, lookup);
  }
  return 'pricing' in lookup ? lookup.pricing : fromTable(model, activePrices(lookup.conditional, new Date(clock.now())));
}

/**
 * The project's custom price for the model wins; otherwise the bundled catalog for the provider serving it.
 * Undefined means the model cannot be priced and must be refused.
 */
export function priceFor(model: string, provider: PriceProvider, custom: Record<string, CustomPrice> = {}): ModelPricing | undefined {
  const own = custom[model];
  if (own) return fromCustom(model, own);
  return fromCatalog(model, provider);
}

const count = (n: number | null | undefined) => (typeof n === 'number' && n > 0 ? Math.floor(n) : 0);

export function charge(pricing: ModelPricing, usage: TokenUsage): Charge {
  const input = count(usage.input_tokens);
  const output = count(usage.output_tokens);
  const cacheRead = count(usage.cache_read_input_tokens);
  const cacheWriteAll = count(usage.cache_creation_input_tokens);
  const cacheWrite1h = Math.min(count(usage.cache_creation_1h_input_tokens), cacheWriteAll);
  const rates = pricing.rates(input + cacheRead + cacheWriteAll);
  const picodollars = {
    input: input * rates.input,
    output: output * rates.output,
    cacheRead: cacheRead * rates.cacheRead,
    cacheWrite: (cacheWriteAll - cacheWrite1h) * rates.cacheWrite + cacheWrite1h * rates.cacheWrite1h,
    fees: count(usage.web_search_requests) * (pricing.fees.webSearch ?? 0),
  };
  const total = picodollars.input + picodollars.output + picodollars.cacheRead + picodollars.cacheWrite + picodollars.fees;
  return { microdollars: Math.ceil(total / PICO_PER_USD_PER_MTOK), picodollars, rates };
}

/** Microdollars → USD for display (never used for arithmetic). */
export function microsToUsd(microdollars: number): number {
  return microdollars / 1_000_000;
}
