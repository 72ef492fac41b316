import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import WebSocket from 'ws';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import {
  type ClientToolCall,
  createGatewayClient,
  GatewayError,
  type GatewayClientOptions,
  mintUserToken,
  type PromptMessage,
  type SessionError,
  SseParser,
  type SseEvent,
  type WebSocketConstructor,
} from '../../packages/client/src/index.ts';
import { Outbox } from '../../packages/client/src/session.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The owner's kit, end-user side (packages/client, DESIGN §10), against an in-process local gateway with simulated
 * upstreams: /prompt as JSON and as SSE (also split into 1-byte chunks), /incubate with its batch, polling and cancel,
 * /usage, typed errors with the gateway's exact bodies, and /ws sessions (the auth frame with no token in the URL,
 * client tools, interrupt, resume, part frames both ways, pacing under the frame rate). The SSE parser's chunk
 * splitting is tested alone too. The package comes from its source; test/clients/package.test.ts runs its tarball.
 */

let gw: TestGateway;
let seq = 0;
const MODEL = 'claude-sonnet-4-6';
const BUDGET = { ai: 10_000_000, compute: 3600, window: 'day' as const };

beforeAll(async () => {
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1' } });
});
afterAll(async () => {
  await gw?.stop();
});

/** A fresh user of the test project, with a token minted by the package. */
async function user(
  opts: { budget?: Partial<typeof BUDGET>; expiresIn?: number; origins?: string[]; now?: number; project?: { projectId: string; secret: string } } = {},
) {
  const id = `kit-${++seq}`;
  const project = opts.project ?? { projectId: gw.projectId, secret: gw.secret };
  const token = await mintUserToken({
    ...project,
    userId: id,
    budget: { ...BUDGET, ...opts.budget },
    expiresIn: opts.expiresIn ?? 3600,
    ...(opts.origins ? { origins: opts.origins } : {}),
    ...(opts.now ? { now: opts.now } : {}),
  });
  return { id, token };
}

function client(token: string, extra: Partial<GatewayClientOptions> = {}) {
  return createGatewayClient({ baseUrl: gw.url, token, WebSocket: WebSocket as unknown as WebSocketConstructor, ...extra });
}

async function refusal(promise: Promise<unknown>): Promise<GatewayError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(GatewayError);
  return err as GatewayError;
}

describe('SseParser', () => {
  const stream = [
    '\uFEFF: a comment\n',
    'event: message\ndata: {"type":"assistant","subtype":"text","text":"It is 18°C 🙂"}\n\n',
    'event: message\r\ndata: {"type":"assistant","subtype":"text",\r\ndata: "text":"two lines"}\r\n\r\n',
    'event: message\rdata: {"type":"result","text":"é"}\r\r',
    'data: no event name\n\n',
    'event: empty\n\n',
    'event: done\ndata: {"sessionId":"s-1"}\n\n',
    'event: message\ndata: {"cut":"short"}',
  ].join('');
  const expected: SseEvent[] = [
    { event: 'message', data: '{"type":"assistant","subtype":"text","text":"It is 18°C 🙂"}' },
    { event: 'message', data: '{"type":"assistant","subtype":"text",\n"text":"two lines"}' },
    { event: 'message', data: '{"type":"result","text":"é"}' },
    { event: 'message', data: 'no event name' },
    { event: 'done', data: '{"sessionId":"s-1"}' },
  ];
  const bytes = new TextEncoder().encode(stream);

  it('reads events whole, however the bytes are cut: at every single position, and byte by byte', () => {
    for (let cut = 0; cut <= bytes.length; cut++) {
      const parser = new SseParser();
      const events = [...parser.push(bytes.subarray(0, cut)), ...parser.push(bytes.subarray(cut)), ...parser.end()];
      expect(events, `cut at ${cut}`).toEqual(expected);
    }
    const parser = new SseParser();
    const events: SseEvent[] = [];
    for (const byte of bytes) events.push(...parser.push(Uint8Array.of(byte)));
    events.push(...parser.end());
    expect(events).toEqual(expected);
  });

  it('ends an event at the blank line, not before: a CR waits for a possible LF', () => {
    const parser = new SseParser();
    expect(parser.push('data: a\r')).toEqual([]);
    expect(parser.push('\n')).toEqual([]);
    expect(parser.push('\r')).toEqual([]);
    expect(parser.push('\n')).toEqual([{ event: 'message', data: 'a' }]);
  });
});

