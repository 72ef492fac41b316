import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { readUsage, reserve, settle } from '../../lambdas/budgets/ledger.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import { SseDecoder } from '../../lambdas/streaming/sse.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { MAX_PARALLEL_TOOL_CALLS, MAX_TOOL_CALLS_PER_TURN, MAX_TOOL_SCHEMA_DEPTH } from '../../lambdas/agent/tools/limits.ts';
import { absurdMcpServer, countingToolServer, mcpServer, toolServer } from '../support/tool-servers.ts';

/**
 * POST /prompt against the local runtime, the simulated upstreams (scripted conversations: `[[N> …]]` applies on turn
 * N), a real HTTP tool server and the MCP SDK's own server: the agent loop, its options, its answers (JSON and SSE),
 * its money (the ledger's delta equals total_cost_usd to the microdollar) and its refusals, with exact bodies.
 */
const MODEL = 'claude-sonnet-4-6';
let gw: TestGateway;
let tools: Awaited<ReturnType<typeof toolServer>>;
let mcp: Awaited<ReturnType<typeof mcpServer>>;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-test-openai');
  tools = await toolServer();
  mcp = await mcpServer();
});
afterAll(async () => {
  await gw?.stop();
  tools?.server.close();
  mcp?.server.closeAllConnections();
  mcp?.server.close();
});

async function user(budget: Partial<BudgetClaim> = {}, projectSecret?: { projectId: string; secret: string }) {
  const id = `p-${++seq}`;
  const full: BudgetClaim = { ai: 5_000_000, compute: 3_600, window: 'day', ...budget };
  const token = projectSecret
    ? await mintToken({ projectId: projectSecret.projectId, userId: id, secret: projectSecret.secret, budget: full, expiresInSeconds: 3600 })
    : await gw.token({ user: id, budget: full });
  return { id, token, usage: () => readUsage({ projectId: projectSecret?.projectId ?? gw.projectId, userId: id, budget: full }) };
}

function prompt(body: unknown, opts: { sse?: boolean; signal?: AbortSignal } = {}) {
  return fetch(`${gw.url}/prompt`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(opts.sse ? { accept: 'text/event-stream' } : {}) },
    body: JSON.stringify(body),
    signal: opts.signal,
  });
}

interface PromptAnswer {
  result: Record<string, unknown> & {
    subtype: string;
    text: string;
    total_cost_usd: number;
    total_cost_microdollars: number;
    num_turns: number;
    usage: { input_tokens: number; output_tokens: number };
  };
  messages: Record<string, unknown>[];
  sessionId: string;
}

async function run(token: string, message: string, options: Record<string, unknown> = {}): Promise<PromptAnswer> {
  const res = await prompt({ message, options: { token, model: MODEL, ...options } });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as PromptAnswer;
}

/** The SSE events of a response, each with the time it arrived. */
async function sseEvents(res: Response): Promise<{ event?: string; data: Record<string, unknown>; at: number }[]> {
  const decoder = new SseDecoder();
  const out: { event?: string; data: Record<string, unknown>; at: number }[] = [];
  const reader = res.body!.getReader();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    for (const e of decoder.push(value)) out.push({ event: e.event, data: JSON.parse(e.data) as Record<string, unknown>, at: performance.now() });
  }
  return out;
}

const weather = () => ({
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } } },
  url: `${tools.url}/weather`,
  headers: { 'x-tool-key': 'k1' },
});
const time = () => ({
  name: 'get_time',
  description: 'Time in a zone',
  input_schema: { type: 'object', properties: { tz: { type: 'string' } } },
  url: `${tools.url}/time`,
});

