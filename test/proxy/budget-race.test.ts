import Anthropic, { APIError } from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { worstCaseMicros } from '../../lambdas/proxy/estimate.ts';
import type { MessagesRequest } from '../../lambdas/providers/types.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(() => gw?.stop());

describe('budget race (DESIGN §3)', () => {
  it('100 concurrent streams against a budget for ~10: overshoot ≤ one worst case, charges = tokens × price exactly', async () => {
    const params = { model: 'claude-sonnet-4-6', max_tokens: 200, messages: [{ role: 'user' as const, content: 'Race [[words:40]]' }] };
    const pricing = priceFor('claude-sonnet-4-6', 'anthropic')!;
    const worst = worstCaseMicros(pricing, params as MessagesRequest);
    const budget = worst * 10;
    const claim = { ai: budget, compute: 0, window: 'lifetime' as const };
    const client = gw.client(await gw.token({ user: 'racer', budget: claim }));

    const results = await Promise.allSettled(Array.from({ length: 100 }, () => client.messages.stream(params).finalMessage()));
    const ok = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value as Anthropic.Message] : []));
    const refused = results.filter((r) => r.status === 'rejected').map((r) => (r as PromiseRejectedResult).reason as unknown);
    expect(ok.length).toBeGreaterThanOrEqual(10);
    expect(ok.length + refused.length).toBe(100);
    for (const err of refused) expect(err).toBeInstanceOf(Anthropic.RateLimitError);

    const usage = await readUsage({ projectId: gw.projectId, userId: 'racer', budget: claim });
    const expected = ok.reduce((sum, m) => sum + charge(pricing, m.usage).microdollars, 0);
    expect(usage.used.ai).toBe(expected);
    expect(usage.used.ai).toBeLessThanOrEqual(budget + worst);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });
});