describe('/prompt', () => {
  it('JSON: the result, the messages, the session id and the request id', async () => {
    const { token } = await user();
    const answer = await client(token).prompt('Hello', { model: MODEL, maxTurns: 2 });
    expect(answer.result).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: 'Echo: Hello', model: MODEL, num_turns: 1 });
    expect(answer.result.total_cost_microdollars).toBeGreaterThan(0);
    expect(answer.messages).toEqual([{ type: 'assistant', subtype: 'text', text: 'Echo: Hello' }, answer.result]);
    expect(answer.sessionId).toMatch(/^[0-9a-f-]{36}$/);
    expect(answer.requestId).toMatch(/^req_gw_[0-9a-f]{24}$/);
  });

  it('SSE: the messages as they come, also read one byte at a time; the session id of the header and of done', async () => {
    const { token } = await user();
    // A fetch that hands the body over one byte per chunk: every event is split, everywhere.
    const byteByByte: GatewayClientOptions['fetch'] = async (input, init) => {
      const res = await fetch(input, init);
      const whole = new Uint8Array(await res.arrayBuffer());
      let i = 0;
      const body = new ReadableStream<Uint8Array>({
        pull(controller) {
          if (i < whole.length) controller.enqueue(whole.subarray(i, ++i));
          else controller.close();
        },
      });
      return new Response(body, { status: res.status, headers: res.headers });
    };
    for (const fetchImpl of [undefined, byteByByte]) {
      const stream = client(token, fetchImpl ? { fetch: fetchImpl } : {}).promptStream('Count [[words:5]] 🙂', { model: MODEL });
      const messages: PromptMessage[] = [];
      for await (const m of stream) messages.push(m);
      const texts = messages.filter((m) => m.type === 'assistant').map((m) => (m as { text: string }).text);
      expect(texts.length).toBeGreaterThan(1);
      expect(texts.join('')).toBe('word1 word2 word3 word4 word5');
      expect(messages.at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2 word3 word4 word5' });
      expect(stream.result).toBe(messages.at(-1));
      expect(stream.sessionId).toMatch(/^[0-9a-f-]{36}$/);
      expect(stream.requestId).toMatch(/^req_gw_/);
    }
  });

  it('SSE: leaving the loop early closes the stream, and the gateway stops the run', async () => {
    const { id, token } = await user();
    const stream = client(token).promptStream('Long [[words:400]] [[delay:20]]', { model: MODEL });
    let chunks = 0;
    for await (const m of stream) if (m.type === 'assistant' && ++chunks === 3) break;
    expect(stream.result).toBeUndefined();
    // The run ends (no lease left) and what it produced is charged, well short of 400 words.
    await expect.poll(async () => (await liveLeases(gw.developerId)).filter((l) => l.userId === id).length, { timeout: 10_000 }).toBe(0);
    await gw.invocationsDone();
    const usage = await readUsage({ projectId: gw.projectId, userId: id, budget: BUDGET });
    expect(usage.reserved).toEqual({ ai: 0, compute: 0 });
    expect(usage.used.ai).toBeGreaterThan(0);
  });

  it('finalResult() reads the stream to its result', async () => {
    const { token } = await user();
    const result = await client(token).promptStream('Hi [[words:3]]', { model: MODEL }).finalResult();
    expect(result).toMatchObject({ subtype: 'success', text: 'word1 word2 word3' });
  });
});

