import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it } from 'vitest';
import { ensureTables } from '../../bin/local/dynamodb.ts';
import type { SessionOptions } from '../../lambdas/agent/options.ts';
import { INTERRUPTED, type RunEvent } from '../../lambdas/agent/result.ts';
import { runAgentSegment, type RunOutcome } from '../../lambdas/agent/run.ts';
import { TOOL_USER_AGENT } from '../../lambdas/agent/tools/http.ts';
import { MAX_PARALLEL_TOOL_CALLS, MAX_TOOL_CALLS_PER_TURN } from '../../lambdas/agent/tools/limits.ts';
import type { Caller } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { estimateInputTokens } from '../../lambdas/metering/estimate.ts';
import { MIN_OUTPUT_TOKENS } from '../../lambdas/metering/reservation.ts';
import { createDeveloper, createProject, setModelPricing } from '../../lambdas/registry/registry.ts';
import { mcpServer } from '../support/tool-servers.ts';

/**
 * The agent loop (lambdas/agent/run.ts) on its own: no gateway in front, the real metered call (metering/call.ts)
 * underneath, reserving and settling in DynamoDB Local tables of this file's own. The model is a small Anthropic
 * Messages API upstream written inline here: each test scripts its answers (SSE), and every request it receives is
 * recorded, so a test asserts what the loop sent to the model, not only what it returned. HTTP tools are a small
 * tool server here too. The run's clock is injected (`now`), advanced by the servers as they answer, so durations are
 * exact; aborts fire on events (a text delta, a request received), never after a sleep.
 *
 * Prices: the project prices MODEL at $1 per million input tokens and $10 per million output tokens — 1 and 10
 * microdollars a token — so every charge below is input + 10 × output.
 */

const MODEL = 'claude-loop-test';
const IN_MICROS = 1;
const OUT_MICROS = 10;
const T0 = Date.parse('2031-05-10T08:00:00.000Z');
/** What the injected clock moves per model call and per tool call. */
const MODEL_MS = 1_000;
const TOOL_MS = 250;

let clock = T0;
const now = () => clock;

// ——— The model: an inline Anthropic Messages upstream ———

type Block = { type: 'text'; text: string | string[] } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };
type Usage = { input_tokens: number; output_tokens: number; cache_read_input_tokens?: number };
type Answer =
  /** A whole streamed message. A text given as pieces is sent as one delta each. */
  | { content: Block[]; stop: 'end_turn' | 'tool_use' | 'max_tokens'; usage: Usage }
  /** The start of a message (input reported), these text deltas, then nothing more until the client goes away. */
  | { stall: string[]; input_tokens: number }
  /** No answer at all: `received` is called once the request is in, and the response never starts. */
  | { hold: () => void }
  /** An error response. */
  | { status: number; type: string; message: string };

interface Recorded {
  headers: IncomingHttpHeaders;
  body: Record<string, unknown> & { messages: Anthropic.MessageParam[] };
}

const upstream = { answers: [] as Answer[], requests: [] as Recorded[] };
let upstreamServer: Server;

function sse(res: ServerResponse, event: { type: string } & Record<string, unknown>): void {
  res.write(`event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`);
}

function messageStart(res: ServerResponse, usage: Usage): void {
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  sse(res, {
    type: 'message_start',
    message: {
      id: `msg_${upstream.requests.length}`,
      type: 'message',
      role: 'assistant',
      model: MODEL,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: {
        input_tokens: usage.input_tokens,
        output_tokens: 1,
        cache_read_input_tokens: usage.cache_read_input_tokens ?? 0,
        cache_creation_input_tokens: 0,
      },
    },
  });
}

function answer(res: ServerResponse, next: Answer | undefined): void {
  if (!next) {
    res.writeHead(500, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ type: 'error', error: { type: 'api_error', message: 'the test scripted no answer for this request' } }));
    return;
  }
  if ('hold' in next) {
    next.hold();
    return;
  }
  if ('status' in next) {
    res.writeHead(next.status, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ type: 'error', error: { type: next.type, message: next.message } }));
    return;
  }
  if ('stall' in next) {
    messageStart(res, { input_tokens: next.input_tokens, output_tokens: 1 });
    sse(res, { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } });
    for (const text of next.stall) sse(res, { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text } });
    return;
  }
  messageStart(res, next.usage);
  next.content.forEach((block, index) => {
    if (block.type === 'text') {
      sse(res, { type: 'content_block_start', index, content_block: { type: 'text', text: '' } });
      for (const text of typeof block.text === 'string' ? [block.text] : block.text) {
        sse(res, { type: 'content_block_delta', index, delta: { type: 'text_delta', text } });
      }
    } else {
      sse(res, { type: 'content_block_start', index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } });
      // The input arrives in two JSON fragments, as a real stream cuts it.
      const json = JSON.stringify(block.input);
      const half = Math.ceil(json.length / 2);
      for (const partial_json of [json.slice(0, half), json.slice(half)]) {
        sse(res, { type: 'content_block_delta', index, delta: { type: 'input_json_delta', partial_json } });
      }
    }
    sse(res, { type: 'content_block_stop', index });
  });
  sse(res, { type: 'message_delta', delta: { stop_reason: next.stop, stop_sequence: null }, usage: { output_tokens: next.usage.output_tokens } });
  sse(res, { type: 'message_stop' });
  res.end();
}

