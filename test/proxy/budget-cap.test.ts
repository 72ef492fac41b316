import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import type { MessagesRequest } from '../../lambdas/providers/types.ts';
import { DEFAULT_WEB_SEARCH_MAX_USES, MIN_OUTPUT_TOKENS, worstCaseMicros, worstCaseOf } from '../../lambdas/metering/reservation.ts';
import { estimateInputTokens } from '../../lambdas/metering/estimate.ts';
import { estimateProducedTokens } from '../../lambdas/providers/token-estimates.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The hard cap (docs/contract.md, "Hard cap"): a user's spend never exceeds the budget. Each tiny budget gets either
 * a clamped answer whose charge stays within it, or a 429 — never a charge above it; fees are charged; a broken
 * upstream's usage never becomes a 500, a leaked hold or a free answer.
 */
const MODEL = 'claude-sonnet-4-6';
const pricing = priceFor(MODEL, 'anthropic')!;
let gw: TestGateway;

/** The ledger once every invocation under way has returned: an answer is delivered before its settlement is written. */
async function settledUsage(...args: Parameters<typeof readUsage>): ReturnType<typeof readUsage> {
  await gw.invocationsDone();
  return readUsage(...args);
}
let seq = 0;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

async function user(ai: number) {
  const id = `cap-${++seq}`;
  const budget: BudgetClaim = { ai, compute: 0, window: 'day' };
  const token = await gw.token({ user: id, budget });
  return { id, token, usage: () => settledUsage({ projectId: gw.projectId, userId: id, budget }) };
}

function post(token: string, body: Record<string, unknown>) {
  return fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': token, 'content-type': 'application/json' }, body: JSON.stringify(body) });
}

const ask = (content: string, max_tokens: number, extra: Record<string, unknown> = {}) => ({
  model: MODEL,
  max_tokens,
  messages: [{ role: 'user', content }],
  ...extra,
});

/** The exact clamp the contract promises for an empty window: the largest max_tokens whose worst case fits. */
function expectedClamp(body: Record<string, unknown>, budget: number, searches = 0): number {
  const w = worstCaseOf(pricing, body as MessagesRequest, searches);
  return Math.floor((budget * 1_000_000 - w.inputPico - w.feesPico) / w.outputRate);
}