describe('typed errors: the gateway’s exact bodies', () => {
  it('401: an expired token, in whichever shape the gateway answers; the code is token_expired', async () => {
    const { token } = await user({ now: Date.now() - 7200_000, expiresIn: 600 });
    for (const call of [(c: ReturnType<typeof client>) => c.prompt('hi'), (c: ReturnType<typeof client>) => c.usage()]) {
      const err = await refusal(call(client(token)));
      expect(err.status).toBe(401);
      expect(err.code).toBe('token_expired');
      expect([{ error: 'Token expired' }, { error: 'token_expired', message: 'Token expired' }]).toContainEqual(err.body);
      expect(err.message).toBe('Token expired');
      expect(err.requestId).toMatch(/^req_gw_/);
    }
    const forged = await refusal(client(`${token.slice(0, -4)}AAAA`).usage());
    expect(forged.status).toBe(401);
    expect(forged.code).toBe('invalid_token');
  });

  it("402: the developer's plan is spent", async () => {
    const developerId = `kit-zero-${++seq}`;
    await createDeveloper({ developerId, planSeconds: 0, poolSeconds: 0 });
    const project = await createProject({ developerId });
    const { token } = await user({ project: { projectId: project.projectId, secret: project.secret } });
    const err = await refusal(client(token).prompt('hi', { model: MODEL }));
    expect(err.status).toBe(402);
    expect(err.body).toEqual({ error: 'developer_budget_exhausted', used: 0, available: 0, planSeconds: 0, poolSeconds: 0 });
    expect(err.is('developer_budget_exhausted') && err.body.planSeconds).toBe(0);
  });

  it("429: the user's budget is spent, with the meters and retry-after", async () => {
    const { token } = await user({ budget: { ai: 0 } });
    const err = await refusal(client(token).prompt('hi', { model: MODEL }));
    expect(err.status).toBe(429);
    expect(err.code).toBe('user_budget_exhausted');
    expect(err.body).toEqual({
      error: 'user_budget_exhausted',
      message: expect.any(String),
      ai: { used: 0, remaining: 0, budget: 0 },
      compute: { used: 0, remaining: 3600, budget: 3600 },
    });
    expect(err.retryAfter).toBeGreaterThan(0);
    if (err.is('user_budget_exhausted')) expect(err.body.ai.remaining).toBe(0);
  });

  it('429: the tier is full, with the sessions and retry-after: 1', async () => {
    const developerId = `kit-hobby-${++seq}`;
    await createDeveloper({ developerId, planSeconds: 1_000 });
    const project = { ...(await createProject({ developerId })) };
    const [a, b, c] = [await user({ project }), await user({ project }), await user({ project })];
    const running = [a, b].map((u) => client(u.token).prompt('Slow [[latency:2000]] [[words:1]]', { model: MODEL }));
    await expect.poll(async () => (await liveLeases(developerId)).length, { timeout: 5_000, interval: 50 }).toBe(2);
    const err = await refusal(client(c.token).prompt('hi', { model: MODEL }));
    expect(err.status).toBe(429);
    expect(err.retryAfter).toBe(1);
    expect(err.body).toEqual({
      error: 'concurrent_limit_reached',
      active: 2,
      max: 2,
      sessions: [
        { sessionId: expect.any(String), userId: expect.any(String), ageMs: expect.any(Number) },
        { sessionId: expect.any(String), userId: expect.any(String), ageMs: expect.any(Number) },
      ],
    });
    if (err.is('concurrent_limit_reached')) expect(err.body.sessions.map((s) => s.userId).sort()).toEqual([a.id, b.id].sort());
    await Promise.all(running);
  });

  it("403: a page whose origin the token's origins claim does not allow", async () => {
    const { token } = await user({ origins: ['https://app.example.com'] });
    const fromPage =
      (origin: string): GatewayClientOptions['fetch'] =>
      (input, init) =>
        fetch(input, { ...init, headers: { ...(init?.headers as Record<string, string>), origin } });
    const err = await refusal(client(token, { fetch: fromPage('https://evil.example') }).usage());
    expect(err.status).toBe(403);
    expect(err.body).toEqual({
      error: 'origin_not_allowed',
      message: 'Requests from origin "https://evil.example" are not allowed by this token (its origins claim)',
    });
    await expect(client(token, { fetch: fromPage('https://app.example.com') }).usage()).resolves.toMatchObject({ allowed: true });
  });

  it('415: what the gateway answers a body that is not JSON (the client always sends application/json)', async () => {
    const { token } = await user();
    const sent: Record<string, string>[] = [];
    const recording: GatewayClientOptions['fetch'] = (input, init) => {
      sent.push(init?.headers as Record<string, string>);
      return fetch(input, init);
    };
    await client(token, { fetch: recording }).prompt('hi', { model: MODEL });
    expect(sent[0]).toMatchObject({ 'content-type': 'application/json' });
    const withoutType: GatewayClientOptions['fetch'] = (input, init) => {
      const { 'content-type': _, ...headers } = (init?.headers ?? {}) as Record<string, string>;
      return fetch(input, { ...init, headers });
    };
    for (const call of [
      (c: ReturnType<typeof client>) => c.prompt('hi'),
      (c: ReturnType<typeof client>) => c.incubate({ message: 'hi', idempotencyKey: 'k' }),
    ]) {
      const err = await refusal(call(client(token, { fetch: withoutType })));
      expect(err.status).toBe(415);
      expect(err.body).toEqual({ error: 'unsupported_media_type', message: 'Content-Type must be application/json, got "text/plain;charset=UTF-8"' });
    }
  });

  it('bodies the gateway did not write in its envelope, and the older 401 shapes', async () => {
    const headers = new Headers({ 'request-id': 'req_gw_000000000000000000000001', 'retry-after': '30' });
    const text = GatewayError.fromBody(502, '<html>Bad gateway</html>', headers);
    expect(text).toMatchObject({ status: 502, code: 'http_502', body: '<html>Bad gateway</html>', message: '<html>Bad gateway</html>', retryAfter: 30 });
    expect(text.requestId).toBe('req_gw_000000000000000000000001');
    expect(GatewayError.fromBody(401, { error: 'Missing token: send it in options.token' })).toMatchObject({
      code: 'invalid_token',
      message: 'Missing token: send it in options.token',
    });
    expect(GatewayError.fromBody(401, { error: 'token_revoked', message: 'Token revoked' })).toMatchObject({ code: 'token_revoked', message: 'Token revoked' });
    expect(GatewayError.fromBody(401, { type: 'error', error: { type: 'authentication_error', message: 'Token revoked' } })).toMatchObject({
      code: 'token_revoked',
    });
    expect(GatewayError.fromBody(429, { type: 'error', error: { type: 'rate_limit_error', message: 'x' } })).toMatchObject({
      code: 'rate_limit_error',
      message: 'x',
    });
  });
});