// ——— The HTTP tools: an inline tool server ———

const TEMPERATURES: Record<string, string> = { Paris: '18°C', Oslo: '7°C' };
const tools = {
  calls: [] as { path: string; headers: IncomingHttpHeaders; body: unknown }[],
  onHang: (): void => undefined,
  /** A call to /held: the test answers it (by default at once). */
  onHeld: (res: ServerResponse, body: { city?: string }): void => void res.end(`held ${body.city}`),
};
let toolServer: Server;
let toolBase: string;
/** A port nothing listens on: a tool there is refused at connect. */
let closedPort: number;

function tool(req: IncomingMessage, res: ServerResponse, raw: string): void {
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  const body = JSON.parse(raw) as { city?: string };
  tools.calls.push({ path, headers: req.headers, body });
  clock += TOOL_MS;
  switch (path) {
    case '/weather':
      res.end(`${TEMPERATURES[body.city ?? ''] ?? 'unknown'} in ${body.city}`);
      return;
    case '/fail':
      res.writeHead(503).end('overloaded, try later');
      return;
    case '/garbled':
      res.writeHead(200, { 'content-type': 'application/json' }).end('{"celsius": 18,');
      return;
    case '/hang':
      tools.onHang();
      return;
    case '/held':
      tools.onHeld(res, body);
      return;
    default:
      res.writeHead(404).end('no such tool');
  }
}

function readBody(req: IncomingMessage, then: (raw: string) => void): void {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => then(Buffer.concat(chunks).toString('utf8')));
}

async function listen(server: Server): Promise<number> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return (server.address() as AddressInfo).port;
}

async function close(server: Server | undefined): Promise<void> {
  if (!server) return;
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
}

// ——— The store: this file's own tables, a developer, a project pricing MODEL ———

let projectId: string;
let users = 0;
const environmentBefore = { ...process.env };

beforeAll(async () => {
  upstreamServer = createServer((req, res) =>
    readBody(req, (raw) => {
      upstream.requests.push({ headers: req.headers, body: JSON.parse(raw) as Recorded['body'] });
      clock += MODEL_MS;
      answer(res, upstream.answers.shift());
    }),
  );
  toolServer = createServer((req, res) => readBody(req, (raw) => tool(req, res, raw)));
  const closed = createServer();
  [closedPort] = await Promise.all([listen(closed), listen(upstreamServer), listen(toolServer).then((port) => (toolBase = `http://127.0.0.1:${port}`))]);
  await close(closed);

  const dynamoEndpoint = inject('dynamoEndpoint');
  const tables = await ensureTables(dynamoEndpoint, `r${randomBytes(5).toString('hex')}`);
  Object.assign(process.env, {
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'local',
    AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'local',
    DYNAMODB_ENDPOINT: dynamoEndpoint,
    ...tables,
    ANTHROPIC_BASE_URL: `http://127.0.0.1:${(upstreamServer.address() as AddressInfo).port}`,
    ANTHROPIC_API_KEY: 'sk-ant-run-test',
    // The tool server is on loopback, which the outbound guard lets through only in tests and the local runtime.
    ALLOW_LOOPBACK_URLS: '1',
    SECRET_CACHE_SECONDS: '0',
  });
  resetInstanceState();
  const developerId = `dev-${randomBytes(4).toString('hex')}`;
  await createDeveloper({ developerId, planSeconds: 1_000_000 });
  projectId = (await createProject({ developerId })).projectId;
  await setModelPricing(projectId, MODEL, { inputUsdPerMtok: IN_MICROS, outputUsdPerMtok: OUT_MICROS });
});

afterAll(async () => {
  await Promise.all([close(upstreamServer), close(toolServer)]);
  // Workers keep their process from file to file: give back the environment as it was.
  for (const key of Object.keys(process.env)) if (!(key in environmentBefore)) delete process.env[key];
  Object.assign(process.env, environmentBefore);
  resetInstanceState();
});

beforeEach(() => {
  clock = T0;
  upstream.answers = [];
  upstream.requests = [];
  tools.calls = [];
  tools.onHang = () => undefined;
  tools.onHeld = (res, body) => void res.end(`held ${body.city}`);
});

// ——— Running the loop ———

