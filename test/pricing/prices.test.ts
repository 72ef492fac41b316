import { describe, expect, it } from 'vitest';
import { charge, microsToUsd, priceFor, toRate } from '../../lambdas/pricing/prices.ts';

describe('toRate: USD per Mtok → integer picodollars per token', () => {
  it('is exact for published prices, including ones that are inexact in binary', () => {
    expect(toRate(3)).toBe(3_000_000);
    expect(toRate(15)).toBe(15_000_000);
    expect(toRate(0.3)).toBe(300_000); // 0.3 × 10^6 = 300000.00000000006 in floating point
    expect(toRate(3.75)).toBe(3_750_000);
    expect(toRate(0.075)).toBe(75_000);
    expect(toRate(0.1)).toBe(100_000);
    expect(toRate(0)).toBe(0);
    for (const r of [toRate(0.3), toRate(0.075), toRate(1.1), toRate(2.5)]) expect(Number.isInteger(r)).toBe(true);
  });
});

describe('catalog prices', () => {
  it('claude-sonnet-4-5: rates from the bundled table', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic');
    expect(p).toBeDefined();
    expect(p!.source).toBe('catalog');
    expect(p!.model).toBe('claude-sonnet-4-5');
    expect(p!.rates(1000)).toEqual({ input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000, cacheWrite1h: 6_000_000 });
  });

  it('claude-sonnet-4-5: input, output, cache read, 5-minute and 1-hour cache writes are priced separately', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic')!;
    const c = charge(p, {
      input_tokens: 1000,
      output_tokens: 500,
      cache_read_input_tokens: 2000,
      cache_creation_input_tokens: 4000,
      cache_creation_1h_input_tokens: 1000,
    });
    expect(c.picodollars).toEqual({
      input: 1000 * 3_000_000,
      output: 500 * 15_000_000,
      cacheRead: 2000 * 300_000,
      cacheWrite: 3000 * 3_750_000 + 1000 * 6_000_000,
      fees: 0,
    });
    // $0.003 + $0.0075 + $0.0006 + $0.01125 + $0.006
    expect(c.microdollars).toBe(28_350);
    expect(microsToUsd(c.microdollars)).toBeCloseTo(0.02835, 10);
  });

  it('1-hour writes never exceed the total cache writes', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic')!;
    const c = charge(p, { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 100, cache_creation_1h_input_tokens: 999 });
    expect(c.picodollars.cacheWrite).toBe(100 * 6_000_000);
    expect(c.microdollars).toBe(600);
  });

  it('dated model ids resolve to the same prices', () => {
    const p = priceFor('claude-sonnet-4-5-20250929', 'anthropic')!;
    expect(charge(p, { input_tokens: 10, output_tokens: 20 }).microdollars).toBe(10 * 3 + 20 * 15);
  });

  it('an OpenAI model (gpt-4o): cache reads discounted, no cache-write price → charged as input', () => {
    const p = priceFor('gpt-4o', 'openai')!;
    expect(p.source).toBe('catalog');
    expect(p.rates(0)).toEqual({ input: 2_500_000, output: 10_000_000, cacheRead: 1_250_000, cacheWrite: 2_500_000, cacheWrite1h: 2_500_000 });
    const c = charge(p, { input_tokens: 1000, output_tokens: 100, cache_read_input_tokens: 400 });
    expect(c.picodollars).toEqual({ input: 2_500_000_000, output: 1_000_000_000, cacheRead: 500_000_000, cacheWrite: 0, fees: 0 });
    expect(c.microdollars).toBe(4_000);
  });

  it('gpt-4o-mini: fractional microdollar prices stay exact', () => {
    const p = priceFor('gpt-4o-mini', 'openai')!;
    // 1000 × $0.15/Mtok = 150 µ$, 1000 × $0.60/Mtok = 600 µ$, 1000 × $0.075/Mtok = 75 µ$
    expect(charge(p, { input_tokens: 1000, output_tokens: 1000, cache_read_input_tokens: 1000 }).microdollars).toBe(825);
    // 1 input token = 0.15 µ$ → rounded up to 1
    expect(charge(p, { input_tokens: 1, output_tokens: 0 }).microdollars).toBe(1);
  });

  it('prompts above 200k input tokens use the higher tier (counting cache reads and writes)', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic')!;
    expect(p.rates(200_000)).toEqual({ input: 3_000_000, output: 15_000_000, cacheRead: 300_000, cacheWrite: 3_750_000, cacheWrite1h: 6_000_000 });
    expect(p.rates(200_001)).toEqual({ input: 6_000_000, output: 22_500_000, cacheRead: 600_000, cacheWrite: 7_500_000, cacheWrite1h: 12_000_000 });
    // exactly 200k in total: base prices
    expect(charge(p, { input_tokens: 150_000, cache_read_input_tokens: 50_000, output_tokens: 1000 }).microdollars).toBe(
      150_000 * 3 + 50_000 * 0.3 + 1000 * 15,
    );
    // one more token, carried by the cache read: every kind moves to the tier price
    expect(charge(p, { input_tokens: 150_000, cache_read_input_tokens: 50_001, output_tokens: 1000 }).microdollars).toBe(
      952_501, // 900 000 + 30 000.6 + 22 500 = 952 500.6 → rounded up
    );
    // cache writes count towards the tier as well
    expect(charge(p, { input_tokens: 100_000, cache_creation_input_tokens: 100_001, output_tokens: 0 }).rates.input).toBe(6_000_000);
  });

  it('an unknown model has no price (never $0)', () => {
    expect(priceFor('no-such-model-xyz', 'anthropic')).toBeUndefined();
    expect(priceFor('gpt-nope-9000', 'openai')).toBeUndefined();
    expect(priceFor('vendor/unknown-model-zzz', 'openrouter')).toBeUndefined();
    expect(priceFor('no-such-model-xyz', 'anthropic', { 'other-model': { inputUsdPerMtok: 1, outputUsdPerMtok: 1 } })).toBeUndefined();
  });
});

