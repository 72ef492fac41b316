/**
 * Property-based fuzzing of conjure's GET /usage over real HTTP against one whole local gateway: any method, path
 * (repeated slashes, case, percent-encoded garbage, extra segments, queries), Host header, and credentials (valid
 * tokens with random budgets and windows; every kind of malformed token; tokens in the wrong header). Judged by
 * test/support/fuzz-oracle.ts; on top of that, every 200 is checked field by field against the token's claims and
 * the spend the fuzz itself caused, and a second property spends through the proxy (budget refusals included) and
 * checks that /usage reports exactly that.
 *
 * Runs in CI with a fixed seed (both fuzz files: about 4,200 requests). Larger local run — about 80,000 requests,
 * 10–15 minutes on 2 cores (FUZZ_RUNS=3 took 95 s for 12,000):
 *
 *   FUZZ_RUNS=20 npx vitest run test/fuzz
 *   FUZZ_SEED=$RANDOM FUZZ_RUNS=20 npx vitest run test/fuzz      # a new seed each time; a failure prints its seed
 *
 * A failure prints `replay: FUZZ_SEED=… FUZZ_PATH=… npx vitest run test/fuzz -t '<property>'` and a curl command.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { headerBytes, NODE_MAX_HEADER_BYTES, parserAnswerProblems, responseProblems } from '../support/envelope.ts';
import { checkProperty, FUZZ_SCALE, FUZZ_SEED, fuzzTimeout, runs } from '../support/fuzz.ts';
import { expectFor } from '../support/fuzz-oracle.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { gatewayLimits } from '../support/limits.ts';
import { curlFor, rawClient, type RawClient, type RawRequest, type RawResponse } from '../support/raw-http.ts';
import {
  credentialsArb,
  goodTokenArb,
  hostArb,
  methodArb,
  noDirective,
  pathArb,
  tokenArb,
  type Budget,
  type Credentials,
  type FuzzContext,
  type GoodToken,
  type Window,
} from './arbitraries.ts';

let gw: TestGateway;
let ctx: FuzzContext;
let client: RawClient;
let started = 0;

beforeAll(async () => {
  started = performance.now();
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '600' } });
  client = rawClient(gw.url);
  ctx = { projectId: gw.projectId, secret: gw.secret, catalog: ['claude-sonnet-4-6'], limits: await gatewayLimits() };
  console.log(`[fuzz] usage: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_SCALE}; hard-cap floor: ${ctx.limits.source.minOutputTokens}`);
});

afterAll(async () => {
  console.log(`[fuzz] usage: outcomes ${JSON.stringify(tally)}`);
  console.log(`[fuzz] usage: ${client?.count ?? 0} requests in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  client?.close();
  await gw?.stop();
});

const WINDOWS: Window[] = ['hour', 'day', 'week', 'month', 'lifetime'];
/** Outcomes seen, printed at the end: a property whose requests all end the same way tests little. */
const tally: Record<string, number> = {};
const count = (key: string) => (tally[key] = (tally[key] ?? 0) + 1);

/** Budgets from nothing to the largest the claim allows, in every window. */
const budgetArb: fc.Arbitrary<Budget> = fc.record({
  ai: fc.oneof(fc.constantFrom(0, 1, Number.MAX_SAFE_INTEGER), fc.nat(10_000_000), fc.maxSafeNat()),
  compute: fc.oneof(fc.constantFrom(0, 1, Number.MAX_SAFE_INTEGER), fc.nat(100_000), fc.maxSafeNat()),
  window: fc.constantFrom(...WINDOWS),
});

/** The UTC calendar window start the contract defines, written independently of lambdas/budgets/windows.ts. */
function windowStartOf(window: Window, at: number): string {
  const HOUR = 3_600_000;
  const DAY = 24 * HOUR;
  const d = new Date(at);
  switch (window) {
    case 'hour':
      return new Date(at - (at % HOUR)).toISOString();
    case 'day':
      return new Date(at - (at % DAY)).toISOString();
    case 'week': {
      const midnight = at - (at % DAY);
      const daysSinceMonday = (d.getUTCDay() + 6) % 7; // Sunday = 0 → 6 days since Monday
      return new Date(midnight - daysSinceMonday * DAY).toISOString();
    }
    case 'month':
      return `${d.toISOString().slice(0, 7)}-01T00:00:00.000Z`;
    case 'lifetime':
      return '1970-01-01T00:00:00.000Z';
  }
}

