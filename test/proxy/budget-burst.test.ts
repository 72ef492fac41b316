import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import type { MessagesRequest } from '../../lambdas/providers/types.ts';
import { worstCaseMicros, worstCaseOf } from '../../lambdas/metering/reservation.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { scaled } from '../support/scale.ts';

/**
 * Served until the budget is really spent (docs/contract.md, "Holds wait"): a burst of one user's requests, each
 * reserving far more than it costs, is answered until what is left cannot pay even a request's smallest form —
 * not refused while most of the budget is only held — and the cap still holds exactly.
 */
const MODEL = 'claude-sonnet-4-6';
const pricing = priceFor(MODEL, 'anthropic')!;
/**
 * Each answer takes about as long as a short real one (1 s in the soak tier), so holds last: the SDK's own retries
 * cannot outwait them (with BUDGET_HOLD_WAIT_MS=0, 22–31 of the 60 are answered).
 */
const LATENCY_MS = scaled(400, 1_000);
/** The mixed burst: 100 requests in `npm test`, 300 in the soak tier. */
const MIXED = scaled(100, 300);
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

/** A user of its own per attempt (npm test retries a failed test once), with the real SDK and its default retries. */
async function burstUser(ai: number) {
  const id = `burst-${++seq}`;
  const claim = { ai, compute: 0, window: 'day' as const };
  const client = gw.client(await gw.token({ user: id, budget: claim }), { maxRetries: 2 });
  const usage = async () => {
    // An answer is delivered before its settlement is written: read the ledger once every invocation has returned.
    await gw.invocationsDone();
    return readUsage({ projectId: gw.projectId, userId: id, budget: claim });
  };
  return { id, client, usage };
}

/** Sends every request at once; the answers delivered and their charges (x-gateway-cost-microdollars). */
async function burst(client: Anthropic, requests: Anthropic.MessageCreateParamsNonStreaming[]) {
  const results = await Promise.allSettled(requests.map((params) => client.messages.create(params).withResponse()));
  const answered = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
  const refused = results.flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []));
  for (const err of refused) expect(err).toBeInstanceOf(Anthropic.RateLimitError);
  const charged = answered.map(({ data, response }) => {
    const cost = Number(response.headers.get('x-gateway-cost-microdollars'));
    // Every charge is the answer's tokens × price, exactly.
    expect(cost).toBe(charge(pricing, data.usage).microdollars);
    return cost;
  });
  return { answered: answered.map((a) => a.data), refused, spent: charged.reduce((a, b) => a + b, 0) };
}

describe('a burst is served until the budget is really spent', () => {
  it('60 concurrent requests (max_tokens 40) against a budget that affords 50 at their actual cost: ≥ 45 answered, used ≤ budget, ledger exact, no hold', {
    timeout: 90_000,
  }, async () => {
    const params = (i: number) => ({
      model: MODEL,
      max_tokens: 40,
      messages: [{ role: 'user' as const, content: `Burst ${i} [[words:8]] [[latency:${LATENCY_MS}]]` }],
    });
    // What one such request actually costs, measured on a user of its own.
    const probe = await burstUser(10_000_000);
    const { spent: actual } = await burst(probe.client, [params(0)]);
    const worst = worstCaseMicros(worstCaseOf(pricing, params(0) as MessagesRequest, 0), 40);
    // Each reserves several times what it costs: without waiting for holds, only a few could run at a time.
    expect(worst).toBeGreaterThan(5 * actual);

    const budget = 50 * actual;
    const u = await burstUser(budget);
    const { answered, refused, spent } = await burst(
      u.client,
      Array.from({ length: 60 }, (_, i) => params(i)),
    );
    expect(answered.length).toBeGreaterThanOrEqual(45);
    expect(answered.length + refused.length).toBe(60);
    const usage = await u.usage();
    expect(usage.used.ai).toBe(spent);
    expect(usage.used.ai).toBeLessThanOrEqual(budget);
    expect(usage.overrun).toBe(0);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it(`${MIXED} concurrent requests with mixed max_tokens against a $0.10 budget: ≥ 90% of it spent, never above, ledger exact, no hold`, {
    timeout: 90_000,
  }, async () => {
    const sizes = [40, 100, 300, 1_000];
    // Each answer fills its max_tokens: 100 of them would cost about $0.55, over five times the budget.
    const requests = Array.from({ length: MIXED }, (_, i) => {
      const max_tokens = sizes[i % sizes.length]!;
      return { model: MODEL, max_tokens, messages: [{ role: 'user' as const, content: `Mixed ${i} [[words:${max_tokens}]] [[latency:${LATENCY_MS}]]` }] };
    });
    const budget = 100_000;
    const u = await burstUser(budget);
    const { answered, spent } = await burst(u.client, requests);
    const usage = await u.usage();
    expect(usage.used.ai).toBe(spent);
    expect(usage.used.ai).toBeLessThanOrEqual(budget);
    expect(usage.used.ai).toBeGreaterThanOrEqual(0.9 * budget);
    expect(answered.length).toBeGreaterThan(0);
    expect(usage.overrun).toBe(0);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });
});