describe('a plain run', () => {
  it('JSON: the answer, its cost (= the ledger delta), usage, messages and a session id', async () => {
    const u = await user();
    const answer = await run(u.token, 'Hello [[words:3]]');
    expect(answer.result).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: 'word1 word2 word3', num_turns: 1, model: MODEL });
    expect(answer.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(answer.messages).toEqual([{ type: 'assistant', subtype: 'text', text: 'word1 word2 word3' }, answer.result]);
    const usage = await u.usage();
    expect(usage.used.ai).toBe(answer.result.total_cost_microdollars);
    expect(answer.result.total_cost_usd).toBe(answer.result.total_cost_microdollars / 1_000_000);
    expect(answer.result.total_cost_microdollars).toBe(charge(priceFor(MODEL, 'anthropic')!, answer.result.usage).microdollars);
    expect(answer.result.usage.output_tokens).toBe(3);
    // Compute: the run's seconds, rounded up, and nothing left held.
    expect(usage.used.compute).toBeGreaterThanOrEqual(1);
    expect(usage.reserved).toEqual({ ai: 0, compute: 0 });
    expect(await liveLeases(gw.developerId)).toEqual([]);
  });

  it('SSE: text chunks as the model produces them, then the result, then done', async () => {
    const u = await user();
    const res = await prompt({ message: 'Hi [[words:8]] [[delay:60]]', options: { token: u.token, model: MODEL } }, { sse: true });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events = await sseEvents(res);
    const chunks = events.filter((e) => e.data.type === 'assistant');
    expect(chunks.length).toBeGreaterThanOrEqual(8);
    expect(chunks.map((e) => e.data.text).join('')).toBe('word1 word2 word3 word4 word5 word6 word7 word8');
    expect(events.every((e, i) => e.event === (i === events.length - 1 ? 'done' : 'message'))).toBe(true);
    const result = events.at(-2)!;
    expect(result.data).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2 word3 word4 word5 word6 word7 word8' });
    expect(events.at(-1)!.data).toEqual({ sessionId: expect.stringMatching(/^[0-9a-f-]{36}$/) });
    // Real streaming: the first chunk arrived well before the last (events are 60 ms apart upstream).
    expect(chunks.at(-1)!.at - chunks[0]!.at).toBeGreaterThan(300);
  });
});

describe('tools', () => {
  it('two HTTP tools in one turn, run by the gateway against a real server; the results reach the model', async () => {
    const u = await user();
    tools.calls.length = 0;
    const answer = await run(u.token, 'Weather and time? [[1> tool:get_weather {"city":"Paris"}]] [[1> tool:get_time {"tz":"CET"}]]', {
      tools: [weather(), time()],
    });
    expect(answer.result).toMatchObject({ subtype: 'success', num_turns: 2, text: 'Tool results: 18°C in Paris | 14:00 CET' });
    expect(tools.calls.map((c) => [c.path, c.body])).toEqual(
      expect.arrayContaining([
        ['/weather', { city: 'Paris' }],
        ['/time', { tz: 'CET' }],
      ]),
    );
    expect(tools.calls.find((c) => c.path === '/weather')!.headers['x-tool-key']).toBe('k1');
    const kinds = answer.messages.map((m) => `${m.type}:${m.name ?? m.subtype}`);
    expect(kinds).toEqual(
      [
        'assistant:text',
        'tool_use:get_weather',
        'tool_use:get_time',
        'tool_result:get_weather',
        'tool_result:get_time',
        'assistant:text',
        'result:success',
      ].filter((k) => kinds.includes(k)),
    );
    expect(
      answer.messages
        .filter((m) => m.type === 'tool_result')
        .map((m) => m.text)
        .sort(),
    ).toEqual(['14:00 CET', '18°C in Paris']);
    expect((await u.usage()).used.ai).toBe(answer.result.total_cost_microdollars);
  });

  it('an MCP server (the SDK’s own): its tools offered as mcp__<server>__<tool>, filtered by allowed/disallowed; an unreachable one reported', async () => {
    const u = await user();
    gw.upstreams.anthropic!.requests.length = 0;
    const answer = await run(u.token, 'Add [[1> tool:mcp__calc__add {"a":2,"b":3}]]', {
      mcpServers: { calc: { type: 'http', url: `${mcp.url}/mcp` }, down: { type: 'http', url: 'http://127.0.0.1:9/mcp' } },
      allowedTools: ['mcp__calc', 'get_weather'],
      disallowedTools: ['mcp__calc__secret'],
      tools: [weather(), time()],
    });
    expect(answer.result).toMatchObject({ subtype: 'success', text: 'Tool results: 5' });
    const offered = (gw.upstreams.anthropic!.requests[0]!.body as { tools: { name: string }[] }).tools.map((t) => t.name).sort();
    expect(offered).toEqual(['get_weather', 'mcp__calc__add']);
    expect(answer.result.mcp_servers).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ name: 'calc', status: 'connected', tools: 2 }),
        expect.objectContaining({ name: 'down', status: 'failed' }),
      ]),
    );
  });

  it('a GPT model runs the same loop through the translation', async () => {
    const u = await user();
    const answer = await run(u.token, 'Weather? [[1> tool:get_weather {"city":"Oslo"}]]', { model: 'gpt-4.1', tools: [weather()] });
    expect(answer.result).toMatchObject({ subtype: 'success', num_turns: 2, text: 'Tool results: 18°C in Oslo', model: 'gpt-4.1' });
    expect((await u.usage()).used.ai).toBe(answer.result.total_cost_microdollars);
  });
});