const WEATHER_SCHEMA = { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] };
const weatherTool = (path = '/weather', name = 'get_weather') => ({
  name,
  description: 'Weather of a city',
  input_schema: WEATHER_SCHEMA,
  url: `${toolBase}${path}`,
  headers: { 'x-tool-key': 'tk-secret-4242' },
});
/** A tool as the loop offers it to the model: its url and headers stay in the gateway. */
const offered = (name = 'get_weather') => ({ name, description: 'Weather of a city', input_schema: WEATHER_SCHEMA });

const text = (t: string | string[]): Block => ({ type: 'text', text: t });
const call = (id: string, name: string, input: Record<string, unknown>): Block => ({ type: 'tool_use', id, name, input });
const toolUse = (id: string, name: string, input: Record<string, unknown>) => ({ type: 'tool_use', id, name, input });
const toolResult = (tool_use_id: string, content: string, isError = false) => ({
  type: 'tool_result',
  tool_use_id,
  content,
  ...(isError ? { is_error: true } : {}),
});

function caller(ai = 10_000_000): Caller {
  return { projectId, userId: `run-${++users}`, budget: { ai, compute: 0, window: 'day' }, expiresAt: Math.floor(T0 / 1000) + 3600 };
}

async function run(message: string, options: SessionOptions, opts: { ai?: number; signal?: AbortSignal; onEvent?: (event: RunEvent) => void } = {}) {
  const who = caller(opts.ai);
  const streamed: RunEvent[] = [];
  const outcome = await runAgentSegment({
    caller: who,
    message,
    options: { model: MODEL, ...options },
    deadline: T0 + 600_000,
    signal: opts.signal ?? new AbortController().signal,
    now,
    onEvent: (event) => {
      streamed.push(event);
      opts.onEvent?.(event);
    },
  });
  if (outcome.kind !== 'ended') throw new Error('the run paused');
  expect(streamed).toEqual(outcome.events);
  return { ...(outcome as Extract<RunOutcome, { kind: 'ended' }>), caller: who };
}

/** What the ledger holds for the run's user once it has returned: every call settled, nothing held. */
async function ledger(who: Caller) {
  const usage = await readUsage(who);
  return { used: usage.used.ai, reserved: usage.reserved.ai, openHolds: usage.openHolds };
}

const requestBody = (i: number) => upstream.requests[i]!.body;
/** The largest max_tokens whose worst case (input bound × input price + max_tokens × output price) fits `capMicros`. */
const clampFor = (capMicros: number, body: Recorded['body']) => Math.floor((capMicros - estimateInputTokens(body) * IN_MICROS) / OUT_MICROS);

// ——— The tests ———

describe('a normal run', () => {
  it('one tool round-trip: the tool gets the input, the model gets the result, the figures are the two calls’ sum', async () => {
    upstream.answers = [
      {
        content: [text('Let me check.'), call('toolu_w1', 'get_weather', { city: 'Paris' })],
        stop: 'tool_use',
        usage: { input_tokens: 120, output_tokens: 25 },
      },
      { content: [text(['It is ', '18°C in Paris.'])], stop: 'end_turn', usage: { input_tokens: 160, cache_read_input_tokens: 40, output_tokens: 12 } },
    ];
    const out = await run('What is the weather in Paris?', { systemPrompt: 'Answer briefly.', tools: [weatherTool()] });

    // The first request: the message, the system prompt, the tool as offered (no url, no headers), streamed.
    expect(requestBody(0)).toEqual({
      model: MODEL,
      max_tokens: 8_192,
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
      stream: true,
      system: 'Answer briefly.',
      tools: [offered()],
    });
    expect(upstream.requests[0]!.headers['x-api-key']).toBe('sk-ant-run-test');
    // The tool was POSTed the model's input as JSON, with its headers and the gateway's user-agent.
    expect(tools.calls).toEqual([
      {
        path: '/weather',
        body: { city: 'Paris' },
        headers: expect.objectContaining({ 'content-type': 'application/json', 'user-agent': TOOL_USER_AGENT, 'x-tool-key': 'tk-secret-4242' }),
      },
    ]);
    // The second request: the conversation with the model's turn and the tool's result.
    expect(requestBody(1).messages).toEqual([
      { role: 'user', content: 'What is the weather in Paris?' },
      { role: 'assistant', content: [{ type: 'text', text: 'Let me check.' }, toolUse('toolu_w1', 'get_weather', { city: 'Paris' })] },
      { role: 'user', content: [toolResult('toolu_w1', '18°C in Paris')] },
    ]);
    expect(upstream.requests).toHaveLength(2);

    expect(out.events).toEqual([
      { type: 'assistant', subtype: 'text', text: 'Let me check.' },
      { type: 'tool_use', subtype: 'http', id: 'toolu_w1', name: 'get_weather', input: { city: 'Paris' } },
      { type: 'tool_result', subtype: 'http', tool_use_id: 'toolu_w1', name: 'get_weather', is_error: false, text: '18°C in Paris' },
      { type: 'assistant', subtype: 'text', text: 'It is ' },
      { type: 'assistant', subtype: 'text', text: '18°C in Paris.' },
    ]);
    // (120 + 10 × 25) + (160 + 40 cache reads + 10 × 12) = 370 + 320; cache reads count as input.
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'success',
      is_error: false,
      text: 'It is 18°C in Paris.',
      total_cost_usd: 0.00069,
      total_cost_microdollars: 690,
      duration_secs: (2 * MODEL_MS + TOOL_MS) / 1000,
      num_turns: 2,
      usage: { input_tokens: 320, output_tokens: 37 },
      model: MODEL,
    });
    expect(await ledger(out.caller)).toEqual({ used: 690, reserved: 0, openHolds: 0 });
  });
});

