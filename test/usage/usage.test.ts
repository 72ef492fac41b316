import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import Anthropic, { type APIError } from '@anthropic-ai/sdk';
import { reserve, settle } from '../../lambdas/budgets/ledger.ts';
import { windowEnd, windowStart } from '../../lambdas/budgets/windows.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

async function getUsage(token: string): Promise<{ status: number; body: Record<string, unknown> }> {
  await gw.invocationsDone(); // an answer is delivered before its settlement is written
  const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('GET /usage', () => {
  it('has the exact shape, before and after a proxied request that is charged input×3 + output×15 µ$', async () => {
    const token = await gw.token({ user: 'alice', budget: { ai: 1_000_000, compute: 600, window: 'day' } });
    const before = await getUsage(token);
    expect(before.status).toBe(200);
    const dayStart = windowStart('day', new Date()).toISOString();
    expect(before.body).toEqual({
      user_id: 'alice',
      issuer_id: gw.projectId,
      window: 'day',
      window_start: dayStart,
      allowed: true,
      ai: { used: 0, remaining: 1_000_000, budget: 1_000_000, reserved: 0, overrun: 0 },
      compute: { used: 0, remaining: 600, budget: 600, reserved: 0 },
    });
    expect(Object.keys(before.body)).toEqual(['user_id', 'issuer_id', 'window', 'window_start', 'allowed', 'ai', 'compute']);
    expect(new Date(before.body.window_start as string).toISOString()).toBe(before.body.window_start);

    const { data: message, response } = await gw
      .client(token)
      .messages.create({ model: 'claude-sonnet-4-6', max_tokens: 200, messages: [{ role: 'user', content: 'Tell me something [[words:20]]' }] })
      .withResponse();
    expect(message.usage.output_tokens).toBe(20);
    expect(message.usage.input_tokens).toBeGreaterThan(0);
    expect(message.usage.cache_read_input_tokens ?? 0).toBe(0);
    expect(message.usage.cache_creation_input_tokens ?? 0).toBe(0);
    const cost = message.usage.input_tokens * 3 + message.usage.output_tokens * 15;
    expect(response.headers.get('x-gateway-cost-microdollars')).toBe(String(cost));
    expect(response.headers.get('x-gateway-budget-remaining-microdollars')).toBe(String(1_000_000 - cost));

    const after = await getUsage(token);
    expect(after.status).toBe(200);
    expect(after.body).toEqual({
      user_id: 'alice',
      issuer_id: gw.projectId,
      window: 'day',
      window_start: dayStart,
      allowed: true,
      ai: { used: cost, remaining: 1_000_000 - cost, budget: 1_000_000, reserved: 0, overrun: 0 },
      compute: { used: 0, remaining: 600, budget: 600, reserved: 0 },
    });
  });

  it('charges cache reads and writes at their own prices', async () => {
    const token = await gw.token({ user: 'carol', budget: { ai: 1_000_000, window: 'hour' } });
    const message = await gw.client(token).messages.create({
      model: 'claude-sonnet-4-6',
      max_tokens: 50,
      messages: [{ role: 'user', content: `${'lorem ipsum '.repeat(200)}[[words:3]] [[cache:read=100,write=50]]` }],
    });
    expect(message.usage.cache_read_input_tokens).toBe(100);
    expect(message.usage.cache_creation_input_tokens).toBe(50);
    // 100 × $0.30 + 50 × $3.75 per Mtok = 30 + 187.5 µ$, rounded up once with the rest
    const cost = Math.ceil(message.usage.input_tokens * 3 + 3 * 15 + 30 + 187.5);
    const { body } = await getUsage(token);
    expect(body.window).toBe('hour');
    expect(body.window_start).toBe(windowStart('hour', new Date()).toISOString());
    expect(body.ai).toEqual({ used: cost, remaining: 1_000_000 - cost, budget: 1_000_000, reserved: 0, overrun: 0 });
  });

  it('users, windows and budgets are separate', async () => {
    // alice spent in her day window; her week window and bob are untouched
    const week = await getUsage(await gw.token({ user: 'alice', budget: { ai: 50, compute: 5, window: 'week' } }));
    expect(week.body).toMatchObject({
      window: 'week',
      window_start: windowStart('week', new Date()).toISOString(),
      ai: { used: 0, remaining: 50, budget: 50, reserved: 0 },
    });
    const bob = await getUsage(await gw.token({ user: 'bob' }));
    expect(bob.body).toMatchObject({ user_id: 'bob', ai: { used: 0, reserved: 0 } });
    const lifetime = await getUsage(await gw.token({ user: 'alice', budget: { window: 'lifetime' } }));
    expect(lifetime.body).toMatchObject({ window: 'lifetime', window_start: '1970-01-01T00:00:00.000Z' });
  });

  it('a budget too small for any answer: 429 without retry, nothing charged, allowed stays true while something remains', async () => {
    const token = await gw.token({ user: 'dave', budget: { ai: 5, compute: 600, window: 'day' } });
    const err = await gw
      .client(token)
      .messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'hi [[words:2]]' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    const apiErr = err as InstanceType<typeof Anthropic.RateLimitError>;
    const dayStart = windowStart('day', new Date()).toISOString();
    const reset = windowEnd('day', new Date(dayStart))!;
    expect((apiErr.error as { error: { message: string } }).error.message).toMatch(
      new RegExp(
        `^AI budget too low for this request: 5 of 5 microdollars remain in the current day window \\(started ${dayStart.replace(/\./g, '\\.')}\\), and even its smallest form costs up to \\d+; it resets at ${reset.toISOString().replace(/\./g, '\\.')}$`,
      ),
    );
    // waiting will not help before the window resets: clients are told not to retry, and when the budget comes back
    expect(apiErr.headers?.get('x-should-retry')).toBe('false');
    const resetIn = (reset.getTime() - Date.now()) / 1000;
    expect(Number(apiErr.headers?.get('retry-after'))).toBeGreaterThanOrEqual(Math.floor(resetIn) - 5);
    expect(Number(apiErr.headers?.get('retry-after'))).toBeLessThanOrEqual(Math.ceil(resetIn) + 1);
    const { body } = await getUsage(token);
    expect(body).toMatchObject({ allowed: true, ai: { used: 0, remaining: 5, budget: 5, reserved: 0, overrun: 0 } });
  });

  it('allowed:false once the AI budget is spent to the microdollar, and the proxy refuses with 429', async () => {
    const budget = { ai: 5, compute: 600, window: 'day' as const };
    const token = await gw.token({ user: 'dora', budget });
    const held = await reserve({ caller: { projectId: gw.projectId, userId: 'dora', budget }, amounts: { ai: 5, compute: 0 }, enforce: ['ai'] });
    await settle((held as { reservation: Parameters<typeof settle>[0] }).reservation, { ai: 5, compute: 0 });
    const { status, body } = await getUsage(token);
    expect(status).toBe(200);
    expect(body).toEqual({
      user_id: 'dora',
      issuer_id: gw.projectId,
      window: 'day',
      window_start: windowStart('day', new Date()).toISOString(),
      allowed: false,
      ai: { used: 5, remaining: 0, budget: 5, reserved: 0, overrun: 0 },
      compute: { used: 0, remaining: 600, budget: 600, reserved: 0 },
    });
    const err = await gw
      .client(token)
      .messages.create({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'again' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect(((err as APIError).error as { error: { type: string; message: string } }).error).toEqual({
      type: 'rate_limit_error',
      message: `AI budget exhausted: 5 of 5 microdollars spent in the current day window (started ${body.window_start as string}); it resets at ${windowEnd('day', new Date(body.window_start as string))!.toISOString()}`,
    });
    expect(((await getUsage(token)).body.ai as { used: number }).used).toBe(5);
  });

  it('allowed:false when the compute budget is zero', async () => {
    const { body } = await getUsage(await gw.token({ user: 'erin', budget: { ai: 100, compute: 0, window: 'month' } }));
    expect(body).toMatchObject({ allowed: false, ai: { remaining: 100 }, compute: { used: 0, remaining: 0, budget: 0, reserved: 0 } });
  });

  it('other methods and paths answer in the conjure envelope', async () => {
    const token = await gw.token();
    const post = await fetch(`${gw.url}/usage`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    expect(post.status).toBe(405);
    expect(await post.json()).toEqual({ error: 'method_not_allowed', message: 'POST is not allowed on /usage' });
    const missing = await fetch(`${gw.url}/nope`);
    expect(missing.status).toBe(404);
    expect(await missing.json()).toEqual({ error: 'not_found', message: 'No route for GET /nope' });
  });
});