describe('options', () => {
  const schema = { type: 'object', properties: { answer: { type: 'number' } }, required: ['answer'], additionalProperties: false };

  it('outputFormat: a valid JSON answer is the structured output', async () => {
    const answer = await run((await user()).token, 'Answer [[json:{"answer":42}]]', { outputFormat: { type: 'json_schema', schema } });
    expect(answer.result).toMatchObject({ subtype: 'success', structured_output: { answer: 42 }, num_turns: 1 });
  });

  it('outputFormat: invalid, then corrected once, succeeds; invalid three times ends with the retries subtype', async () => {
    const fixed = await run((await user()).token, 'Answer [[1> json-invalid]] [[2> json:{"answer":7}]]', { outputFormat: { type: 'json_schema', schema } });
    expect(fixed.result).toMatchObject({ subtype: 'success', structured_output: { answer: 7 }, num_turns: 2 });
    const failed = await run((await user()).token, 'Answer [[1> json-invalid]] [[2> json:{"answer":"x"}]] [[3> json-invalid]]', {
      outputFormat: { type: 'json_schema', schema },
    });
    expect(failed.result).toMatchObject({ subtype: 'error_max_structured_output_retries', is_error: true, num_turns: 3 });
  });

  it('maxTurns: the run stops after that many model calls', async () => {
    const answer = await run((await user()).token, 'Loop [[1> tool:get_weather {}]] [[2> tool:get_weather {}]] [[3> tool:get_weather {}]]', {
      tools: [weather()],
      maxTurns: 2,
    });
    expect(answer.result).toMatchObject({ subtype: 'error_max_turns', num_turns: 2, is_error: true });
  });

  it('maxBudgetUsd: never exceeded — each call fits what is left, and the run ends when nothing useful fits', async () => {
    const u = await user();
    const cap = 0.02;
    const answer = await run(
      u.token,
      'Go [[1> tool:get_weather {}]] [[2> tool:get_weather {}]] [[3> tool:get_weather {}]] [[4> tool:get_weather {}]] [[words:4000]]',
      {
        tools: [weather()],
        maxBudgetUsd: cap,
      },
    );
    expect(answer.result.total_cost_microdollars).toBeLessThanOrEqual(cap * 1_000_000);
    expect(answer.result.subtype).toBe('error_max_budget_usd');
    expect(answer.result.num_turns).toBeGreaterThanOrEqual(1);
    expect((await u.usage()).used.ai).toBe(answer.result.total_cost_microdollars);
  });

  it("a run may not outlive the user's remaining compute: it ends at that deadline, charged what it used", async () => {
    const u = await user({ compute: 1 });
    const started = performance.now();
    const answer = await run(u.token, 'Slow [[latency:4000]] [[words:3]]');
    expect(performance.now() - started).toBeLessThan(3_500);
    expect(answer.result).toMatchObject({ subtype: 'error_max_duration', is_error: true });
    const usage = await u.usage();
    expect(usage.used.compute).toBe(1);
    expect(usage.reserved).toEqual({ ai: 0, compute: 0 });
    expect(usage.used.ai).toBe(answer.result.total_cost_microdollars);
  });

  it('maxThinkingTokens reaches the upstream as the thinking budget, max_tokens above it; thinking is not in the text', async () => {
    gw.upstreams.anthropic!.requests.length = 0;
    const answer = await run((await user()).token, 'Think [[thinking]] [[words:2]]', { maxThinkingTokens: 2048 });
    const body = gw.upstreams.anthropic!.requests[0]!.body as { thinking: unknown; max_tokens: number };
    expect(body.thinking).toEqual({ type: 'enabled', budget_tokens: 2048 });
    expect(body.max_tokens).toBeGreaterThan(2048);
    expect(answer.result.text).toBe('word1 word2');
  });
});