describe('max turns', () => {
  it('maxTurns model calls without a final answer end the run with error_max_turns and the last turn’s text', async () => {
    upstream.answers = [
      { content: [text('Paris first.'), call('toolu_1', 'get_weather', { city: 'Paris' })], stop: 'tool_use', usage: { input_tokens: 100, output_tokens: 20 } },
      { content: [text('Now Oslo.'), call('toolu_2', 'get_weather', { city: 'Oslo' })], stop: 'tool_use', usage: { input_tokens: 150, output_tokens: 20 } },
    ];
    const out = await run('Compare Paris and Oslo.', { tools: [weatherTool()], maxTurns: 2 });

    expect(upstream.requests).toHaveLength(2);
    expect(requestBody(1).messages.at(-1)).toEqual({ role: 'user', content: [toolResult('toolu_1', '18°C in Paris')] });
    expect(tools.calls.map((c) => c.body)).toEqual([{ city: 'Paris' }, { city: 'Oslo' }]);
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_max_turns',
      is_error: true,
      text: 'Now Oslo.',
      total_cost_usd: 0.00065,
      total_cost_microdollars: 650,
      duration_secs: (2 * MODEL_MS + 2 * TOOL_MS) / 1000,
      num_turns: 2,
      usage: { input_tokens: 250, output_tokens: 40 },
      model: MODEL,
      error: 'The run reached maxTurns (2) before a final answer',
    });
    // The second tool's result is in the conversation the run ends with, ready for a next turn.
    expect(out.state.conversation.at(-1)).toEqual({ role: 'user', content: [toolResult('toolu_2', '7°C in Oslo')] });
    expect(out.state.turns).toBe(2);
  });
});

