import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { worstCaseMicros, worstCaseOf } from '../../lambdas/metering/reservation.ts';
import { trustedAnthropicUsage } from '../../lambdas/metering/usage.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import type { MessagesRequest } from '../../lambdas/providers/types.ts';

/**
 * The reservation is a true upper bound of the charge for every billed dimension (issue 31, "Done when" 3): for a
 * random request — model, `speed`, `inference_geo`, an advisor, server-side fallbacks, compaction, web search and
 * fetch, cache breakpoints — and a random usage report within that request's bounds (usage shapes as in
 * test/pricing/dimensions.test.ts, from the SDK's BetaUsage), charge ≤ worstCaseMicros(worstCaseOf(…), max_tokens).
 *
 * "Within bounds": the requested model reads at most the input bound and writes at most `max_tokens`; a fallback hop
 * reads the input again and writes at most its own `max_tokens`; each advisor use (≤ `max_uses`) reads at most the
 * input bound + `max_tokens` and writes at most its `max_tokens`; a compaction pass reads the input bound and writes
 * at most `max_tokens`; cache writes only where a `cache_control` breakpoint is; searches ≤ `max_uses`. (Re-reads of
 * server-tool results across sampling steps are not bounded by the body: estimate.ts says so.)
 */
const MODELS = ['claude-sonnet-4-6', 'claude-opus-4-6', 'claude-opus-4-8', 'claude-haiku-4-5'];

/** Splits `total` into input / cache read / cache write 5m / cache write 1h, writes only when allowed. */
const split = (total: number, writes: boolean) =>
  fc.tuple(fc.nat(total), fc.nat(total), fc.nat(total), fc.nat(total)).map(([a, b, c, d]) => {
    const sum = a + b + (writes ? c + d : 0) || 1;
    const part = (x: number) => Math.floor((x * total) / sum);
    return { input: part(a), read: part(b), w5m: writes ? part(c) : 0, w1h: writes ? part(d) : 0 };
  });

const scenario = fc
  .record({
    model: fc.constantFrom(...MODELS),
    advisorModel: fc.option(fc.constantFrom(...MODELS), { nil: undefined }),
    advisorUses: fc.integer({ min: 0, max: 3 }),
    advisorMax: fc.integer({ min: 1024, max: 4096 }),
    fallbackModels: fc.array(fc.constantFrom(...MODELS), { maxLength: 2 }),
    compaction: fc.boolean(),
    speed: fc.constantFrom(undefined, 'standard', 'fast'),
    geo: fc.constantFrom(undefined, 'us', 'global'),
    searches: fc.integer({ min: 0, max: 5 }),
    cacheControl: fc.boolean(),
    text: fc.string({ maxLength: 400 }),
    maxTokens: fc.integer({ min: 1, max: 4_000 }),
    credit: fc.boolean(),
  })
  .chain((s) => {
    const body = {
      model: s.model,
      max_tokens: s.maxTokens,
      messages: [{ role: 'user', content: [{ type: 'text', text: s.text, ...(s.cacheControl ? { cache_control: { type: 'ephemeral' } } : {}) }] }],
      tools: [
        { type: 'web_search_20250305', name: 'web_search', max_uses: s.searches },
        { type: 'web_fetch_20250910', name: 'web_fetch' },
        ...(s.advisorModel ? [{ type: 'advisor_20260301', name: 'advisor', model: s.advisorModel, max_uses: s.advisorUses, max_tokens: s.advisorMax }] : []),
      ],
      ...(s.fallbackModels.length ? { fallbacks: s.fallbackModels.map((model) => ({ model })) } : {}),
      ...(s.compaction ? { context_management: { edits: [{ type: 'compact_20260112' }] } } : {}),
      ...(s.speed ? { speed: s.speed } : {}),
      ...(s.geo ? { inference_geo: s.geo } : {}),
    } as unknown as MessagesRequest;
    const pricing = priceFor(s.model, 'anthropic')!;
    const worst = worstCaseOf(pricing, body, s.searches);
    const n = worst.inputTokens;
    const step = (type: string, model: string | null, input: number, output: number) =>
      fc.tuple(split(input, s.cacheControl || type === 'advisor_message'), fc.nat(output)).map(([p, out]) => ({
        type,
        model,
        input_tokens: p.input,
        output_tokens: out,
        cache_read_input_tokens: p.read,
        cache_creation_input_tokens: p.w5m + p.w1h,
        cache_creation: { ephemeral_5m_input_tokens: p.w5m, ephemeral_1h_input_tokens: p.w1h },
      }));
    const steps = [
      step('message', s.model, n, s.maxTokens),
      ...s.fallbackModels.map((m) => step('fallback_message', m, n, s.maxTokens)),
      ...(s.compaction ? [step('compaction', null, n, s.maxTokens)] : []),
      ...(s.advisorModel ? Array.from({ length: s.advisorUses }, () => step('advisor_message', s.advisorModel!, n + s.maxTokens, s.advisorMax)) : []),
    ];
    return fc.record({
      s: fc.constant(s),
      body: fc.constant(body),
      iterations: fc.tuple(...steps),
      searches: fc.nat(s.searches),
      fetches: fc.nat(20),
    });
  });

describe('the reservation bounds every billed dimension', () => {
  it('charge ≤ the worst case, for random requests and random usage within their bounds', () => {
    fc.assert(
      fc.property(scenario, ({ s, body, iterations, searches, fetches }) => {
        const pricing = priceFor(s.model, 'anthropic')!;
        const sum = (k: 'input_tokens' | 'output_tokens') => iterations.filter((i) => i.type !== 'compaction').reduce((a, i) => a + i[k], 0);
        const usage = trustedAnthropicUsage({
          input_tokens: sum('input_tokens'),
          output_tokens: sum('output_tokens'),
          server_tool_use: { web_search_requests: searches, web_fetch_requests: fetches },
          iterations,
          // Fast only when asked for; US-only unless another geo was named (the workspace default may be "us").
          speed: s.speed === 'fast' ? 'fast' : 'standard',
          inference_geo: s.geo === 'global' ? 'global' : 'us',
          ...(s.credit ? { fallback_credit: { status: { type: 'redeemed' } } } : {}),
        });
        expect(usage).toBeDefined();
        const charged = charge(pricing, usage!).microdollars;
        const bound = worstCaseMicros(worstCaseOf(pricing, body, s.searches), s.maxTokens);
        expect(charged).toBeLessThanOrEqual(bound);
      }),
      { numRuns: 300 },
    );
  });
});