describe('refusals, with the exact bodies', () => {
  async function refused(body: unknown) {
    const res = await prompt(body);
    return { status: res.status, body: (await res.json()) as Record<string, unknown> };
  }

  it('a bad token: 401 {error: invalid_token, message}', async () => {
    const forged = `${(await user()).token.slice(0, -4)}AAAA`;
    expect(await refused({ message: 'hi', options: { token: forged } })).toEqual({
      status: 401,
      body: { error: 'invalid_token', message: 'Token signature is invalid' },
    });
    expect(await refused({ message: 'hi', options: {} })).toEqual({
      status: 401,
      body: { error: 'invalid_token', message: 'Missing token: send it in options.token' },
    });
  });

  it('a spent AI budget and a spent compute budget: 429 user_budget_exhausted with both meters', async () => {
    const noAi = await user({ ai: 0 });
    const ai = await refused({ message: 'hi', options: { token: noAi.token } });
    expect(ai.status).toBe(429);
    expect(ai.body).toMatchObject({
      error: 'user_budget_exhausted',
      ai: { used: 0, remaining: 0, budget: 0 },
      compute: { used: 0, remaining: 3_600, budget: 3_600 },
    });
    const noCompute = await user({ compute: 0 });
    const compute = await refused({ message: 'hi', options: { token: noCompute.token } });
    expect(compute.status).toBe(429);
    expect(compute.body).toMatchObject({
      error: 'user_budget_exhausted',
      ai: { used: 0, remaining: 5_000_000, budget: 5_000_000 },
      compute: { used: 0, remaining: 0, budget: 0 },
    });
  });

  it('AI budget left below the smallest call: 429 user_budget_exhausted, JSON and SSE alike, nothing charged (compute included)', async () => {
    // 500 µ$: the smallest Sonnet call (its input bound, ~100 tokens × 3 µ$, and the 16-token output floor × 15 µ$)
    // costs more (issue 31).
    const poor = await user({ ai: 500 });
    const calls = gw.upstreams.anthropic!.requests.length;
    for (const sse of [false, true]) {
      const res = await prompt({ message: 'hi', options: { token: poor.token, model: MODEL } }, { sse });
      expect(res.status).toBe(429);
      expect(res.headers.get('content-type')).toContain('application/json');
      expect(Number(res.headers.get('retry-after'))).toBeGreaterThan(0);
      expect(await res.json()).toEqual({
        error: 'user_budget_exhausted',
        message: expect.stringMatching(/AI budget/),
        ai: { used: 0, remaining: 500, budget: 500 },
        compute: { used: 0, remaining: 3_600, budget: 3_600 },
      });
    }
    expect(gw.upstreams.anthropic!.requests.length).toBe(calls);
    await gw.invocationsDone();
    const after = await poor.usage();
    expect({ used: after.used, reserved: after.reserved, openHolds: after.openHolds }).toEqual({
      used: { ai: 0, compute: 0 },
      reserved: { ai: 0, compute: 0 },
      openHolds: 0,
    });
  });

  it('an AI budget only held by requests in flight: the run is admitted, its first call waits for the holds, and it is answered', async () => {
    const budget: BudgetClaim = { ai: 200_000, compute: 3_600, window: 'day' };
    const u = await user(budget);
    // Another request of the same user holds the whole AI budget, and settles (charged 1,000 µ$) 400 ms later.
    const held = await reserve({ caller: { projectId: gw.projectId, userId: u.id, budget }, amounts: { ai: 200_000, compute: 0 }, enforce: ['ai'] });
    if (!held.ok) throw new Error('could not hold the budget');
    setTimeout(() => void settle(held.reservation, { ai: 1_000, compute: 0 }), 400);
    const answer = await run(u.token, 'hi [[words:2]]');
    expect(answer.result.subtype).toBe('success');
    await gw.invocationsDone();
    const after = await u.usage();
    expect(after.used.ai).toBe(1_000 + answer.result.total_cost_microdollars);
    expect(after.reserved).toEqual({ ai: 0, compute: 0 });
  });

  it("the developer's plan spent: 402 with the plan's figures", async () => {
    const developerId = `dev-zero-${seq++}`;
    await createDeveloper({ developerId, planSeconds: 0, poolSeconds: 0 });
    const project = await createProject({ developerId });
    const u = await user({}, project);
    expect(await refused({ message: 'hi', options: { token: u.token } })).toEqual({
      status: 402,
      body: { error: 'developer_budget_exhausted', used: 0, available: 0, planSeconds: 0, poolSeconds: 0 },
    });
  });

  it('N+1 concurrent runs on a tier of N: 429 concurrent_limit_reached naming the live runs', async () => {
    const developerId = `dev-hobby-${seq++}`;
    await createDeveloper({ developerId, planSeconds: 1_000 });
    const project = await createProject({ developerId });
    const [a, b, c] = [await user({}, project), await user({}, project), await user({}, project)];
    const slow = (token: string) => run(token, 'Slow [[latency:1500]] [[words:1]]');
    const running = [slow(a.token), slow(b.token)];
    await expect.poll(async () => (await liveLeases(developerId)).length, { timeout: 3_000, interval: 50 }).toBe(2);
    const third = await refused({ message: 'hi', options: { token: c.token, model: MODEL } });
    expect(third.status).toBe(429);
    expect(third.body).toEqual({
      error: 'concurrent_limit_reached',
      active: 2,
      max: 2,
      sessions: [
        { sessionId: expect.any(String), userId: expect.any(String), ageMs: expect.any(Number) },
        { sessionId: expect.any(String), userId: expect.any(String), ageMs: expect.any(Number) },
      ],
    });
    expect((third.body.sessions as { userId: string }[]).map((s) => s.userId).sort()).toEqual([a.id, b.id].sort());
    await Promise.all(running);
    expect(await liveLeases(developerId)).toEqual([]);
  });

  it('bad input: 400 naming what is wrong, before any run', async () => {
    const token = (await user()).token;
    const cases: [Record<string, unknown>, string][] = [
      [{ mcpServers: { local: { type: 'stdio', command: 'rm', args: ['-rf', '/'] } } }, 'stdio MCP servers'],
      [{ tools: [{ name: 'pick_file', description: 'client side', input_schema: { type: 'object' } }] }, 'use /ws for client-side tools'],
      [{ maxTurn: 3 }, 'maxTurn'],
    ];
    for (const [options, words] of cases) {
      const r = await refused({ message: 'hi', options: { token, ...options } });
      expect(r.status).toBe(400);
      expect(r.body.error).toBe('invalid_request');
      expect(String(r.body.message)).toContain(words);
    }
  });
});