describe('budget', () => {
  it('maxBudgetUsd: max_tokens is lowered to fit; when what is left cannot pay the next call, error_max_budget_usd before calling', async () => {
    const cap = 10_000; // maxBudgetUsd 0.01
    upstream.answers = [
      { content: [text('Checking.'), call('toolu_1', 'get_weather', { city: 'Paris' })], stop: 'tool_use', usage: { input_tokens: 200, output_tokens: 880 } },
    ];
    const out = await run('What is the weather in Paris?', { tools: [weatherTool()], maxBudgetUsd: cap / 1_000_000 });

    // The first call's worst case was fitted into the cap.
    const clamped = clampFor(cap, requestBody(0));
    expect(clamped).toBeGreaterThanOrEqual(880);
    expect(clamped).toBeLessThan(8_192);
    expect(requestBody(0).max_tokens).toBe(clamped);
    // It cost 200 + 10 × 880 = 9,000; the 1,000 left cannot pay the next call's smallest form (MIN_OUTPUT_TOKENS output tokens).
    const nextInput = estimateInputTokens({ model: MODEL, messages: out.state.conversation, tools: [offered()] });
    expect(upstream.requests).toHaveLength(1);
    expect(tools.calls).toHaveLength(1);
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_max_budget_usd',
      is_error: true,
      text: 'Checking.',
      total_cost_usd: 0.009,
      total_cost_microdollars: 9_000,
      duration_secs: (MODEL_MS + TOOL_MS) / 1000,
      // The refused call was never made.
      num_turns: 1,
      usage: { input_tokens: 200, output_tokens: 880 },
      model: MODEL,
      error: `The run's remaining budget (1000 microdollars) cannot pay for even the smallest form of the next model call (up to ${nextInput * IN_MICROS + MIN_OUTPUT_TOKENS * OUT_MICROS})`,
    });
    expect(await ledger(out.caller)).toEqual({ used: 9_000, reserved: 0, openHolds: 0 });
  });

  it('maxBudgetUsd: an answer cut short by the lowered max_tokens ends the run with error_max_budget_usd', async () => {
    const cap = 5_000;
    upstream.answers = [{ content: [text('Once upon a time')], stop: 'max_tokens', usage: { input_tokens: 100, output_tokens: 300 } }];
    const out = await run('Write a long story.', { maxBudgetUsd: cap / 1_000_000 });

    const clamped = clampFor(cap, requestBody(0));
    expect(requestBody(0)).toEqual({ model: MODEL, max_tokens: clamped, messages: [{ role: 'user', content: 'Write a long story.' }], stream: true });
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_max_budget_usd',
      is_error: true,
      text: 'Once upon a time',
      total_cost_usd: 0.0031,
      total_cost_microdollars: 3_100,
      duration_secs: MODEL_MS / 1000,
      num_turns: 1,
      usage: { input_tokens: 100, output_tokens: 300 },
      model: MODEL,
      error: `maxBudgetUsd left room for only ${clamped} output tokens, and the answer needed more`,
    });
  });

  it("the user's AI budget: the metered call refuses the next turn, error_during_execution with the refusal's words", async () => {
    const first = { model: MODEL, messages: [{ role: 'user' as const, content: 'What is the weather in Paris?' }], tools: [offered()] };
    // Room for the first call's worst case (8,192 output tokens) and 500 more.
    const budget = estimateInputTokens(first) * IN_MICROS + 8_192 * OUT_MICROS + 500;
    upstream.answers = [
      { content: [text('Checking.'), call('toolu_1', 'get_weather', { city: 'Paris' })], stop: 'tool_use', usage: { input_tokens: 100, output_tokens: 8_190 } },
    ];
    const out = await run('What is the weather in Paris?', { tools: [weatherTool()] }, { ai: budget });

    expect(requestBody(0)).toEqual({ ...first, max_tokens: 8_192, stream: true });
    const left = budget - 82_000;
    const smallest = estimateInputTokens({ model: MODEL, messages: out.state.conversation, tools: [offered()] }) * IN_MICROS + MIN_OUTPUT_TOKENS * OUT_MICROS;
    expect(smallest).toBeGreaterThan(left);
    expect(upstream.requests).toHaveLength(1);
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      text: 'Checking.',
      total_cost_usd: 0.082,
      total_cost_microdollars: 82_000,
      duration_secs: (MODEL_MS + TOOL_MS) / 1000,
      // The refused call counts as a turn: only the run's own cap (above) refuses before one.
      num_turns: 2,
      usage: { input_tokens: 100, output_tokens: 8_190 },
      model: MODEL,
      error: expect.stringMatching(
        new RegExp(
          `^AI budget too low for this request: ${left} of ${budget} microdollars remain in the current day window \\(started [^)]+\\), and even its smallest form costs up to ${smallest}; it resets at \\S+$`,
        ),
      ),
    });
    expect(await ledger(out.caller)).toEqual({ used: 82_000, reserved: 0, openHolds: 0 });
  });
});

describe('structured output', () => {
  const outputFormat = {
    type: 'json_schema' as const,
    schema: { type: 'object', properties: { celsius: { type: 'number' } }, required: ['celsius'], additionalProperties: false },
  };
  const correction = (problem: string) => ({
    role: 'user',
    content: `Your answer does not match the required JSON Schema: ${problem}. Answer again with only a JSON value that matches the schema, nothing else.`,
  });

  it('a valid answer first time: success with structured_output', async () => {
    upstream.answers = [{ content: [text('{"celsius": 18}')], stop: 'end_turn', usage: { input_tokens: 50, output_tokens: 8 } }];
    const out = await run('Paris, in JSON.', { outputFormat });

    // The schema is the gateway's to check: nothing of it goes to the model.
    expect(requestBody(0)).toEqual({ model: MODEL, max_tokens: 8_192, messages: [{ role: 'user', content: 'Paris, in JSON.' }], stream: true });
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'success',
      is_error: false,
      text: '{"celsius": 18}',
      total_cost_usd: 0.00013,
      total_cost_microdollars: 130,
      duration_secs: MODEL_MS / 1000,
      num_turns: 1,
      usage: { input_tokens: 50, output_tokens: 8 },
      model: MODEL,
      structured_output: { celsius: 18 },
    });
  });

  it('an invalid answer is corrected once, then a fenced valid one is the structured output', async () => {
    upstream.answers = [
      { content: [text('It is 18 degrees.')], stop: 'end_turn', usage: { input_tokens: 50, output_tokens: 6 } },
      { content: [text('```json\n{"celsius": 18}\n```')], stop: 'end_turn', usage: { input_tokens: 90, output_tokens: 10 } },
    ];
    const out = await run('Paris, in JSON.', { outputFormat });

    expect(requestBody(1).messages).toEqual([
      { role: 'user', content: 'Paris, in JSON.' },
      { role: 'assistant', content: [{ type: 'text', text: 'It is 18 degrees.' }] },
      correction('the answer is not valid JSON'),
    ]);
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'success',
      is_error: false,
      text: '```json\n{"celsius": 18}\n```',
      total_cost_usd: 0.0003,
      total_cost_microdollars: 300,
      duration_secs: (2 * MODEL_MS) / 1000,
      num_turns: 2,
      usage: { input_tokens: 140, output_tokens: 16 },
      model: MODEL,
      structured_output: { celsius: 18 },
    });
    expect(out.state.corrections).toBe(1);
  });

  it('after 2 corrections a third invalid answer ends the run with error_max_structured_output_retries', async () => {
    upstream.answers = [
      { content: [text('{"celsius": "warm"}')], stop: 'end_turn', usage: { input_tokens: 50, output_tokens: 6 } },
      { content: [text('Sorry, 18.')], stop: 'end_turn', usage: { input_tokens: 80, output_tokens: 4 } },
      { content: [text('{"kelvin": 291}')], stop: 'end_turn', usage: { input_tokens: 110, output_tokens: 6 } },
    ];
    const out = await run('Paris, in JSON.', { outputFormat });

    expect(upstream.requests).toHaveLength(3);
    expect(requestBody(1).messages.at(-1)).toEqual(correction('/celsius must be number'));
    expect(requestBody(2).messages.at(-1)).toEqual(correction('the answer is not valid JSON'));
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_max_structured_output_retries',
      is_error: true,
      text: '{"kelvin": 291}',
      total_cost_usd: 0.0004,
      total_cost_microdollars: 400,
      duration_secs: (3 * MODEL_MS) / 1000,
      num_turns: 3,
      usage: { input_tokens: 240, output_tokens: 16 },
      model: MODEL,
      // The first problem only: collecting every error of a large answer against a large schema is unbounded work
      // (agent/structured-output.ts).
      error: "(root) must have required property 'celsius'",
    });
    expect(out.state.corrections).toBe(2);
  });
});