describe('custom pricing', () => {
  it('wins over the catalog for the same model', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic', { 'claude-sonnet-4-5': { inputUsdPerMtok: 1, outputUsdPerMtok: 2 } })!;
    expect(p.source).toBe('custom');
    // cache prices not given → charged as input
    expect(p.rates(0)).toEqual({ input: 1_000_000, output: 2_000_000, cacheRead: 1_000_000, cacheWrite: 1_000_000, cacheWrite1h: 1_000_000 });
    expect(charge(p, { input_tokens: 100, output_tokens: 100, cache_read_input_tokens: 10, cache_creation_input_tokens: 10 }).microdollars).toBe(320);
    // no tiers on a custom price
    expect(p.rates(1_000_000).input).toBe(1_000_000);
  });

  it('uses the given cache prices, and 1-hour writes at the cache-write price', () => {
    const p = priceFor('my-model', 'openrouter', {
      'my-model': { inputUsdPerMtok: 2, outputUsdPerMtok: 8, cacheReadUsdPerMtok: 0.5, cacheWriteUsdPerMtok: 2.5 },
    })!;
    expect(p.rates(0)).toEqual({ input: 2_000_000, output: 8_000_000, cacheRead: 500_000, cacheWrite: 2_500_000, cacheWrite1h: 2_500_000 });
    const c = charge(p, {
      input_tokens: 1000,
      output_tokens: 1000,
      cache_read_input_tokens: 1000,
      cache_creation_input_tokens: 1000,
      cache_creation_1h_input_tokens: 500,
    });
    expect(c.microdollars).toBe(2000 + 8000 + 500 + 2500);
  });

  it('a custom price for another model leaves the catalog in place', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic', { 'gpt-4o': { inputUsdPerMtok: 1, outputUsdPerMtok: 1 } })!;
    expect(p.source).toBe('catalog');
    expect(p.rates(0).input).toBe(3_000_000);
  });

  it('a free custom price charges 0 (explicitly priced, unlike an unknown model)', () => {
    const p = priceFor('free-model', 'openrouter', { 'free-model': { inputUsdPerMtok: 0, outputUsdPerMtok: 0 } })!;
    expect(charge(p, { input_tokens: 1_000_000, output_tokens: 1_000_000 }).microdollars).toBe(0);
  });
});