describe('a client that leaves', () => {
  it('mid-run over SSE: the upstream sees the close, no reservation or lease is left, what was produced is charged', async () => {
    const u = await user();
    const abort = new AbortController();
    gw.upstreams.anthropic!.requests.length = 0;
    const res = await prompt({ message: 'Long [[words:400]] [[delay:20]]', options: { token: u.token, model: MODEL } }, { sse: true, signal: abort.signal });
    const reader = res.body!.getReader();
    const decoder = new SseDecoder();
    let chunks = 0;
    while (chunks < 5) {
      const { value } = await reader.read();
      chunks += decoder.push(value!).filter((e) => e.data.includes('"assistant"')).length;
    }
    abort.abort();
    await expect.poll(async () => (await u.usage()).reserved, { timeout: 8_000, interval: 100 }).toEqual({ ai: 0, compute: 0 });
    const usage = await u.usage();
    expect(usage.openHolds).toBe(0);
    expect(usage.used.ai).toBeGreaterThan(0);
    expect(usage.used.compute).toBeGreaterThanOrEqual(1);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    await expect.poll(() => gw.upstreams.anthropic!.requests.at(-1)?.outcome, { timeout: 5_000 }).toBe('client_closed');
  });

  it('at any moment of a JSON run (admission, model call, tool): the process stays up, nothing is left held', async () => {
    for (const waitMs of [5, 150, 600]) {
      const u = await user();
      const abort = new AbortController();
      const pending = prompt(
        { message: 'Slow [[1> tool:get_weather {"city":"Rome"}]] [[latency:300]]', options: { token: u.token, model: MODEL, tools: [weather()] } },
        { signal: abort.signal },
      );
      setTimeout(() => abort.abort(), waitMs);
      await pending.then((res) => res.text()).catch(() => undefined);
      await expect.poll(async () => (await u.usage()).reserved, { timeout: 8_000, interval: 100 }).toEqual({ ai: 0, compute: 0 });
      expect((await u.usage()).openHolds).toBe(0);
      await expect.poll(async () => liveLeases(gw.developerId), { timeout: 3_000, interval: 50 }).toEqual([]);
    }
    expect((await fetch(`${gw.url}/health`)).status).toBe(200);
  });
});