/** Seconds from `at` until the window containing it ends (undefined for lifetime). */
function secondsToWindowEnd(window: Window, at: number): number | undefined {
  if (window === 'lifetime') return undefined;
  const start = Date.parse(windowStartOf(window, at));
  const d = new Date(start);
  const end =
    window === 'hour'
      ? start + 3_600_000
      : window === 'day'
        ? start + 86_400_000
        : window === 'week'
          ? start + 7 * 86_400_000
          : Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1);
  return (end - at) / 1000;
}

/** What the fuzz has spent per (sub, window) through the proxy: /usage must report exactly this. */
const spent = new Map<string, number>();
/** Keyed by the calendar window too, so a run that crosses the top of an hour (or midnight) starts from zero again. */
const spentKey = (t: Pick<GoodToken, 'sub'> & { budget: Budget }, windowStart: string) => `${t.sub}\u0000${t.budget.window}\u0000${windowStart}`;

function usageBodyProblems(res: RawResponse, caller: GoodToken, sentAt: number, receivedAt: number): string[] {
  let body: Record<string, unknown>;
  try {
    body = JSON.parse(res.text) as Record<string, unknown>;
  } catch {
    return ['200 body is not JSON'];
  }
  const used = spent.get(spentKey(caller, String(body.window_start))) ?? 0;
  const b = caller.budget;
  const aiRemaining = Math.max(0, b.ai - used);
  const starts = new Set([windowStartOf(b.window, sentAt), windowStartOf(b.window, receivedAt)]);
  const expected = {
    user_id: caller.sub,
    issuer_id: ctx.projectId,
    window: b.window,
    allowed: aiRemaining > 0 && b.compute > 0,
    ai: { used, remaining: aiRemaining, budget: b.ai, reserved: 0 },
    compute: { used: 0, remaining: b.compute, budget: b.compute, reserved: 0 },
  };
  const problems: string[] = [];
  for (const [k, v] of Object.entries(expected)) {
    // Each listed field exactly; a meter may carry more (the AI meter's `overrun`, which nothing here can cause).
    const got = body[k];
    const shown =
      typeof v === 'object' && got && typeof got === 'object' ? Object.fromEntries(Object.keys(v).map((f) => [f, (got as Record<string, unknown>)[f]])) : got;
    if (JSON.stringify(shown) !== JSON.stringify(v)) problems.push(`/usage ${k} is ${JSON.stringify(got)}, expected ${JSON.stringify(v)}`);
  }
  const overrun = (body.ai as { overrun?: unknown } | undefined)?.overrun;
  if (overrun !== undefined && overrun !== 0)
    problems.push(`/usage ai.overrun is ${JSON.stringify(overrun)}; the simulated upstream never exceeds a reservation`);
  if (!starts.has(body.window_start as string))
    problems.push(`/usage window_start is ${JSON.stringify(body.window_start)}, expected ${[...starts].join(' or ')}`);
  return problems;
}

async function send(raw: RawRequest, context: () => string): Promise<RawResponse> {
  try {
    return await client.send(raw);
  } catch (err) {
    throw new Error(`no answer: ${(err as Error).message}${context()}`);
  }
}

