import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { env } from '../../lambdas/config/env.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { estimateInputTokens } from '../../bin/local/upstreams/script.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * Holds never outlive their requests and requests never outlive their holds: the local runtime enforces Lambda's
 * invocation limit (shortened here to 1.5 s), and the reservation expiry must exceed it.
 */
let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ invocationTimeoutMs: 1_500 });
});
afterAll(async () => {
  await gw?.stop();
});

describe('invocation limit', () => {
  it('a stream running past the limit is cut, the upstream stopped, and charged for what was produced', async () => {
    const budget = { ai: 10_000_000, compute: 0, window: 'day' as const };
    const token = await gw.token({ user: 'long-runner', budget });
    const body = { model: 'claude-sonnet-4-6', max_tokens: 400, stream: true, messages: [{ role: 'user', content: '[[words:200]] [[delay:50]]' }] };
    gw.upstreams.anthropic!.requests.length = 0;
    const started = Date.now();
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': token, 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
    const text = await res.text().catch(() => 'cut');
    const elapsed = Date.now() - started;
    // cut near the limit, long before the ~10 s the whole stream would take
    expect(elapsed).toBeLessThan(5_000);
    expect(text).not.toContain('message_stop');
    await expect.poll(() => gw.upstreams.anthropic!.requests[0]?.outcome, { timeout: 2_000 }).toBe('client_closed');
    let usage = await readUsage({ projectId: gw.projectId, userId: 'long-runner', budget });
    for (let i = 0; i < 40 && usage.openHolds > 0; i++) {
      await new Promise((r) => setTimeout(r, 50));
      usage = await readUsage({ projectId: gw.projectId, userId: 'long-runner', budget });
    }
    expect(usage.openHolds).toBe(0);
    const input = estimateInputTokens(body) * 3;
    expect(usage.used.ai).toBeGreaterThan(input + 5 * 15);
    expect(usage.used.ai).toBeLessThan(input + 200 * 15);
  });

  it('a reservation expiry that does not outlast the 15-minute limit is a configuration error', () => {
    const saved = process.env.RESERVATION_TTL_SECONDS;
    process.env.RESERVATION_TTL_SECONDS = '900';
    resetInstanceState();
    try {
      expect(() => env()).toThrow(/must exceed the 900 s invocation limit by at least a minute/);
    } finally {
      if (saved === undefined) delete process.env.RESERVATION_TTL_SECONDS;
      else process.env.RESERVATION_TTL_SECONDS = saved;
      resetInstanceState();
    }
  });
});