/**
 * The limits on tools (docs/prompt.md, "Limits on tools"), end to end: the simulated model asks for 300 tool calls in
 * one turn, an MCP server offers a tool whose schema no request could carry, and options name servers and keys that
 * would blur or lose what they configure.
 */
describe('limits on tools', () => {
  it(`300 tool calls in one turn: ${MAX_TOOL_CALLS_PER_TURN} run, never more than ${MAX_PARALLEL_TOOL_CALLS} calls at once to the tool host; the rest are is_error`, async () => {
    const counting = await countingToolServer({ together: MAX_PARALLEL_TOOL_CALLS, total: MAX_TOOL_CALLS_PER_TURN });
    try {
      const u = await user();
      const asked = 300;
      const directives = Array.from({ length: asked }, (_, n) => `[[1> tool:count {"n":${n}}]]`).join(' ');
      const answer = await run(u.token, `Count ${directives}`, {
        tools: [
          { name: 'count', description: 'Counts', input_schema: { type: 'object', properties: { n: { type: 'number' } } }, url: `${counting.url}/count` },
        ],
      });
      expect(answer.result).toMatchObject({ subtype: 'success', num_turns: 2 });
      expect(counting.stats).toMatchObject({ calls: MAX_TOOL_CALLS_PER_TURN, maxInFlight: MAX_PARALLEL_TOOL_CALLS });
      // Sockets: a call's socket goes back to the pool a moment after its answer is read, while the next call starts at
      // once, so the pool grows once to a second set (16 sockets on every run measured), then reuses them.
      expect(counting.stats.maxSockets).toBeLessThanOrEqual(2 * MAX_PARALLEL_TOOL_CALLS);
      const results = answer.messages.filter((m) => m.type === 'tool_result');
      expect(results).toHaveLength(asked);
      expect(results.filter((m) => m.is_error === false).map((m) => m.text)).toEqual(Array.from({ length: MAX_TOOL_CALLS_PER_TURN }, (_, n) => `counted ${n}`));
      expect(results.filter((m) => m.is_error === true).map((m) => m.text)).toEqual(
        Array.from(
          { length: asked - MAX_TOOL_CALLS_PER_TURN },
          () =>
            `Not run: this turn asked for ${asked} tool calls, and at most ${MAX_TOOL_CALLS_PER_TURN} are run per turn; ask for this one again in a later turn`,
        ),
      );
      expect((await u.usage()).used.ai).toBe(answer.result.total_cost_microdollars);
    } finally {
      counting.server.closeAllConnections();
      counting.server.close();
    }
  });

  it('an MCP tool whose input_schema nests 5,000 levels is skipped with the reason; the run goes on with the others and nothing stays held', async () => {
    const absurd = await absurdMcpServer();
    try {
      const u = await user();
      gw.upstreams.anthropic!.requests.length = 0;
      const answer = await run(u.token, 'Add [[1> tool:mcp__absurd__add {"a":2,"b":3}]]', {
        mcpServers: { absurd: { type: 'http', url: `${absurd.url}/mcp` } },
      });
      expect(answer.result).toMatchObject({ subtype: 'success', text: 'Tool results: 5' });
      expect(answer.result.mcp_servers).toEqual([
        {
          name: 'absurd',
          status: 'connected',
          tools: 1,
          skipped: [{ tool: 'deep', reason: `input_schema nests deeper than ${MAX_TOOL_SCHEMA_DEPTH} levels` }],
        },
      ]);
      expect((gw.upstreams.anthropic!.requests[0]!.body as { tools: { name: string }[] }).tools.map((t) => t.name)).toEqual(['mcp__absurd__add']);
      const usage = await u.usage();
      expect({ used: usage.used.ai, reserved: usage.reserved.ai, openHolds: usage.openHolds }).toEqual({
        used: answer.result.total_cost_microdollars,
        reserved: 0,
        openHolds: 0,
      });
    } finally {
      absurd.server.closeAllConnections();
      absurd.server.close();
    }
  });

  it('options naming an MCP server with "__", or keys that are not plain data: 400 naming the path, before any run', async () => {
    const token = (await user()).token;
    const server = { type: 'http', url: `${mcp.url}/mcp` };
    const notData = "is not a plain data key (it would set or shadow an object's prototype)";
    const cases: [string, string][] = [
      [
        JSON.stringify({ mcpServers: { a__b: server } }),
        'options.mcpServers.a__b: MCP server name "a__b" contains "__", which separates the server from the tool in mcp__<server>__<tool>: allowedTools and disallowedTools could not tell its tools from another server\'s',
      ],
      [`{"mcpServers":{"__proto__":${JSON.stringify(server)}}}`, `options.mcpServers.__proto__: "__proto__" is not allowed as a key: it ${notData}`],
      [
        `{"mcpServers":{"constructor":${JSON.stringify(server)}}}`,
        `options.mcpServers.constructor: "constructor" is not allowed as an MCP server name: it ${notData}`,
      ],
      [
        `{"tools":[{"name":"t","input_schema":{"type":"object"},"url":"${tools.url}/weather","headers":{"prototype":"x"}}]}`,
        `options.tools.0.headers.prototype: "prototype" is not allowed as a header name: it ${notData}`,
      ],
      [
        `{"tools":[{"name":"t","input_schema":{"type":"object","properties":{"__proto__":{"type":"string"}}},"url":"${tools.url}/weather"}]}`,
        `options.tools.0.input_schema.properties.__proto__: "__proto__" is not allowed as a key: it ${notData}`,
      ],
      [
        '{"outputFormat":{"type":"json_schema","schema":{"type":"object","__proto__":{"required":["x"]}}}}',
        `options.outputFormat.schema.__proto__: "__proto__" is not allowed as a key: it ${notData}`,
      ],
    ];
    for (const [options, message] of cases) {
      // Spread copies a parsed "__proto__" as an own key, so it is sent as written.
      const res = await prompt({ message: 'hi', options: { token, ...(JSON.parse(options) as object) } });
      expect({ status: res.status, body: await res.json() }).toEqual({ status: 400, body: { error: 'invalid_request', message } });
    }
  });
});
