import { describe, expect, it } from 'vitest';
import { trustedAnthropicUsage } from '../../lambdas/metering/usage.ts';
import { charge, priceFor, US_ONLY_MULTIPLIER } from '../../lambdas/pricing/prices.ts';

/**
 * Every dimension of the provider's bill (DESIGN §14), priced exactly from the usage object as the provider sends it.
 * Each response shape below is the one a source documents; the source is named beside it. Shapes are parsed by the
 * gateway's own trust rule (metering/usage.ts), exactly as the proxy and the agent runtime meter them.
 *
 * Catalog rates used (@pydantic/genai-prices, USD per MTok): claude-sonnet-4-6 $3 in / $15 out / $0.30 cache read /
 * $3.75 5-min write / $6 1-h write; claude-opus-4-6 and claude-opus-4-8 $5 / $25; web search $10 per 1,000.
 */
const sonnet = priceFor('claude-sonnet-4-6', 'anthropic')!;
const opus46 = priceFor('claude-opus-4-6', 'anthropic')!;
const opus48 = priceFor('claude-opus-4-8', 'anthropic')!;

/** The charge of a raw usage object, through the trust rule. */
const bill = (pricing: typeof sonnet, raw: unknown) => charge(pricing, trustedAnthropicUsage(raw)!).microdollars;

describe('usage.iterations: each iteration at its own model, at its own prompt size', () => {
  it('compaction: the compaction entry is not in the top-level counts and is billed on top', () => {
    // Shape: https://platform.claude.com/docs/en/build-with-claude/compaction ("Compaction at a token threshold": top-level
    // usage 23,000 in / 1,000 out, iterations = a compaction entry of 180,000 / 3,500 and the message entry), as quoted
    // in https://velog.io/@jungseonw00/claude-compaction-usage-iterations; SDK type BetaCompactionIterationUsage
    // ("A `compaction` entry's tokens are not included in the top-level `usage` fields").
    const usage = {
      input_tokens: 23_000,
      output_tokens: 1_000,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      iterations: [
        { type: 'compaction', input_tokens: 180_000, output_tokens: 3_500, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, cache_creation: null },
        {
          type: 'message',
          model: null,
          input_tokens: 23_000,
          output_tokens: 1_000,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation: null,
        },
      ],
    };
    // 180,000 × $3 + 3,500 × $15 = 592,500 µ$; 23,000 × $3 + 1,000 × $15 = 84,000 µ$.
    expect(bill(sonnet, usage)).toBe(676_500);
    // The top-level counts alone would have charged 84,000 µ$.
    expect(bill(sonnet, { ...usage, iterations: null })).toBe(84_000);
  });

  it('advisor: the advisor_message entry at the advisor model’s rates, the executor’s entries at the executor’s', () => {
    // Shape: SDK @anthropic-ai/sdk 1.12 BetaAdvisorMessageIterationUsage {type: 'advisor_message', model, input_tokens,
    // output_tokens, cache_read_input_tokens, cache_creation_input_tokens, cache_creation}; tool and pairing from
    // https://platform.claude.com/docs/en/agents-and-tools/tool-use/advisor-tool (executor claude-sonnet-4-6, advisor
    // claude-opus-4-6; "the bulk of token generation happens at executor-model rates").
    const usage = {
      input_tokens: 1_713,
      output_tokens: 1_230,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      server_tool_use: { web_search_requests: 0, web_fetch_requests: 0 },
      iterations: [
        {
          type: 'message',
          model: 'claude-sonnet-4-6',
          input_tokens: 412,
          output_tokens: 89,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation: null,
        },
        {
          type: 'advisor_message',
          model: 'claude-opus-4-6',
          input_tokens: 823,
          output_tokens: 531,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation: null,
        },
        {
          type: 'message',
          model: 'claude-sonnet-4-6',
          input_tokens: 1_301,
          output_tokens: 1_141,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation: null,
        },
      ],
    };
    // Executor: 1,713 × $3 + 1,230 × $15 = 23,589 µ$. Advisor (Opus 4.6): 823 × $5 + 531 × $25 = 17,390 µ$.
    expect(bill(sonnet, usage)).toBe(40_979);
  });

  it('server-side fallback: the declined hop at the requested model, the fallback_message entry at the fallback’s', () => {
    // Shape: SDK BetaFallbackMessageIterationUsage ("A declined hop and the serving hop's earlier tool-loop iterations
    // produce `message` entries"; the serving entry is `fallback_message` with the fallback's canonical `model`);
    // https://platform.claude.com/docs/en/build-with-claude/refusals-and-fallback#server-side-fallback.
    const usage = {
      input_tokens: 10_000,
      output_tokens: 412,
      iterations: [
        {
          type: 'message',
          model: 'claude-opus-4-8',
          input_tokens: 5_000,
          output_tokens: 12,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation: null,
        },
        {
          type: 'fallback_message',
          model: 'claude-sonnet-4-6',
          input_tokens: 5_000,
          output_tokens: 400,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
          cache_creation: null,
        },
      ],
    };
    // 5,000 × $5 + 12 × $25 = 25,300 µ$; 5,000 × $3 + 400 × $15 = 21,000 µ$.
    expect(bill(opus48, usage)).toBe(46_300);
  });

  it('an iteration on a model with no known price is billed at the request model’s rates', () => {
    const usage = {
      input_tokens: 0,
      output_tokens: 0,
      iterations: [
        {
          type: 'advisor_message',
          model: 'claude-unknown-9',
          input_tokens: 1_000,
          output_tokens: 100,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
        },
      ],
    };
    expect(bill(sonnet, usage)).toBe(1_000 * 3 + 100 * 15);
  });

  it('a malformed iteration makes the whole usage untrusted (the gateway then charges its own count)', () => {
    expect(trustedAnthropicUsage({ input_tokens: 1, output_tokens: 1, iterations: [{ type: 'message', input_tokens: -1, output_tokens: 0 }] })).toBeUndefined();
    expect(trustedAnthropicUsage({ input_tokens: 1, output_tokens: 1, iterations: [{ input_tokens: 1, output_tokens: 0 }] })).toBeUndefined();
    expect(trustedAnthropicUsage({ input_tokens: 1, output_tokens: 1, iterations: 'many' })).toBeUndefined();
  });
});