describe('tool errors: the model reads them as is_error results, and the run goes on', () => {
  it.each([
    { label: 'an HTTP tool answering 503', path: '/fail', called: 'get_weather', content: () => 'HTTP 503: overloaded, try later', isError: true, hits: 1 },
    {
      label: 'an HTTP tool whose port refuses the connection',
      path: 'closed',
      called: 'get_weather',
      content: () => `fetch failed: connect ECONNREFUSED 127.0.0.1:${closedPort}`,
      isError: true,
      hits: 0,
    },
    {
      label: 'an HTTP tool answering 200 with invalid JSON (its text is the result, not an error)',
      path: '/garbled',
      called: 'get_weather',
      content: () => '{"celsius": 18,',
      isError: false,
      hits: 1,
    },
    {
      label: 'a tool name that was never offered',
      path: '/weather',
      called: 'get_forecast',
      content: () => 'No tool named "get_forecast" is available in this run',
      isError: true,
      hits: 0,
    },
  ])('$label', async ({ path, called: name, content, isError, hits }) => {
    const spec = path === 'closed' ? { ...weatherTool(), url: `http://127.0.0.1:${closedPort}/weather` } : weatherTool(path);
    const expected = content();
    upstream.answers = [
      { content: [text('Trying.'), call('toolu_e', name, { city: 'Paris' })], stop: 'tool_use', usage: { input_tokens: 100, output_tokens: 10 } },
      { content: [text('No weather today.')], stop: 'end_turn', usage: { input_tokens: 130, output_tokens: 5 } },
    ];
    const out = await run('What is the weather in Paris?', { tools: [spec] });

    expect(requestBody(0).tools).toEqual([offered()]);
    expect(tools.calls).toHaveLength(hits);
    // What the model is told.
    expect(requestBody(1).messages.at(-1)).toEqual({ role: 'user', content: [toolResult('toolu_e', expected, isError)] });
    expect(out.events.filter((e) => e.type !== 'assistant')).toEqual([
      { type: 'tool_use', subtype: 'http', id: 'toolu_e', name, input: { city: 'Paris' } },
      { type: 'tool_result', subtype: 'http', tool_use_id: 'toolu_e', name, is_error: isError, text: expected },
    ]);
    // What the result says: the run succeeded with the model's answer after the failure.
    // The result: the run succeeded with the model's answer after the failure; (100 + 10 × 10) + (130 + 10 × 5).
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'success',
      is_error: false,
      text: 'No weather today.',
      total_cost_usd: 0.00038,
      total_cost_microdollars: 380,
      duration_secs: (2 * MODEL_MS + hits * TOOL_MS) / 1000,
      num_turns: 2,
      usage: { input_tokens: 230, output_tokens: 15 },
      model: MODEL,
    });
  });

  it('the upstream failing mid-run: error_during_execution with its message, the earlier turn charged', async () => {
    upstream.answers = [
      { content: [text('Checking.'), call('toolu_1', 'get_weather', { city: 'Paris' })], stop: 'tool_use', usage: { input_tokens: 100, output_tokens: 10 } },
      { status: 529, type: 'overloaded_error', message: 'Overloaded' },
    ];
    const out = await run('What is the weather in Paris?', { tools: [weatherTool()] });
    expect(upstream.requests).toHaveLength(2);
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      text: 'Checking.',
      // The failed call cost nothing.
      total_cost_usd: 0.0002,
      total_cost_microdollars: 200,
      duration_secs: (2 * MODEL_MS + TOOL_MS) / 1000,
      num_turns: 2,
      usage: { input_tokens: 100, output_tokens: 10 },
      model: MODEL,
      error: 'Anthropic is overloaded: Overloaded',
    });
    expect(out.refusedAsInvalid).toBeUndefined();
  });
});