/** One conjure-side request, judged by the oracle, and a 200 checked against the token it was read with. */
async function exerciseUsage(c: { method: string; path: string; host?: string; creds: Credentials; body?: Buffer }): Promise<void> {
  const headers: Record<string, string> = { ...c.creds.headers };
  if (c.host !== undefined) headers.host = c.host;
  if (c.body) headers['content-type'] = 'application/json';
  const exp = expectFor({ ...c, contentType: headers['content-type'] }, ctx);
  const raw: RawRequest = { method: c.method, path: c.path, headers, body: c.body };
  const context = () => `\n  expected: ${exp.statuses.join('|')} (${exp.why})\n  credentials: ${c.creds.why}\n  repro: ${curlFor(gw.url, raw)}`;
  const sentAt = Date.now();
  const res = await send(raw, context);
  const receivedAt = Date.now();
  await gw.invocationsDone(); // a settlement lands after its answer
  count(`${exp.app} ${res.status}`);
  const problems: string[] = [];
  // Headers near Node's limit may be refused by its parser (431) before the gateway sees the request.
  const parserRefusal = res.status === 431 && headerBytes(raw.method, raw.path, raw.headers ?? {}) > NODE_MAX_HEADER_BYTES - 2048;
  if (res.status >= 500) problems.push(`${res.status}: a 5xx for a client's request`);
  else if (!exp.statuses.includes(res.status) && !parserRefusal) problems.push(`status ${res.status}`);
  problems.push(...(parserRefusal ? parserAnswerProblems(res) : responseProblems(res, exp.app, c.method)));
  if (res.status === 200 && exp.route === 'usage' && c.method === 'GET' && exp.caller) problems.push(...usageBodyProblems(res, exp.caller, sentAt, receivedAt));
  if (problems.length) throw new Error(`${problems.join('\n')}\n  answer: ${res.status} ${res.text.slice(0, 600)}${context()}`);
}