describe('rounding: integer picodollars, rounded up once to whole microdollars', () => {
  const custom = (input: number, output = input) => priceFor('m', 'openrouter', { m: { inputUsdPerMtok: input, outputUsdPerMtok: output } })!;

  it('0.1 µ$ is charged 1 µ$', () => {
    const c = charge(custom(0.1), { input_tokens: 1, output_tokens: 0 });
    expect(c.picodollars.input).toBe(100_000);
    expect(c.microdollars).toBe(1);
  });

  it('10 tokens at $0.30/Mtok are exactly 3 µ$, not rounded up to 4', () => {
    expect(charge(custom(0.3), { input_tokens: 10, output_tokens: 0 }).microdollars).toBe(3);
    expect(charge(custom(0.3), { input_tokens: 0, output_tokens: 10 }).microdollars).toBe(3);
  });

  it('sums that are inexact in binary floating point stay exact', () => {
    // 0.1 + 0.2 µ$ per token, 10 tokens each: exactly 3 µ$
    const p = custom(0.1, 0.2);
    expect(charge(p, { input_tokens: 10, output_tokens: 10 }).microdollars).toBe(3);
    expect(charge(p, { input_tokens: 10, output_tokens: 10 }).picodollars).toEqual({
      input: 1_000_000,
      output: 2_000_000,
      cacheRead: 0,
      cacheWrite: 0,
      fees: 0,
    });
  });

  it('fractions of several kinds are summed before the single round-up', () => {
    // 0.1 + 0.1 + 0.1 µ$ → 0.3 µ$ → 1 µ$ (rounding each part would give 3)
    const p = priceFor('m', 'openrouter', { m: { inputUsdPerMtok: 0.1, outputUsdPerMtok: 0.1, cacheReadUsdPerMtok: 0.1 } })!;
    expect(charge(p, { input_tokens: 1, output_tokens: 1, cache_read_input_tokens: 1 }).microdollars).toBe(1);
    // 1.000001 µ$ → 2 µ$
    const q = priceFor('m', 'openrouter', { m: { inputUsdPerMtok: 1, outputUsdPerMtok: 0.000001 } })!;
    expect(charge(q, { input_tokens: 1, output_tokens: 1 }).microdollars).toBe(2);
  });

  it('no tokens cost nothing; null, negative and fractional counts are not charged as more', () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic')!;
    expect(charge(p, { input_tokens: 0, output_tokens: 0 }).microdollars).toBe(0);
    expect(charge(p, { input_tokens: 0, output_tokens: 0, cache_read_input_tokens: null, cache_creation_input_tokens: null }).microdollars).toBe(0);
    expect(charge(p, { input_tokens: -5, output_tokens: 0 }).microdollars).toBe(0);
    expect(charge(p, { input_tokens: 2.9, output_tokens: 0 }).microdollars).toBe(6);
  });

  it('large counts stay exact integers', () => {
    const p = custom(3, 15);
    const c = charge(p, { input_tokens: 123_456_789, output_tokens: 98_765_432 });
    expect(c.microdollars).toBe(123_456_789 * 3 + 98_765_432 * 15);
    expect(Number.isSafeInteger(c.picodollars.input + c.picodollars.output)).toBe(true);
  });
});

describe('server-tool fees', () => {
  it("web searches are charged at the table's price per thousand (claude-sonnet-4-5: $10 per 1,000 = 10,000 µ$ each)", () => {
    const p = priceFor('claude-sonnet-4-5', 'anthropic')!;
    expect(p.fees.webSearch).toBe(10_000_000_000);
    const c = charge(p, { input_tokens: 100, output_tokens: 10, web_search_requests: 25 });
    expect(c.picodollars.fees).toBe(25 * 10_000_000_000);
    expect(c.microdollars).toBe(100 * 3 + 10 * 15 + 25 * 10_000);
  });

  it('custom prices carry no fees, and a search without a price is not charged', () => {
    const p = priceFor('house', 'openrouter', { house: { inputUsdPerMtok: 1, outputUsdPerMtok: 2 } })!;
    expect(p.fees).toEqual({});
    expect(charge(p, { input_tokens: 1_000_000, output_tokens: 0, web_search_requests: 3 }).microdollars).toBe(1_000_000);
  });
});