describe('cache writes: 5 minutes and 1 hour, at the top level and per iteration', () => {
  it('the split of cache_creation prices each part at its rate, in each iteration', () => {
    // Shape: SDK BetaCacheCreation {ephemeral_5m_input_tokens, ephemeral_1h_input_tokens}, on BetaUsage and on every
    // iteration type; https://platform.claude.com/docs/en/build-with-claude/prompt-caching ("1-hour cache write
    // tokens are 2 times the base input tokens price"; 5-minute writes 1.25 times).
    const usage = {
      input_tokens: 10,
      output_tokens: 20,
      cache_creation_input_tokens: 3_000,
      cache_read_input_tokens: 0,
      cache_creation: { ephemeral_5m_input_tokens: 1_000, ephemeral_1h_input_tokens: 2_000 },
      iterations: [
        {
          type: 'message',
          model: null,
          input_tokens: 10,
          output_tokens: 0,
          cache_creation_input_tokens: 3_000,
          cache_read_input_tokens: 0,
          cache_creation: { ephemeral_5m_input_tokens: 1_000, ephemeral_1h_input_tokens: 2_000 },
        },
        {
          type: 'message',
          model: null,
          input_tokens: 0,
          output_tokens: 20,
          cache_creation_input_tokens: 500,
          cache_read_input_tokens: 3_010,
          cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 500 },
        },
      ],
    };
    // 1: 10 × $3 + 1,000 × $3.75 + 2,000 × $6 = 15,780 µ$. 2: 20 × $15 + 500 × $6 + 3,010 × $0.30 = 4,203 µ$.
    expect(bill(sonnet, usage)).toBe(19_983);
  });

  it('a report giving only the split is charged its sum', () => {
    expect(bill(sonnet, { input_tokens: 0, output_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 1_000, ephemeral_1h_input_tokens: 2_000 } })).toBe(
      15_750,
    );
  });
});

describe('server tools', () => {
  it('web fetches cost nothing beyond their tokens; web searches $10 per 1,000', () => {
    // Shape: SDK BetaServerToolUsage {web_search_requests, web_fetch_requests}. Pricing: "Web fetch usage has no
    // additional charges beyond standard token costs" (https://platform.claude.com/docs/en/agents-and-tools/tool-use/web-fetch-tool,
    // "Usage and pricing"); web search $10 per 1,000 searches (catalog web_searches_kcount).
    expect(sonnet.fees).toEqual({ webSearch: 10_000_000_000, webFetch: 0 });
    const usage = { input_tokens: 1_000, output_tokens: 100, server_tool_use: { web_search_requests: 2, web_fetch_requests: 3 } };
    // 1,000 × $3 + 100 × $15 + 2 × 10,000 µ$ = 24,500 µ$.
    expect(bill(sonnet, usage)).toBe(24_500);
    expect(trustedAnthropicUsage(usage)!.web_fetch_requests).toBe(3);
    expect(trustedAnthropicUsage({ ...usage, server_tool_use: { web_fetch_requests: -3 } })).toBeUndefined();
  });
});