describe('tiny budgets: a clamped answer within the budget, or a 429', () => {
  it('$0.10 with max_tokens 64,000: max_tokens lowered to what fits, said in x-gateway-max-tokens, charged within budget', async () => {
    const u = await user(100_000);
    const body = ask('write a lot [[words:50000]]', 64_000);
    const clamp = expectedClamp(body, 100_000);
    expect(clamp).toBeGreaterThan(MIN_OUTPUT_TOKENS);
    expect(clamp).toBeLessThan(64_000);
    gw.upstreams.anthropic!.requests.length = 0;
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-max-tokens')).toBe(String(clamp));
    const message = (await res.json()) as Anthropic.Message;
    expect(message.stop_reason).toBe('max_tokens');
    expect(message.usage.output_tokens).toBe(clamp);
    expect((gw.upstreams.anthropic!.requests[0]!.body as { max_tokens: number }).max_tokens).toBe(clamp);
    const usage = await u.usage();
    expect(usage.used.ai).toBe(Number(res.headers.get('x-gateway-cost-microdollars')));
    expect(usage.used.ai).toBeLessThanOrEqual(100_000);
    expect(usage.reserved.ai).toBe(0);

    // keep asking: every answer is clamped to what is left, until not even the floor fits → 429, never above budget
    let refused: Response | undefined;
    for (let i = 0; i < 20 && !refused; i++) {
      const next = await post(u.token, body);
      if (next.status === 429) refused = next;
      else expect(next.status).toBe(200);
      await next.arrayBuffer();
    }
    expect(refused?.status).toBe(429);
    expect(refused!.headers.get('x-should-retry')).toBe('false');
    const final = await u.usage();
    expect(final.used.ai).toBeLessThanOrEqual(100_000);
    expect(final.used.ai + worstCaseMicros(worstCaseOf(pricing, body as MessagesRequest, 0), MIN_OUTPUT_TOKENS)).toBeGreaterThan(100_000);
    expect(final.openHolds).toBe(0);
  });

  it('a streamed answer is clamped the same way and simply ends with stop_reason max_tokens', async () => {
    const u = await user(50_000);
    const body = ask('[[words:50000]]', 32_000, { stream: true });
    const clamp = expectedClamp(body, 50_000);
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-max-tokens')).toBe(String(clamp));
    const text = await res.text();
    expect(text).toContain('"stop_reason":"max_tokens"');
    expect(text).toMatch(/event: message_stop\n/);
    const usage = await u.usage();
    expect(usage.used.ai).toBeLessThanOrEqual(50_000);
    expect(usage.openHolds).toBe(0);
  });

  it('a request that fits is never touched: no header, the client’s bytes forwarded as sent', async () => {
    const u = await user(10_000_000);
    const raw = `{"model":"${MODEL}","max_tokens":500,  "messages":[{"role":"user","content":"hi [[words:3]]"}]}`;
    gw.upstreams.anthropic!.requests.length = 0;
    const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': u.token, 'content-type': 'application/json' }, body: raw });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-max-tokens')).toBeNull();
    expect((gw.upstreams.anthropic!.requests[0]!.body as { max_tokens: number }).max_tokens).toBe(500);
  });

  it.each([
    ['1 µ$', 1, ask('hi', 1024)],
    ['$0.01 and a 5 MB prompt', 10_000, ask('x'.repeat(5_000_000), 16)],
    ['$0.05 with a 10,000-token thinking budget', 50_000, ask('think [[words:10]]', 20_000, { thinking: { type: 'enabled', budget_tokens: 10_000 } })],
  ])('%s → 429, nothing charged, nothing held', async (_name, ai, body) => {
    const u = await user(ai);
    const res = await post(u.token, body);
    expect(res.status).toBe(429);
    const error = ((await res.json()) as { error: { type: string; message: string } }).error;
    expect(error.type).toBe('rate_limit_error');
    expect(error.message).toMatch(new RegExp(`^AI budget too low for this request: ${ai} of ${ai} microdollars remain`));
    expect(res.headers.get('x-should-retry')).toBe('false');
    const usage = await u.usage();
    expect(usage.used.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it('with thinking enabled the clamp keeps max_tokens above the thinking budget', async () => {
    const u = await user(250_000);
    const body = ask('think [[words:5]]', 60_000, { thinking: { type: 'enabled', budget_tokens: 10_000 } });
    const clamp = expectedClamp(body, 250_000);
    expect(clamp).toBeGreaterThan(10_000);
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-max-tokens')).toBe(String(clamp));
  });

  it('max_tokens 1,000,000 on a $1 budget is clamped, not reserved at $15', async () => {
    const u = await user(1_000_000);
    const body = ask('hi [[words:3]]', 1_000_000);
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    expect(Number(res.headers.get('x-gateway-max-tokens'))).toBe(expectedClamp(body, 1_000_000));
    expect((await u.usage()).used.ai).toBeLessThanOrEqual(1_000_000);
  });
});

describe('server-tool fees', () => {
  const searchTool = (maxUses?: number) => ({ type: 'web_search_20250305', name: 'web_search', ...(maxUses === undefined ? {} : { max_uses: maxUses }) });

  it.each([false, true])('web searches are charged at the table price (stream: %s)', async (stream) => {
    const u = await user(10_000_000);
    const body = ask('look it up [[words:4]] [[web-searches:3]]', 200, { tools: [searchTool(5)], ...(stream ? { stream: true } : {}) });
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    const text = await res.text();
    const usage = stream
      ? (JSON.parse(/event: message_delta\ndata: (.*)\n/.exec(text)![1]!) as { usage: Anthropic.Usage }).usage
      : (JSON.parse(text) as Anthropic.Message).usage;
    const expected = charge(pricing, { ...usage, web_search_requests: 3 }).microdollars;
    expect(expected).toBe(usage.input_tokens * 3 + 4 * 15 + 3 * 10_000);
    expect((await u.usage()).used.ai).toBe(expected);
  });

  it(`a web_search tool without max_uses gets max_uses ${DEFAULT_WEB_SEARCH_MAX_USES} upstream, and its fees are in the reservation`, async () => {
    const body = ask('search [[words:2]]', 100, { tools: [searchTool()] });
    const withFees = worstCaseOf(pricing, body as MessagesRequest, DEFAULT_WEB_SEARCH_MAX_USES);
    expect(withFees.feesPico).toBe(DEFAULT_WEB_SEARCH_MAX_USES * 10_000 * 1_000_000);
    // a budget that covers the tokens but not ten searches even at the smallest max_tokens: the request does not fit
    const u = await user(worstCaseMicros(withFees, MIN_OUTPUT_TOKENS) - 1);
    expect(worstCaseMicros(worstCaseOf(pricing, body as MessagesRequest, 0), 100)).toBeLessThan(worstCaseMicros(withFees, MIN_OUTPUT_TOKENS) - 1);
    expect((await post(u.token, body)).status).toBe(429);
    const rich = await user(10_000_000);
    gw.upstreams.anthropic!.requests.length = 0;
    expect((await post(rich.token, body)).status).toBe(200);
    expect((gw.upstreams.anthropic!.requests[0]!.body as { tools: { max_uses?: number }[] }).tools[0]!.max_uses).toBe(DEFAULT_WEB_SEARCH_MAX_USES);
  });
});

describe('never trust a number blindly', () => {
  it.each([
    ['missing', false],
    ['missing', true],
    ['absurd', false],
    ['absurd', true],
    ['empty', false],
    ['empty', true],
  ])('usage %s (stream: %s): the answer arrives, charged the documented estimate, no hold, no 500', async (mode, stream) => {
    const u = await user(10_000_000);
    const body = ask(`answer [[words:8]] [[usage:${mode}]]`, 100, stream ? { stream: true } : {});
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text).toContain('word1');
    const usage = await u.usage();
    expect(usage.openHolds).toBe(0);
    // input: the gateway's bound; output: what it passed (8 words → 8 text deltas streamed, one text block whole)
    const input = estimateInputTokens(body as MessagesRequest);
    const produced = stream
      ? estimateProducedTokens(8, 'word1 word2 word3 word4 word5 word6 word7 word8'.length)
      : estimateProducedTokens(1, 'word1 word2 word3 word4 word5 word6 word7 word8'.length);
    // a stream's message_start may still report a plausible output count (1) before the usage goes bad
    const expected = charge(pricing, { input_tokens: input, output_tokens: produced }).microdollars;
    expect(usage.used.ai).toBe(expected);
    if (!stream) expect(res.headers.get('x-gateway-cost-microdollars')).toBe(String(expected));
  });
});