describe('/incubate, vessels and /usage', () => {
  it('queues, replays, polls to the end, cancels, and answers a batch item by item', async () => {
    const { id, token } = await user();
    const gateway = client(token);
    const request = { message: 'Summarise [[words:2]]', idempotencyKey: `kit-${seq}-a`, options: { model: MODEL } };
    const queued = await gateway.incubate(request);
    expect(queued).toMatchObject({ idempotencyKey: request.idempotencyKey, status: 'queued', replayed: false });
    expect(await gateway.incubate(request)).toMatchObject({ vesselId: queued.vesselId, replayed: true });
    const polls: string[] = [];
    const done = await gateway.waitForVessel(queued.vesselId, { intervalMs: 100, onPoll: (r) => polls.push(r.status) });
    expect(done).toMatchObject({
      vesselId: queued.vesselId,
      status: 'COMPLETED',
      isCompleted: true,
      isSuccess: true,
      output: { success: true, text: 'word1 word2' },
    });
    expect(polls.at(-1)).toBe('COMPLETED');

    const ended = await refusal(gateway.cancel(queued.vesselId));
    expect(ended.status).toBe(409);
    expect(ended.body).toEqual({ error: 'vessel_not_cancelable', status: 'COMPLETED', message: expect.any(String) });

    const later = await gateway.incubate({ message: 'later', idempotencyKey: `kit-${seq}-b`, ttl: 3600 });
    expect(await gateway.vessel(later.vesselId)).toMatchObject({ status: 'PENDING', isCompleted: false });
    expect(await gateway.cancel(later.vesselId)).toMatchObject({ status: 'CANCELED', isCanceled: true, isCompleted: true });

    const batch = await gateway.incubateBatch({
      items: [
        { message: 'one', idempotencyKey: `kit-${seq}-c` },
        { message: 'two', idempotencyKey: `kit-${seq}-c` },
      ],
      executeAt: new Date(Date.now() + 3_600_000),
    });
    expect(batch).toMatchObject({ total: 2, queued: 1, failed: 1 });
    expect(batch.items[1]).toMatchObject({ index: 1, status: 'failed', error: { code: 'duplicate_idempotency_key' } });

    const missing = await refusal(gateway.vessel('no-such-vessel'));
    expect(missing.status).toBe(404);
    expect(missing.body).toEqual({ error: 'vessel_not_found', message: expect.any(String) });

    const usage = await gateway.usage();
    expect(usage).toMatchObject({ user_id: id, issuer_id: gw.projectId, window: 'day', allowed: true, ai: { budget: BUDGET.ai }, compute: { budget: 3600 } });
    expect(usage.ai.used).toBe(done.output!.result.total_cost_microdollars);
  });

  it('waitForVessel stops when its signal is aborted', async () => {
    const { token } = await user();
    const gateway = client(token);
    const later = await gateway.incubate({ message: 'later', idempotencyKey: `kit-${++seq}-abort`, ttl: 3600 });
    const abort = new AbortController();
    setTimeout(() => abort.abort(new Error('stop waiting')), 300);
    await expect(gateway.waitForVessel(later.vesselId, { intervalMs: 100, signal: abort.signal })).rejects.toThrow('stop waiting');
    await expect(gateway.waitForVessel(later.vesselId, { intervalMs: 100, timeoutMs: 250 })).rejects.toThrow(/had not ended after 250 ms \(status PENDING\)/);
  });

  it('a token from a function, asked for before each request; the Anthropic SDK through anthropicOptions()', async () => {
    const { token } = await user();
    let asked = 0;
    const gateway = createGatewayClient({
      baseUrl: `${gw.url}/`,
      token: async () => {
        asked++;
        return token;
      },
    });
    await gateway.usage();
    await gateway.usage();
    expect(asked).toBe(2);
    const anthropic = new Anthropic({ ...(await gateway.anthropicOptions()), maxRetries: 0 });
    const msg = await anthropic.messages.create({ model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] });
    expect(msg.content).toEqual([{ type: 'text', text: 'Echo: Hello' }]);
  });
});