describe('speed: "fast" and inference_geo: "us"', () => {
  it('fast mode multiplies every token rate by the model’s premium: Opus 4.6 6× ($30 / $150), Opus 4.8 2×', () => {
    // Shape: usage.speed "standard" | "fast" (SDK BetaUsage.speed; https://platform.claude.com/docs/en/build-with-claude/fast-mode).
    // Prices: Opus 4.6 fast "$30/150 MTok" (https://code.claude.com/docs/en/fast-mode, https://openrouter.ai/anthropic/claude-opus-4.6-fast
    // "premium 6x pricing"); Opus 4.8 fast $10/$50, "2x pricing" (https://openrouter.ai/anthropic/claude-opus-4.8-fast).
    const usage = { input_tokens: 1_000, output_tokens: 500, cache_read_input_tokens: 1_000, speed: 'fast' };
    // 1,000 × $30 + 500 × $150 + 1,000 × $3 (cache reads at 0.1 × $30) = 108,000 µ$.
    expect(bill(opus46, usage)).toBe(108_000);
    expect(bill(opus46, { ...usage, speed: 'standard' })).toBe(18_000);
    expect(bill(opus48, usage)).toBe(36_000);
    // Sonnet has no fast mode: a report of "fast" there costs the standard price.
    expect(bill(sonnet, { input_tokens: 1_000, output_tokens: 0, speed: 'fast' })).toBe(3_000);
  });

  it('the advisor’s sub-inference is not billed at the executor’s fast-mode premium', () => {
    const usage = {
      input_tokens: 100,
      output_tokens: 10,
      speed: 'fast',
      iterations: [
        { type: 'message', model: null, input_tokens: 100, output_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
        {
          type: 'advisor_message',
          model: 'claude-opus-4-8',
          input_tokens: 1_000,
          output_tokens: 100,
          cache_creation_input_tokens: 0,
          cache_read_input_tokens: 0,
        },
      ],
    };
    // Executor (Opus 4.6 fast): 100 × $30 + 10 × $150 = 4,500 µ$; advisor (Opus 4.8 standard): 1,000 × $5 + 100 × $25 = 7,500 µ$.
    expect(bill(opus46, usage)).toBe(12_000);
  });

  it('US-only inference multiplies every token category by 1.1, not the server-tool fees', () => {
    // Shape: usage.inference_geo (https://platform.claude.com/docs/en/build-with-claude/data-residency: {"usage":
    // {"input_tokens": 25, "output_tokens": 150, "inference_geo": "us"}}). Price: "a 1.1x multiplier on all token
    // pricing categories" (https://platform.claude.com/docs/en/about-claude/pricing, "Data residency pricing";
    // https://docs.aws.amazon.com/claude-platform/latest/userguide/data-residency.html).
    expect(US_ONLY_MULTIPLIER).toEqual({ num: 11, den: 10 });
    const usage = {
      input_tokens: 1_000,
      output_tokens: 100,
      cache_read_input_tokens: 10_000,
      inference_geo: 'us',
      server_tool_use: { web_search_requests: 1 },
    };
    // (1,000 × $3 + 100 × $15 + 10,000 × $0.30) × 1.1 = 8,250 µ$, + 10,000 µ$ for the search.
    expect(bill(sonnet, usage)).toBe(18_250);
    expect(bill(sonnet, { ...usage, inference_geo: 'global' })).toBe(17_500);
    // The docs' own example on Opus 4.6: 25 × $5 × 1.1 + 150 × $25 × 1.1 = 4,262.5 → 4,263 µ$ (rounded up once).
    expect(bill(opus46, { input_tokens: 25, output_tokens: 150, inference_geo: 'us' })).toBe(4_263);
  });

  it('fast and US-only stack: Opus 4.6 at 6 × 1.1', () => {
    // "Data residency multipliers apply on top of fast mode pricing" (https://platform.claude.com/docs/en/about-claude/pricing).
    expect(bill(opus46, { input_tokens: 1_000, output_tokens: 500, speed: 'fast', inference_geo: 'us' })).toBe(115_500);
  });

  it('models before Opus/Sonnet 4.6 have no US-only premium (they refuse inference_geo)', () => {
    expect(priceFor('claude-sonnet-4-5', 'anthropic')!.premiums.usOnly).toBeUndefined();
    expect(priceFor('claude-haiku-4-5', 'anthropic')!.premiums.usOnly).toBeUndefined();
    expect(sonnet.premiums).toEqual({ fast: 1, usOnly: { num: 11, den: 10 } });
    expect(priceFor('gpt-4o', 'openai')!.premiums).toEqual({ fast: 1 });
  });
});

describe('fallback_credit', () => {
  // Shape: SDK BetaUsage.fallback_credit = {status: {type: 'redeemed'} | {type: 'not_applied', reason}}, present on a
  // request that carried a `fallback_credit_token`. Meaning: the token "refunds the cache-miss cost when retrying this
  // refused request on the fallback model": "the retry's cache-creation tokens for the prefix that was warm on the
  // refused model [are] billed at the cache-read rate" (SDK MessageCreateParams.fallback_credit_token;
  // https://platform.claude.com/docs/en/build-with-claude/fallback-credit: "the retry is billed as though the
  // conversation had been on the new model all along"). It is a reprice, not an amount: never below zero.
  const retry = { input_tokens: 50, output_tokens: 100, cache_creation_input_tokens: 20_000, cache_read_input_tokens: 0 };

  it('redeemed: the cache writes are billed at the cache-read rate', () => {
    // 50 × $3 + 100 × $15 + 20,000 × $0.30 = 7,650 µ$ (instead of 20,000 × $3.75).
    expect(bill(sonnet, { ...retry, fallback_credit: { status: { type: 'redeemed' } } })).toBe(7_650);
  });

  it('not applied: the normal price', () => {
    expect(bill(sonnet, { ...retry, fallback_credit: { status: { type: 'not_applied', reason: 'expired' } } })).toBe(76_650);
    expect(bill(sonnet, retry)).toBe(76_650);
  });
});