describe("the gateway's own count never breaks the cap", () => {
  it.each([false, true])('an output estimate larger than max_tokens is held to max_tokens (stream: %s)', async (stream) => {
    const u = await user(10_000_000);
    // 50 words of "wordN " are about 80 tokens by characters ÷ 4, but the answer was capped at 50 tokens
    const body = ask('[[words:100]] [[usage:missing]]', 50, stream ? { stream: true } : {});
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    await res.text();
    const usage = await u.usage();
    expect(usage.used.ai).toBe(charge(pricing, { input_tokens: estimateInputTokens(body as MessagesRequest), output_tokens: 50 }).microdollars);
    expect(usage.overrun).toBe(0);
  });
});

describe('overrun', () => {
  it.each([false, true])('a provider counting more input than the bound is charged in full, the excess shown as ai.overrun (stream: %s)', async (stream) => {
    const u = await user(10_000_000);
    const body = ask('short [[words:2]] [[usage:input=900000]]', 50, stream ? { stream: true } : {});
    const reserved = worstCaseMicros(worstCaseOf(pricing, body as MessagesRequest, 0), 50);
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    await res.text();
    const truth = charge(pricing, { input_tokens: 900_000, output_tokens: 2 }).microdollars;
    expect(truth).toBeGreaterThan(reserved);
    const usage = await u.usage();
    expect(usage.used.ai).toBe(truth);
    expect(usage.overrun).toBe(truth - reserved);
    expect(usage.openHolds).toBe(0);
    const report = (await (await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${u.token}` } })).json()) as { ai: { overrun: number } };
    expect(report.ai.overrun).toBe(truth - reserved);
  });
});