describe('/ws sessions', () => {
  const readNote = {
    name: 'read_note',
    description: "Read one of the user's notes by its title",
    input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
  };

  /** A WebSocket that records the URL it was opened with and every frame sent. */
  function recordingWebSocket(urls: string[], sent: Record<string, unknown>[]): WebSocketConstructor {
    return class extends WebSocket {
      constructor(url: string) {
        super(url);
        urls.push(url);
      }
      override send(data: unknown) {
        sent.push(JSON.parse(String(data)));
        super.send(data as string);
      }
    } as unknown as WebSocketConstructor;
  }

  it('authenticates with the first frame (no token in the URL), runs a client tool, streams text, resumes', async () => {
    const { id, token } = await user();
    const urls: string[] = [];
    const sent: Record<string, unknown>[] = [];
    const calls: ClientToolCall[] = [];
    const texts: string[] = [];
    const gateway = client(token, { WebSocket: recordingWebSocket(urls, sent) });
    const session = await gateway.session({
      options: { model: MODEL, tools: [readNote] },
      onToolUse: (call) => {
        calls.push(call);
        return 'Paris, 12–14 June.';
      },
      onText: (t) => texts.push(t),
    });
    expect(urls).toEqual([gw.websocket!.url]);
    expect(sent.slice(0, 2)).toEqual([
      { type: 'auth', token },
      { type: 'session.start', options: { model: MODEL, tools: [readNote] } },
    ]);
    expect(session).toMatchObject({ resumed: false, state: 'idle', messages: 0, userId: id, pendingTurn: undefined });
    expect(session.expiresAt).toBeGreaterThan(Date.now() / 1000);

    const turn = await session.send('My note? [[1> tool:read_note {"title":"Paris trip"}]]');
    expect(turn).toMatchObject({ type: 'result', subtype: 'success', text: 'Tool results: Paris, 12–14 June.', sessionId: session.sessionId, num_turns: 2 });
    expect(calls).toEqual([{ id: expect.any(String), name: 'read_note', input: { title: 'Paris trip' } }]);
    expect(sent).toContainEqual({ type: 'tool_result', tool_use_id: calls[0]!.id, content: 'Paris, 12–14 June.' });
    expect(texts.join('')).toContain('Tool results: Paris, 12–14 June.');
    await session.close();

    // Resumed on a new connection (the global WebSocket this time), by its id.
    const again = await client(token, { WebSocket: undefined }).session({ sessionId: session.sessionId });
    expect(again).toMatchObject({ sessionId: session.sessionId, resumed: true, state: 'idle', messages: 4 });
    const second = await again.send('And now? [[words:2]]');
    expect(second).toMatchObject({ subtype: 'success', text: 'word1 word2' });
    const closed = await again.close();
    expect(closed.code).toBe(1000);
    await expect(again.send('after close')).rejects.toMatchObject({ code: 'connection_closed' });
  });

  it('a tool that throws is an error result; one that returns blocks or {content, isError} is sent as such', async () => {
    const { token } = await user();
    const sent: Record<string, unknown>[] = [];
    const session = await client(token, { WebSocket: recordingWebSocket([], sent) }).session({
      options: { model: MODEL, tools: [readNote, { ...readNote, name: 'blocks' }, { ...readNote, name: 'flagged' }] },
      onToolUse: ({ name, input }) => {
        if (name === 'blocks') return [{ type: 'text', text: `B:${input.title}` }];
        if (name === 'flagged') return { content: 'not allowed', isError: true };
        throw new Error(`no note titled "${input.title}"`);
      },
    });
    const turn = await session.send('x [[1> tool:read_note {"title":"Nope"}]] [[1> tool:blocks {"title":"T"}]] [[1> tool:flagged {"title":"F"}]]');
    expect(turn.text).toBe('Tool results: no note titled "Nope" | B:T | not allowed');
    const results = sent.filter((f) => f.type === 'tool_result');
    expect(results.map(({ tool_use_id: _, ...rest }) => rest)).toEqual(
      expect.arrayContaining([
        { type: 'tool_result', content: 'no note titled "Nope"', is_error: true },
        { type: 'tool_result', content: [{ type: 'text', text: 'B:T' }] },
        { type: 'tool_result', content: 'not allowed', is_error: true },
      ]),
    );
    await session.close();
  });

  it('interrupt() ends the running turn with subtype interrupted', async () => {
    const { token } = await user();
    let session!: Awaited<ReturnType<ReturnType<typeof client>['session']>>;
    let interrupted = false;
    session = await client(token).session({
      options: { model: MODEL },
      onText: () => {
        if (!interrupted) {
          interrupted = true;
          session.interrupt();
        }
      },
    });
    const turn = await session.send('Long [[words:300]] [[delay:30]]');
    expect(turn).toMatchObject({ subtype: 'interrupted', is_error: true });
    expect(turn.text.split(' ').length).toBeLessThan(300);
    await session.close();
  });

  it('resumes a turn that waits for client tools: the calls come again, pendingTurn gives the result', async () => {
    const { token } = await user();
    let asked!: () => void;
    const called = new Promise<void>((resolve) => (asked = resolve));
    // The first connection's tool never answers: the session waits for it (saved awaiting_tools before the call is sent).
    const first = await client(token).session({
      options: { model: MODEL, tools: [readNote] },
      onToolUse: () => {
        asked();
        return new Promise(() => {});
      },
    });
    const waiting = first.send('x [[1> tool:read_note {"title":"Later"}]]');
    await called;
    await first.close();
    await expect(waiting).rejects.toMatchObject({ name: 'SessionError', code: 'connection_closed' });
    const resumed = await client(token).session({ sessionId: first.sessionId, onToolUse: ({ input }) => `note ${input.title}` });
    expect(resumed).toMatchObject({ resumed: true, state: 'awaiting_tools' });
    await expect(resumed.pendingTurn).resolves.toMatchObject({ subtype: 'success', text: 'Tool results: note Later' });
    await resumed.close();
  });

  it('sends a frame over 32 KB as parts and joins the gateway’s parts', async () => {
    const { token } = await user();
    const sent: Record<string, unknown>[] = [];
    const big = 'é'.repeat(20_000) + 'x'.repeat(20_000); // 60,000 bytes of UTF-8
    const session = await client(token, { WebSocket: recordingWebSocket([], sent) }).session({
      options: { model: MODEL, tools: [readNote] },
      onToolUse: () => big,
    });
    const turn = await session.send('x [[1> tool:read_note {"title":"Big"}]]');
    expect(turn).toMatchObject({ subtype: 'success', text: `Tool results: ${big}` });
    const parts = sent.filter((f) => f.type === 'part');
    expect(parts.length).toBe(Math.ceil(JSON.stringify({ type: 'tool_result', tool_use_id: 'toolu_x', content: big }).length / 10_000));
    for (const part of parts) expect(new TextEncoder().encode(JSON.stringify(part)).length).toBeLessThanOrEqual(32_768);
    await session.close();
  });

  it('paces its frames under the gateway’s frame rate: 25 client tool results at once, none dropped', async () => {
    const calls = Array.from({ length: 25 }, (_, i) => `[[1> tool:read_note {"title":"n${i}"}]]`).join(' ');
    const errors: SessionError[] = [];
    const session = await client((await user()).token).session({
      options: { model: MODEL, tools: [readNote] },
      onToolUse: ({ input }) => String(input.title),
      onError: (e) => errors.push(e),
    });
    const started = Date.now();
    const turn = await session.send(`many ${calls}`);
    expect(turn).toMatchObject({ subtype: 'success', text: `Tool results: ${Array.from({ length: 25 }, (_, i) => `n${i}`).join(' | ')}` });
    expect(errors).toEqual([]);
    expect(Date.now() - started).toBeGreaterThan(2_000); // 8 frames a second
    await session.close();
  });

  it('the pacing: at once below the limit, then never more than the limit in any second (a part costs an eighth)', () => {
    vi.useFakeTimers();
    try {
      const sends: { at: number; cost: number }[] = [];
      const socket = {
        readyState: 1,
        binaryType: '',
        close() {},
        addEventListener() {},
        send: (text: string) => sends.push({ at: Date.now(), cost: text.startsWith('{"type":"part"') ? 1 : 8 }),
      };
      const outbox = new Outbox(socket, 8);
      const start = Date.now();
      for (let i = 0; i < 20; i++) outbox.push('{"type":"tool_result"}', 8);
      for (let i = 0; i < 40; i++) outbox.push('{"type":"part"}', 1);
      expect(sends.length).toBe(8);
      expect(sends.every((s) => s.at === start)).toBe(true);
      vi.advanceTimersByTime(10_000);
      expect(sends.length).toBe(60);
      for (const s of sends) {
        const inSecond = sends.filter((o) => o.at >= s.at && o.at < s.at + 1000).reduce((sum, o) => sum + o.cost, 0);
        expect(inSecond).toBeLessThanOrEqual(64);
      }
      // 20 frames (160 eighths) and 40 parts (40): 200 eighths at 64 a second.
      expect(sends.at(-1)!.at - start).toBeLessThan(4_000);
    } finally {
      vi.useRealTimers();
    }
  });

  it('refuses a bad token with the error frame’s code, and a second turn while one runs', async () => {
    const expired = await user({ now: Date.now() - 7200_000, expiresIn: 600 });
    await expect(client(expired.token).session()).rejects.toMatchObject({ name: 'SessionError', code: 'token_expired' });
    await expect(client('not.a.token').session()).rejects.toMatchObject({ name: 'SessionError', code: 'unauthorized' });
    const { token } = await user();
    const session = await client(token).session({ options: { model: MODEL } });
    const running = session.send('slow [[latency:1000]] [[words:1]]');
    await expect(session.send('again')).rejects.toMatchObject({ code: 'turn_in_progress' });
    await expect(running).resolves.toMatchObject({ subtype: 'success' });
    await expect(client(token).session({ sessionId: '00000000-0000-4000-8000-000000000000' })).rejects.toMatchObject({ code: 'session_not_found' });
    await session.close();
  });
});
