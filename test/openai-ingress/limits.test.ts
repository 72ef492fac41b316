import { afterAll, beforeAll, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { MAX_TOKENS_CEILING } from '../../lambdas/http/limits.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The output limit of a Chat Completions body passed through (docs/openai.md): at most MAX_TOKENS_CEILING under
 * either field, as on /v1/messages — so that no worst case (limit × n × the output rate) leaves the safe integers —
 * and a limit at the ceiling is lowered to what the budget allows. Found by the proxy fuzz: a limit of 10^15 was a 500.
 */
let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
});
afterAll(() => gw?.stop());

const budget = { ai: 10_000_000, compute: 0, window: 'day' as const };
async function post(extra: Record<string, unknown>) {
  const user = `limit-${Math.random()}`;
  const token = await gw.token({ user, budget });
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'hi [[words:3]]' }], ...extra }),
  });
  const body = (await res.json()) as { error?: { param: string; message: string; type: string } };
  await gw.invocationsDone();
  const usage = await readUsage({ projectId: gw.projectId, userId: user, budget });
  return { res, body, usage };
}

it.each([
  ['max_completion_tokens', { model: 'gpt-4o', max_completion_tokens: 1e15 }],
  ['max_tokens', { model: 'gpt-4o', max_tokens: Number.MAX_SAFE_INTEGER }],
  ['max_completion_tokens', { model: 'gpt-4o', n: 128, max_completion_tokens: 1e13 }],
  ['max_completion_tokens', { model: 'o1-pro', max_completion_tokens: MAX_TOKENS_CEILING + 1 }],
])('%s above the ceiling: 400 naming it, nothing held or charged (%o)', async (param, extra) => {
  const { res, body, usage } = await post(extra);
  expect(res.status).toBe(400);
  expect(body.error).toMatchObject({ type: 'invalid_request_error', param, message: `${param}: ${param} must be at most 1,000,000` });
  expect(usage.used.ai).toBe(0);
  expect(usage.reserved.ai).toBe(0);
});

it('the ceiling itself, with n = 128 on the dearest model: lowered to what the budget allows', async () => {
  const { res, usage } = await post({ model: 'o1-pro', n: 128, max_completion_tokens: MAX_TOKENS_CEILING });
  expect(res.status).toBe(200);
  const limit = Number(res.headers.get('x-gateway-max-tokens'));
  expect(limit).toBeGreaterThan(0);
  expect(limit).toBeLessThan(MAX_TOKENS_CEILING);
  expect(usage.reserved.ai).toBe(0);
  expect(usage.used.ai).toBeGreaterThan(0);
  expect(usage.used.ai).toBeLessThanOrEqual(budget.ai);
});