describe('usage fuzz', () => {
  it(
    'usage: any method, path, Host header and credentials',
    async () => {
      const tokens = tokenArb(ctx, goodTokenArb(ctx, budgetArb));
      // Mostly /usage itself (mangled), sometimes another conjure path or the proxy's, so both envelopes show up.
      const templates = ['/usage', '/usage', '/usage', '/usage', '/', '/prompt', '/incubate', '/usage/x', '/v1/models', '/v1/messages'];
      const body = fc.option(fc.constantFrom('{}', '{"token":"x"}', 'not json', ''), { nil: undefined });
      await checkProperty(
        'usage: any method, path, Host header and credentials',
        fc.asyncProperty(
          fc.oneof({ weight: 3, arbitrary: fc.constant('GET') }, { weight: 1, arbitrary: methodArb }),
          pathArb(ctx, templates),
          hostArb,
          credentialsArb(ctx, tokens),
          body,
          async (method, path, host, creds, b) => {
            await exerciseUsage({ method, path, host, creds, body: b !== undefined && !['GET', 'HEAD'].includes(method) ? Buffer.from(b) : undefined });
          },
        ),
        runs(1200),
      );
    },
    fuzzTimeout(60_000),
  );

  it(
    'usage: reports exactly what the proxy charged, and the proxy refuses once the budget is spent',
    async () => {
      let user = 0;
      const prompt = fc.string({ unit: 'grapheme', maxLength: 40 }).filter(noDirective);
      await checkProperty(
        'usage: reports exactly what the proxy charged, and the proxy refuses once the budget is spent',
        fc.asyncProperty(
          fc.record({
            // Budgets around one request's worst case, so some requests fit, some are lowered, some are refused;
            // compute 0 makes /usage say allowed: false.
            ai: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 2000 }), fc.integer({ min: 2000, max: 20_000 })),
            compute: fc.constantFrom(0, 1, 3600),
            window: fc.constantFrom(...WINDOWS),
          }),
          fc.array(fc.record({ text: prompt, maxTokens: fc.integer({ min: 1, max: 300 }), header: fc.constantFrom('x-api-key', 'authorization') }), {
            maxLength: 3,
          }),
          fc.constantFrom('/usage', '//usage', '/usage/', '/usage?x=%FF', '///usage//'),
          hostArb,
          async (budget, calls, usagePath, host) => {
            // A fresh user for every execution (shrinking re-runs included): its window starts from zero.
            const sub = `sp-${++user}`;
            const token = fc.sample(goodTokenArb(ctx, fc.constant(budget), fc.constant(sub)), { numRuns: 1, seed: user })[0]!;
            for (const call of calls) {
              const windowStart = windowStartOf(budget.window, Date.now());
              const usedBefore = spent.get(spentKey(token, windowStart)) ?? 0;
              const request = { model: 'claude-sonnet-4-6', max_tokens: call.maxTokens, messages: [{ role: 'user', content: call.text }] };
              const headers: Record<string, string> = call.header === 'x-api-key' ? { 'x-api-key': token.token } : { authorization: `Bearer ${token.token}` };
              const raw: RawRequest = {
                method: 'POST',
                path: '/v1/messages',
                headers: { ...headers, 'content-type': 'application/json' },
                body: JSON.stringify(request),
              };
              const context = () => `\n  budget ${JSON.stringify(budget)}, used before ${usedBefore}\n  repro: ${curlFor(gw.url, raw)}`;
              const res = await send(raw, context);
              // Its settlement is written after the answer: the next request (and the figures) come once it returned.
              await gw.invocationsDone();
              count(`spend ${res.status}${res.headers['x-gateway-max-tokens'] ? ' (max_tokens lowered)' : ''}`);
              const problems = responseProblems(res, 'proxy', 'POST');
              const floor = ctx.limits.minOutputTokens;
              // Whether a request is admitted below the budget depends on the gateway's input bound (its own
              // business); what is checked exactly is everything around it: spent → 429, the price, the hard cap,
              // the lowered max_tokens, and the refusal's retry headers.
              if (usedBefore >= budget.ai && res.status !== 429) problems.push(`status ${res.status}, expected 429 (used ${usedBefore} ≥ budget ${budget.ai})`);
              else if (floor === undefined && usedBefore < budget.ai && res.status !== 200)
                problems.push(`status ${res.status}, expected 200 (no hard cap; used ${usedBefore} < budget ${budget.ai})`);
              else if (res.status === 200) {
                const usage = (JSON.parse(res.text) as { usage: { input_tokens: number; output_tokens: number } }).usage;
                const cost = usage.input_tokens * 3 + usage.output_tokens * 15;
                if (res.headers['x-gateway-cost-microdollars'] !== String(cost))
                  problems.push(`cost header ${res.headers['x-gateway-cost-microdollars']}, expected ${cost}`);
                const clampHeader = res.headers['x-gateway-max-tokens'];
                const admitted = clampHeader === undefined ? call.maxTokens : Number(clampHeader);
                if (
                  clampHeader !== undefined &&
                  !(Number.isInteger(admitted) && admitted < call.maxTokens && admitted >= Math.min(floor ?? 1, call.maxTokens))
                ) {
                  problems.push(`x-gateway-max-tokens ${clampHeader} for a request of max_tokens ${call.maxTokens} (floor ${floor})`);
                }
                if (usage.output_tokens > admitted) problems.push(`${usage.output_tokens} output tokens, more than the admitted max_tokens ${admitted}`);
                if (floor !== undefined && usedBefore + cost > budget.ai)
                  problems.push(`spend ${usedBefore + cost} exceeds the budget ${budget.ai} (hard cap)`);
                spent.set(spentKey(token, windowStart), usedBefore + cost);
              } else if (res.status !== 429) problems.push(`status ${res.status}, expected 200 or 429`);
              else {
                // docs/contract.md, Budget refusals: nothing in flight, so only the reset helps: do not retry.
                if (res.headers['x-should-retry'] !== 'false') problems.push(`x-should-retry is ${res.headers['x-should-retry']}, expected false`);
                const toEnd = secondsToWindowEnd(budget.window, Date.now());
                const retryAfter = res.headers['retry-after'];
                if (toEnd === undefined) {
                  if (retryAfter !== undefined) problems.push(`retry-after ${retryAfter} on a lifetime window (it never resets)`);
                } else if (!/^\d+$/.test(String(retryAfter)) || Math.abs(Number(retryAfter) - toEnd) > 5) {
                  problems.push(`retry-after is ${retryAfter}, expected about ${Math.ceil(toEnd)} s (until the ${budget.window} window resets)`);
                }
              }
              if (problems.length) throw new Error(`${problems.join('\n')}\n  answer: ${res.status} ${res.text.slice(0, 400)}${context()}`);
            }
            await exerciseUsage({
              method: 'GET',
              path: usagePath,
              host,
              creds: { headers: { authorization: `Bearer ${token.token}` }, proxy: token, usage: token, why: token.why },
            });
          },
        ),
        runs(150),
      );
    },
    fuzzTimeout(60_000),
  );
});

describe('after the whole run', () => {
  it('no reservation is left anywhere in the usage table', async () => {
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
  });
});