describe("abort: the caller's signal", () => {
  it.each([
    { reason: undefined, subtype: 'error_during_execution', error: 'The run was stopped: the client went away' },
    { reason: 'Cancelled by its owner', subtype: 'error_during_execution', error: 'Cancelled by its owner' },
    { reason: INTERRUPTED, subtype: 'interrupted', error: INTERRUPTED },
  ])('mid-stream (reason $reason): what was said is kept and charged, the call stops', async ({ reason, subtype, error }) => {
    const controller = new AbortController();
    upstream.answers = [{ stall: ['Let me think ', 'about Paris'], input_tokens: 80 }];
    const out = await run(
      'What is the weather in Paris?',
      {},
      {
        signal: controller.signal,
        onEvent: (event) => {
          if (event.type === 'assistant' && event.text === 'about Paris') controller.abort(reason);
        },
      },
    );

    // Output: the larger of the deltas (2) and their characters / 4 (24 / 4): 6 tokens; 80 + 10 × 6.
    expect(out.result).toEqual({
      type: 'result',
      subtype,
      is_error: true,
      text: 'Let me think about Paris',
      total_cost_usd: 0.00014,
      total_cost_microdollars: 140,
      duration_secs: MODEL_MS / 1000,
      num_turns: 1,
      usage: { input_tokens: 80, output_tokens: 6 },
      model: MODEL,
      error,
    });
    expect(out.state.conversation.at(-1)).toEqual({ role: 'assistant', content: [{ type: 'text', text: 'Let me think about Paris' }] });
    expect(await ledger(out.caller)).toEqual({ used: 140, reserved: 0, openHolds: 0 });
  });

  it('mid-call, before the answer starts: the input bound is charged, nothing was said', async () => {
    const controller = new AbortController();
    upstream.answers = [{ hold: () => controller.abort() }];
    const out = await run('What is the weather in Paris?', {}, { signal: controller.signal });

    const inputBound = estimateInputTokens(requestBody(0)) * IN_MICROS;
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      text: '',
      total_cost_usd: inputBound / 1_000_000,
      total_cost_microdollars: inputBound,
      duration_secs: MODEL_MS / 1000,
      num_turns: 1,
      // The tokens charged, as the charge counts them (the result and the charge tell the same story).
      usage: { input_tokens: estimateInputTokens(requestBody(0)), output_tokens: 0 },
      model: MODEL,
      error: 'The run was stopped: the client went away',
    });
    expect(await ledger(out.caller)).toEqual({ used: inputBound, reserved: 0, openHolds: 0 });
  });

  it('between turns, while a tool runs: the tool is abandoned, no next call, the conversation closes the open call', async () => {
    const controller = new AbortController();
    tools.onHang = () => controller.abort('Cancelled by its owner');
    upstream.answers = [
      { content: [text('Checking.'), call('toolu_h', 'get_weather', { city: 'Paris' })], stop: 'tool_use', usage: { input_tokens: 100, output_tokens: 10 } },
    ];
    const out = await run('What is the weather in Paris?', { tools: [weatherTool('/hang')] }, { signal: controller.signal });

    expect(upstream.requests).toHaveLength(1);
    expect(tools.calls).toHaveLength(1);
    expect(out.events.at(-1)).toEqual({ type: 'tool_result', subtype: 'http', tool_use_id: 'toolu_h', name: 'get_weather', is_error: true, text: 'aborted' });
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      text: 'Checking.',
      total_cost_usd: 0.0002,
      total_cost_microdollars: 200,
      duration_secs: (MODEL_MS + TOOL_MS) / 1000,
      num_turns: 1,
      usage: { input_tokens: 100, output_tokens: 10 },
      model: MODEL,
      error: 'Cancelled by its owner',
    });
    expect(out.state.conversation.at(-1)).toEqual({
      role: 'user',
      content: [toolResult('toolu_h', 'The turn was stopped before this tool returned', true)],
    });
  });

  it('before the first turn: no model call, nothing charged', async () => {
    const controller = new AbortController();
    controller.abort();
    const out = await run('What is the weather in Paris?', {}, { signal: controller.signal });
    expect(upstream.requests).toHaveLength(0);
    expect(out.result).toEqual({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      text: '',
      total_cost_usd: 0,
      total_cost_microdollars: 0,
      duration_secs: 0,
      num_turns: 0,
      usage: { input_tokens: 0, output_tokens: 0 },
      model: MODEL,
      error: 'The run was stopped: the client went away',
    });
  });
});

