import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import type { MessagesRequest } from '../../lambdas/providers/types.ts';
import { worstCaseMicros, worstCaseOf } from '../../lambdas/metering/reservation.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { scaled } from '../support/scale.ts';

/** Concurrent requests: 50 in `npm test`, 300 in the soak tier. */
const RACERS = scaled(50, 300);

let gw: TestGateway;

/** The ledger once every invocation under way has returned: an answer is delivered before its settlement is written. */
async function settledUsage(...args: Parameters<typeof readUsage>): ReturnType<typeof readUsage> {
  await gw.invocationsDone();
  return readUsage(...args);
}
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw?.stop());
let attempt = 0;

/**
 * The hard cap under contention (docs/contract.md, "Hard cap"): one user, many concurrent requests of every size
 * (Claude Code's usual 32k–64k max_tokens among them), a budget of about ten typical requests. Whatever interleaving
 * the ledger sees, the final spend is within the budget and equals Σ tokens × price of the answers delivered.
 */
describe('budget race', () => {
  it(`${RACERS} concurrent requests with mixed max_tokens (up to 64,000): used ≤ budget, ledger = Σ charges exactly, no hold`, async () => {
    const pricing = priceFor('claude-sonnet-4-6', 'anthropic')!;
    const sizes = [200, 1_000, 8_000, 32_000, 64_000];
    const paramsFor = (i: number) => ({
      model: 'claude-sonnet-4-6',
      max_tokens: sizes[i % sizes.length]!,
      messages: [{ role: 'user' as const, content: `Race ${i} [[words:${40 + (i % 7) * 30}]]` }],
    });
    const typical = worstCaseMicros(worstCaseOf(pricing, paramsFor(0) as MessagesRequest, 0), 1_000);
    const budget = typical * 10;
    const claim = { ai: budget, compute: 0, window: 'lifetime' as const };
    // A user of its own per attempt: a retry (npm test retries a failed test once) must not find the first attempt's spend.
    const user = `racer-${++attempt}`;
    const client = gw.client(await gw.token({ user, budget: claim }));

    const results = await Promise.allSettled(
      Array.from({ length: RACERS }, (_, i) =>
        // (the SDK insists on streaming for large max_tokens; the rest alternate between JSON and SSE)
        i % 2 === 0 || paramsFor(i).max_tokens >= 32_000 ? client.messages.stream(paramsFor(i)).finalMessage() : client.messages.create(paramsFor(i)),
      ),
    );
    const ok = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value as Anthropic.Message] : []));
    const refused = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as unknown);
    expect(ok.length).toBeGreaterThanOrEqual(5);
    expect(ok.length + refused.length).toBe(RACERS);
    for (const err of refused) expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    // some answers were clamped to fit what was left
    expect(ok.some((m) => m.stop_reason === 'max_tokens')).toBe(true);

    const usage = await settledUsage({ projectId: gw.projectId, userId: user, budget: claim });
    const expected = ok.reduce((sum, m) => sum + charge(pricing, m.usage).microdollars, 0);
    expect(usage.used.ai).toBe(expected);
    expect(usage.used.ai).toBeLessThanOrEqual(budget);
    expect(usage.overrun).toBe(0);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });
});
