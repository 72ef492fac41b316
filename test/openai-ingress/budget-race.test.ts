import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimateInputTokens } from '../../bin/local/upstreams/script.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { anthropicRequest } from '../../lambdas/openai-ingress/request.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { SseDecoder } from '../../lambdas/streaming/sse.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { scaled } from '../support/scale.ts';

/**
 * The hard cap under contention on POST /v1/chat/completions (docs/contract.md, "Hard cap"; issue 29), as
 * test/proxy/budget-race.test.ts proves it for /v1/messages: one user, many concurrent requests on both ways of the
 * route — a Claude model (translated to Anthropic) and gpt-4o passed through to OpenAI, one choice or several (n > 1,
 * reserved per choice) — JSON and streams (with and without `stream_options.include_usage`), limits of every size,
 * against a budget of about ten typical requests. Whatever interleaving the ledger sees, the final spend is within
 * the budget and equals Σ of each answered request's charge; nothing is left held; every refusal is a 429 in
 * OpenAI's envelope.
 */

/** Concurrent requests: 100 in `npm test`, 300 in the soak tier. */
const RACERS = scaled(100, 300);

const CLAUDE = 'claude-sonnet-4-6';
const GPT = 'gpt-4o';
const claudePricing = priceFor(CLAUDE, 'anthropic')!;
/** gpt-4o's price for this project (USD / Mtok = µ$ per token), so every expected charge is an exact integer. */
const GPT_PRICE = { inputUsdPerMtok: 2, outputUsdPerMtok: 8 };

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-race');
  await gw.setPricing(GPT, GPT_PRICE);
});
afterAll(() => gw?.stop());
let attempt = 0;

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
}

/** µ$ of a usage at the model's price: OpenAI's prompt_tokens include no cache here ([[cache]] is never asked). */
function priced(model: string, u: Usage): number {
  if (model === GPT) return u.prompt_tokens * 2 + u.completion_tokens * 8;
  return charge(claudePricing, { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens }).microdollars;
}

/** The simulated upstream's prompt count for what the route sends it: the body as is, or translated to Anthropic's. */
function promptTokensOf(body: Record<string, unknown>): number {
  return estimateInputTokens(body.model === GPT ? body : anthropicRequest(body).body);
}

type Mode = 'json' | 'stream+usage' | 'stream';
const MODES: Mode[] = ['json', 'stream+usage', 'stream'];
const LIMITS = [200, 1_000, 8_000, 32_000];

/**
 * Request i: its model way (i mod 3: Claude, gpt-4o, gpt-4o with n = 2 or 3) and its mode (⌊i/3⌋ mod 3) cover all
 * nine combinations in every nine requests; the limit (either field) and the answer's length vary further.
 */
function requestFor(i: number): { body: Record<string, unknown>; mode: Mode; choices: number } {
  const way = i % 3;
  const mode = MODES[Math.floor(i / 3) % 3]!;
  const choices = way === 2 ? 2 + (Math.floor(i / 9) % 2) : 1;
  const limit = LIMITS[Math.floor(i / 9) % LIMITS.length]!;
  const body: Record<string, unknown> = {
    model: way === 0 ? CLAUDE : GPT,
    messages: [{ role: 'user', content: `Race ${i} [[words:${40 + (i % 7) * 30}]]` }],
    [i % 2 === 0 ? 'max_completion_tokens' : 'max_tokens']: limit,
  };
  if (choices > 1) body.n = choices;
  if (mode !== 'json') body.stream = true;
  if (mode === 'stream+usage') body.stream_options = { include_usage: true };
  return { body, mode, choices };
}

type Answered = { answered: true; charge: number; truncated: boolean; clamped: boolean };
type Refusal = { answered: false; status: number; error: { message: string; type: string; param: unknown; code: unknown }; shouldRetry: string | null };
type Outcome = Answered | Refusal;

/** The `data:` payloads of an SSE body. */
function dataOf(text: string): string[] {
  const decoder = new SseDecoder();
  return [...decoder.push(new TextEncoder().encode(text)), ...decoder.end()].map((e) => e.data);
}

interface Chunk {
  choices: { index: number; delta: { content?: string }; finish_reason: string | null }[];
  usage?: Usage | null;
  error?: unknown;
}

