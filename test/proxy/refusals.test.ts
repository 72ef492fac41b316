import { randomUUID } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { reserve, settle } from '../../lambdas/budgets/ledger.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * Budget refusals tell clients whether to retry, and the real SDK (default retry policy) obeys: one HTTP call for a
 * spent budget instead of three (Claude Code used to send eleven over three minutes).
 */
let gw: TestGateway;
/** How long a call waits for holds in flight (BUDGET_HOLD_WAIT_MS; 10 s deployed), short here to see both sides of it. */
const HOLD_WAIT_MS = 600;
beforeAll(async () => {
  gw = await startTestGateway({ env: { BUDGET_HOLD_WAIT_MS: String(HOLD_WAIT_MS) } });
});
afterAll(async () => {
  await gw?.stop();
});

/** The real SDK with its default retries, counting the HTTP calls it makes. */
function countingClient(token: string) {
  const calls: { status: number; retryAfter: string | null; shouldRetry: string | null }[] = [];
  const client = new Anthropic({
    baseURL: gw.url,
    apiKey: token,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      calls.push({ status: res.status, retryAfter: res.headers.get('retry-after'), shouldRetry: res.headers.get('x-should-retry') });
      return res;
    },
  });
  return { client, calls };
}

const params = { model: 'claude-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user' as const, content: 'hi [[words:3]]' }] };

describe('budget refusals', () => {
  it('a budget that cannot pay for the request: one HTTP call, x-should-retry false, retry-after = seconds to the window reset', async () => {
    const { client, calls } = countingClient(await gw.token({ user: 'spent', budget: { ai: 1, window: 'hour' } }));
    const err = await client.messages.create(params).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect(calls).toHaveLength(1);
    const secondsToHour = 3600 - Math.floor((Date.now() / 1000) % 3600);
    expect(calls[0]!.shouldRetry).toBe('false');
    expect(Math.abs(Number(calls[0]!.retryAfter) - secondsToHour)).toBeLessThanOrEqual(2);
    expect((err as Error).message).toMatch(/AI budget too low for this request: 1 of 1 microdollars remain in the current hour window .*; it resets at /);
  });

  it('a spent lifetime budget: no retry-after, since it never resets', async () => {
    const { client, calls } = countingClient(await gw.token({ user: 'spent-forever', budget: { ai: 0, window: 'lifetime' } }));
    const err = await client.messages.create(params).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect(calls).toEqual([{ status: 429, retryAfter: null, shouldRetry: 'false' }]);
    expect((err as Error).message).toMatch(/a lifetime budget does not reset/);
  });

  /** Another request of the same user holding the whole budget, which finishes (charged nothing) after `ms`. */
  async function holdEverything(user: string, budget: { ai: number; compute: number; window: 'day' }, ms: number) {
    const held = await reserve({ caller: { projectId: gw.projectId, userId: user, budget }, amounts: { ai: budget.ai, compute: 0 }, enforce: ['ai'] });
    expect(held.ok).toBe(true);
    setTimeout(() => void settle((held as { reservation: Parameters<typeof settle>[0] }).reservation, { ai: 0, compute: 0 }), ms);
  }

  it('a budget held by requests in flight that settle within the wait: the request waits for them and is answered, no 429', async () => {
    const budget = { ai: 100_000, compute: 0, window: 'day' as const };
    const { client, calls } = countingClient(await gw.token({ user: 'held-briefly', budget }));
    await holdEverything('held-briefly', budget, 200);
    const started = performance.now();
    const message = await client.messages.create(params);
    expect(message.type).toBe('message');
    expect(calls).toEqual([{ status: 200, retryAfter: null, shouldRetry: null }]);
    expect(performance.now() - started).toBeGreaterThanOrEqual(190);
  });

  it('a budget held beyond the wait: x-should-retry true, retry-after 1, and the SDK retry succeeds once it frees', async () => {
    const budget = { ai: 100_000, compute: 0, window: 'day' as const };
    // A user of its own per try: a retried test must not meet the hold its first try left.
    const user = `held-${randomUUID()}`;
    const { client, calls } = countingClient(await gw.token({ user, budget }));
    // Held for longer than the gateway waits, so the first call is refused; the SDK's retry (1 s later) waits for the
    // hold to go and gets through. 1 s more than the wait, so a call that starts late on a busy machine is still refused.
    await holdEverything(user, budget, HOLD_WAIT_MS + 1_000);
    const message = await client.messages.create(params);
    expect(message.type).toBe('message');
    expect(calls[0]).toEqual({ status: 429, retryAfter: '1', shouldRetry: 'true' });
    expect(calls.at(-1)!.status).toBe(200);
  });
});