describe('tool calls per turn', () => {
  it(`70 calls in one turn: the first ${MAX_TOOL_CALLS_PER_TURN} run, at most ${MAX_PARALLEL_TOOL_CALLS} at once; the rest are is_error results saying so`, async () => {
    const asked = 70;
    // The tool server holds each call until MAX_PARALLEL_TOOL_CALLS are in (the last batch: until every call that runs
    // is in), so the most it ever holds at once is exactly what the gateway let run together.
    let held: Array<{ res: ServerResponse; city: string }> = [];
    let received = 0;
    let most = 0;
    tools.onHeld = (res, body) => {
      held.push({ res, city: body.city ?? '' });
      received++;
      most = Math.max(most, held.length);
      if (held.length === MAX_PARALLEL_TOOL_CALLS || received === MAX_TOOL_CALLS_PER_TURN) {
        for (const h of held) h.res.end(`ok ${h.city}`);
        held = [];
      }
    };
    const calls = Array.from({ length: asked }, (_, i) => call(`toolu_${i}`, 'get_weather', { city: `c${i}` }));
    upstream.answers = [
      { content: calls, stop: 'tool_use', usage: { input_tokens: 100, output_tokens: 700 } },
      { content: [text('Done.')], stop: 'end_turn', usage: { input_tokens: 900, output_tokens: 2 } },
    ];
    const out = await run('Weather everywhere?', { tools: [weatherTool('/held')] });

    expect(most).toBe(MAX_PARALLEL_TOOL_CALLS);
    expect(tools.calls).toHaveLength(MAX_TOOL_CALLS_PER_TURN);
    const capped = `Not run: this turn asked for ${asked} tool calls, and at most ${MAX_TOOL_CALLS_PER_TURN} are run per turn; ask for this one again in a later turn`;
    expect(requestBody(1).messages.at(-1)).toEqual({
      role: 'user',
      content: Array.from({ length: asked }, (_, i) =>
        i < MAX_TOOL_CALLS_PER_TURN ? toolResult(`toolu_${i}`, `ok c${i}`) : toolResult(`toolu_${i}`, capped, true),
      ),
    });
    expect(out.events.filter((e) => e.type === 'tool_result' && e.is_error)).toHaveLength(asked - MAX_TOOL_CALLS_PER_TURN);
    // (100 + 10 × 700) + (900 + 10 × 2)
    expect(out.result).toMatchObject({ subtype: 'success', text: 'Done.', total_cost_microdollars: 8_020, num_turns: 2 });
    expect(await ledger(out.caller)).toEqual({ used: 8_020, reserved: 0, openHolds: 0 });
  });
});

describe('allowedTools / disallowedTools and MCP servers', () => {
  let mcp: Awaited<ReturnType<typeof mcpServer>>;
  beforeAll(async () => {
    mcp = await mcpServer();
  });
  afterAll(async () => {
    await close(mcp?.server);
  });

  const offeredNames = () => (requestBody(0).tools as { name: string }[]).map((t) => t.name);

  it('"mcp__a" covers the tools of the configured server "a" only: not a server "a__b", nor a tool merely named under it', async () => {
    upstream.answers = [{ content: [text('Hi.')], stop: 'end_turn', usage: { input_tokens: 10, output_tokens: 1 } }];
    const server = { type: 'http' as const, url: `${mcp.url}/mcp` };
    const out = await run('Hi', {
      mcpServers: { a: server, a__b: server },
      tools: [weatherTool('/weather', 'mcp__a__lookalike')],
      allowedTools: ['mcp__a'],
    });
    expect(offeredNames()).toEqual(['mcp__a__add', 'mcp__a__secret']);
    expect(out.result.mcp_servers).toEqual([
      { name: 'a', status: 'connected', tools: 2 },
      { name: 'a__b', status: 'failed', tools: 0, error: 'server name must not contain "__", which separates the server from the tool' },
    ]);
  });

  it('"mcp__a__b" in disallowedTools leaves nothing of a server "a__b" offered', async () => {
    upstream.answers = [{ content: [text('Hi.')], stop: 'end_turn', usage: { input_tokens: 10, output_tokens: 1 } }];
    const server = { type: 'http' as const, url: `${mcp.url}/mcp` };
    await run('Hi', { mcpServers: { a__b: server, c: server }, disallowedTools: ['mcp__a__b', 'mcp__c__secret'] });
    expect(offeredNames()).toEqual(['mcp__c__add']);
  });
});