/** Sends request i and reads what it was charged from the answer alone. */
async function race(token: string, i: number): Promise<Outcome> {
  const { body, mode, choices } = requestFor(i);
  const res = await fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  const where = `request ${i} (${body.model}, n ${choices}, ${mode})`;
  if (res.status !== 200) {
    const { error } = JSON.parse(text) as { error: Refusal['error'] };
    return { answered: false, status: res.status, error, shouldRetry: res.headers.get('x-should-retry') };
  }
  const model = body.model as string;
  const clamped = res.headers.get('x-gateway-max-tokens') !== null;
  if (mode === 'json') {
    const completion = JSON.parse(text) as { usage: Usage; choices: { finish_reason: string }[] };
    expect(completion.choices, where).toHaveLength(choices);
    const cost = Number(res.headers.get('x-gateway-cost-microdollars'));
    // The header is the answer's usage × price, exactly.
    expect(cost, where).toBe(priced(model, completion.usage));
    return { answered: true, charge: cost, truncated: completion.choices.some((c) => c.finish_reason === 'length'), clamped };
  }
  expect(res.headers.get('content-type'), where).toContain('text/event-stream');
  const data = dataOf(text);
  expect(data.at(-1), `${where}: the stream ends with [DONE]`).toBe('[DONE]');
  const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Chunk);
  expect(
    chunks.filter((c) => c.error !== undefined),
    where,
  ).toEqual([]);
  const truncated = chunks.some((c) => c.choices?.some((ch) => ch.finish_reason === 'length'));
  if (mode === 'stream+usage') {
    const usage = chunks.filter((c) => c.usage).map((c) => c.usage!);
    expect(usage, `${where}: one usage chunk`).toHaveLength(1);
    return { answered: true, charge: priced(model, usage[0]!), truncated, clamped };
  }
  // Without include_usage the client sees no usage: what it was charged is computed from what it received — the
  // simulated upstream counts one output token per word of each choice, and its prompt count of the body sent.
  expect(
    chunks.some((c) => c.usage),
    `${where}: no usage chunk the client did not ask for`,
  ).toBe(false);
  const content = new Map<number, string>();
  for (const c of chunks) for (const ch of c.choices) content.set(ch.index, (content.get(ch.index) ?? '') + (ch.delta.content ?? ''));
  expect([...content.keys()].sort(), where).toEqual(Array.from({ length: choices }, (_, k) => k));
  const words = [...content.values()].reduce((sum, t) => sum + t.split(/\s+/).filter(Boolean).length, 0);
  return { answered: true, charge: priced(model, { prompt_tokens: promptTokensOf(body), completion_tokens: words }), truncated, clamped };
}

describe('budget race on POST /v1/chat/completions', () => {
  it(`${RACERS} concurrent requests (Claude, gpt-4o, gpt-4o with n > 1; JSON and streams): used ≤ budget, ledger = Σ charges exactly, no hold, refusals are OpenAI 429s`, {
    timeout: 60_000,
  }, async () => {
    // About ten typical requests: a Claude answer of 1,000 tokens at most, reserved at its worst case.
    const budget = 10 * (promptTokensOf(requestFor(0).body) * 3 + 1_000 * 15);
    const claim = { ai: budget, compute: 0, window: 'lifetime' as const };
    // A user of its own per attempt: a retry (npm test retries a failed test once) must not find the first attempt's spend.
    const user = `chat-racer-${++attempt}`;
    const token = await gw.token({ user, budget: claim });

    const started = performance.now();
    const outcomes = await Promise.all(Array.from({ length: RACERS }, (_, i) => race(token, i)));
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    const ok = outcomes.filter((o): o is Answered => o.answered);
    const refused = outcomes.filter((o): o is Refusal => !o.answered);
    const kinds = new Map<string, number>();
    for (const r of refused) kinds.set(String(r.error.code), (kinds.get(String(r.error.code)) ?? 0) + 1);
    console.log(
      `[budget race /v1/chat/completions] ${RACERS} requests in ${seconds} s: ${ok.length} answered (${ok.filter((o) => o.clamped).length} clamped, ${ok.filter((o) => o.clamped && o.truncated).length} of them cut short), refused ${[...kinds].map(([code, count]) => `${count} ${code}`).join(', ')}`,
    );

    // The budget cannot pay for all, yet it pays for many; the refusals are OpenAI's quota or rate-limit 429s.
    expect(ok.length).toBeGreaterThanOrEqual(5);
    expect(refused.length).toBeGreaterThan(0);
    for (const r of refused) {
      expect(r.status, JSON.stringify(r.error)).toBe(429);
      expect(Object.keys(r.error).sort()).toEqual(['code', 'message', 'param', 'type']);
      expect(typeof r.error.message).toBe('string');
      if (r.error.code === 'insufficient_quota') {
        expect(r.error.type).toBe('insufficient_quota');
        expect(r.shouldRetry).toBe('false');
      } else {
        expect(r.error).toMatchObject({ type: 'requests', code: 'rate_limit_exceeded' });
        expect(r.shouldRetry).toBe('true');
      }
    }
    // Every way of the route was answered, and some answers were clamped to fit what was left.
    for (let way = 0; way < 3; way++)
      expect(
        outcomes.some((o, i) => i % 3 === way && o.answered),
        `way ${way}`,
      ).toBe(true);
    // Whether a clamped answer was also cut short depends on which answer lengths met the last of the budget (the
    // soak run once had clamps but none shorter than its answer); chat-completions.test.ts checks the truncation.
    expect(ok.some((o) => o.clamped)).toBe(true);

    await gw.invocationsDone();
    const usage = await readUsage({ projectId: gw.projectId, userId: user, budget: claim });
    const expected = ok.reduce((sum, o) => sum + o.charge, 0);
    expect(usage.used.ai).toBe(expected);
    expect(usage.used.ai).toBeLessThanOrEqual(budget);
    expect(usage.overrun).toBe(0);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });
});
