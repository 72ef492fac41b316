import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from 'vitest';
import WebSocket from 'ws';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { setClock as setGatewayClock } from '../../lambdas/config/clock.ts';
import { AUTH_DEADLINE_SECONDS } from '../../lambdas/config/timing.ts';
import type { QueueSender } from '../../lambdas/queues/sender.ts';
import { createProject, setProjectOrigins } from '../../lambdas/registry/registry.ts';
import { connectionFromItem } from '../../lambdas/sessions/record.ts';
import { handleSocketEvent, type AuthDeadlineMessage } from '../../lambdas/sessions/socket.ts';
import { authenticateConnection, getConnection, putConnection } from '../../lambdas/sessions/store.ts';
import { processTurnMessage } from '../../lambdas/sessions/turn.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { frameQueue, opened, type Frame } from '../support/ws.ts';

/**
 * /ws from a browser (docs/ws.md, "The auth frame"): a connection without a token is accepted and must send
 * `{"type":"auth","token"}` first, within AUTH_DEADLINE_SECONDS; a failed auth, a refused `Origin` or the deadline is an
 * `error` frame then the close (1000: API Gateway's DeleteConnection sets no code); every other frame before the auth
 * is refused. The header and `?token=` ways stay, now with the `Origin` check too. The deadline is reached by moving
 * the gateway's clock (lambdas/config/clock.ts) — not the process's `Date`, which the local queues' delays run on —
 * except in one test that waits for the real delayed message. The sweeper runs only when a test invokes it.
 */
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ scheduleIntervalMs: 3_600_000 });
});
afterAll(async () => {
  await gw?.stop();
});

const BUDGET = { ai: 10_000_000, compute: 3600, window: 'day' as const };
const AUTH_FIRST = 'Send {"type":"auth","token":…} first';
const DEADLINE_MESSAGE = `No "auth" frame within ${AUTH_DEADLINE_SECONDS} s of the connect: the connection is closed. Connect again and send {"type":"auth","token":…} first`;
const newUser = () => `ws-auth-${++seq}`;
/** An origin of its own per connection: how a test finds its connection's item. */
const newOrigin = () => `https://page-${seq}-${Date.now().toString(36)}.example`;

interface Client {
  socket: WebSocket;
  frames: Frame[];
  send(frame: unknown): void;
  next(match?: (f: Frame) => boolean, timeoutMs?: number): Promise<Frame>;
  closed: Promise<{ code: number; reason: string }>;
  close(): Promise<void>;
}

/**
 * A client as a page's WebSocket is: no header but the `Origin` the browser sets (none when `origin` is undefined),
 * unless `headers` or `query` carry a token. Rejects with the HTTP status and body when the upgrade is refused.
 */
async function open(opts: { origin?: string; headers?: Record<string, string>; query?: string } = {}): Promise<Client> {
  const url = opts.query ? `${gw.websocket!.url}?${opts.query}` : gw.websocket!.url;
  const socket = new WebSocket(url, { headers: opts.headers ?? {}, ...(opts.origin ? { origin: opts.origin } : {}) });
  const started = Date.now();
  const queue = frameQueue<Frame>(10_000);
  socket.on('message', (data) => queue.push({ ...(JSON.parse(String(data)) as Frame), at: Date.now() - started }));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await opened(socket);
  return {
    socket,
    frames: queue.frames,
    send: (frame) => socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame)),
    next: queue.next,
    closed,
    async close() {
      if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close(1000);
      await closed;
    },
  };
}

/** The upgrade's refusal: its status and JSON body. */
async function refusal(opts: Parameters<typeof open>[0]): Promise<{ status: number; body: unknown }> {
  const err = (await open(opts).then(
    async (client) => {
      await client.close();
      throw new Error('the upgrade was accepted');
    },
    (e: unknown) => e,
  )) as { status?: number; body?: string };
  return { status: err.status!, body: JSON.parse(err.body ?? 'null') };
}

async function items(): Promise<Record<string, unknown>[]> {
  const out = await documentClient().send(new ScanCommand({ TableName: gw.tables.SESSIONS_TABLE!, ConsistentRead: true }));
  return out.Items ?? [];
}

/** The connection item opened with `origin` (each test's connections have their own), if it is still there. */
async function connectionItem(origin: string): Promise<Record<string, unknown> | undefined> {
  const found = (await items()).filter((i) => String(i.pk).startsWith('connection#') && i.origin === origin);
  expect(found.length).toBeLessThanOrEqual(1);
  return found[0];
}

/** The token's `exp` claim. */
const expOf = (token: string) => (JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString('utf8')) as { exp: number }).exp;

/**
 * Moves the gateway's clock (only: the process's `Date`, which the local queues run on, stays) `ms` ahead of real
 * time, until the test ends. Forward only: a clock going back would find the connection's rate window in the future.
 */
function gatewayClockAhead(ms: number): void {
  offset = ms;
  if (!undoClock) {
    undoClock = setGatewayClock(() => Date.now() + offset);
    onTestFinished(() => {
      undoClock?.();
      undoClock = undefined;
    });
  }
}
let offset = 0;
let undoClock: (() => void) | undefined;

/** An error frame, then the close: its code is 1000 (the DeleteConnection of API Gateway and of its local stand-in). */
async function expectRefusedThenClosed(client: Client, frame: Record<string, unknown>): Promise<void> {
  expect(await client.next()).toEqual({ ...frame, at: expect.any(Number) });
  expect(await client.closed).toEqual({ code: 1000, reason: '' });
  expect(client.frames).toHaveLength(1);
}

describe('a connection without a token: the auth frame', () => {
  it("is accepted and awaits its auth frame; auth → authenticated with the token's user and exp; then a full session turn", async () => {
    const user = newUser();
    const origin = newOrigin();
    const before = Date.now();
    const client = await open({ origin });
    // Stored awaiting auth: no caller, the upgrade's Origin, a deadline that is also the sweeper's.
    const waiting = (await connectionItem(origin))!;
    expect(waiting.caller).toBeUndefined();
    expect(waiting.authBy).toBeGreaterThanOrEqual(before + AUTH_DEADLINE_SECONDS * 1000);
    expect(waiting.authBy).toBeLessThanOrEqual(Date.now() + AUTH_DEADLINE_SECONDS * 1000);
    expect(waiting.sweepAt).toBe(waiting.authBy);

    const token = await gw.token({ user });
    client.send({ type: 'auth', token });
    expect(await client.next()).toEqual({ type: 'authenticated', userId: user, expiresAt: expOf(token), at: expect.any(Number) });
    const authenticated = (await connectionItem(origin))!;
    expect(authenticated.caller).toMatchObject({ projectId: gw.projectId, userId: user, expiresAt: expOf(token) });
    expect(authenticated.authBy).toBeUndefined();
    // The idle deadline now (SESSION_IDLE_SECONDS, 300 s by default).
    expect(authenticated.sweepAt).toBeGreaterThan(Date.now() + 200_000);

    client.send({ type: 'session.start', options: {} });
    const session = await client.next();
    expect(session).toMatchObject({ type: 'session', resumed: false, state: 'idle', messages: 0 });
    client.send({ type: 'user', message: 'Hello from a page' });
    const result = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(result).toMatchObject({ type: 'result', subtype: 'success', sessionId: session.sessionId, text: 'Echo: Hello from a page' });
    expect(client.frames.filter((f) => f.type === 'error')).toEqual([]);
    // A page without an Origin header (none is sent here) works the same.
    const bare = await open();
    bare.send({ type: 'auth', token });
    expect(await bare.next()).toMatchObject({ type: 'authenticated', userId: user });
    await Promise.all([client.close(), bare.close()]);
  });

  it('a bad, malformed, missing or expired token: the exact error frame, then the close (1000), and the connection forgotten', async () => {
    const user = newUser();
    const good = await gw.token({ user });
    const forged = good.slice(0, -4) + (good.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    // Past the verifier's 60 s clock tolerance.
    const expired = await gw.token({ user, expiresInSeconds: -120 });
    const cases: [unknown, Record<string, unknown>][] = [
      [
        { type: 'auth', token: forged },
        { type: 'error', error: 'unauthorized', message: 'Token signature is invalid' },
      ],
      [
        { type: 'auth', token: 'not-a-jwt' },
        { type: 'error', error: 'unauthorized', message: 'Malformed token' },
      ],
      [
        { type: 'auth', token: 'a.b.c' },
        { type: 'error', error: 'unauthorized', message: 'Malformed token' },
      ],
      [{ type: 'auth' }, { type: 'error', error: 'unauthorized', message: 'auth: token is required and must be a string' }],
      [
        { type: 'auth', token: 42 },
        { type: 'error', error: 'unauthorized', message: 'auth: token is required and must be a string' },
      ],
      [
        { type: 'auth', token: '' },
        { type: 'error', error: 'unauthorized', message: 'auth: token must not be empty' },
      ],
      [
        { type: 'auth', token: 'x'.repeat(4097) },
        { type: 'error', error: 'unauthorized', message: 'auth: token is at most 4096 characters' },
      ],
      [
        { type: 'auth', token: expired },
        { type: 'error', error: 'token_expired', message: 'Token expired' },
      ],
    ];
    for (const [frame, answer] of cases) {
      const origin = newOrigin();
      const client = await open({ origin });
      client.send(frame);
      await expectRefusedThenClosed(client, answer);
      expect(await connectionItem(origin)).toBeUndefined();
    }
  });

  it('frames before the auth: unauthorized each, the connection stays, and nothing of them is stored (no part, no session)', async () => {
    const origin = newOrigin();
    const client = await open({ origin });
    const connectionId = connectionFromItem((await connectionItem(origin))!).connectionId;
    const sessionsBefore = (await items()).filter((i) => String(i.pk).startsWith('session#')).length;
    const frames: unknown[] = [
      { type: 'session.start', options: {} },
      { type: 'user', message: 'hi' },
      { type: 'tool_result', tool_use_id: 'toolu_1', content: 'x' },
      { type: 'interrupt' },
      { type: 'part', id: 'm1', index: 0, count: 2, data: '{"type":"user",' },
      { type: 'part', id: 'm1', index: 1, count: 2, data: '"message":"joined"}' },
      { type: 'nonsense' },
      'not json',
    ];
    for (const frame of frames) {
      client.send(frame);
      expect(await client.next()).toEqual({ type: 'error', error: 'unauthorized', message: AUTH_FIRST, at: expect.any(Number) });
    }
    expect(client.socket.readyState).toBe(WebSocket.OPEN);
    const after = await items();
    expect(after.filter((i) => String(i.pk).startsWith(`part#${connectionId}`) || String(i.pk).startsWith(`parts#${connectionId}`))).toEqual([]);
    expect(after.filter((i) => String(i.pk).startsWith('session#'))).toHaveLength(sessionsBefore);
    // Refused frames do not push the deadline.
    const item = (await connectionItem(origin))!;
    expect(item.sweepAt).toBe(item.authBy);

    // The auth still works, and the connection is then as any other.
    client.send({ type: 'auth', token: await gw.token({ user: newUser() }) });
    expect(await client.next()).toMatchObject({ type: 'authenticated' });
    client.send({ type: 'session.start', options: {} });
    expect(await client.next()).toMatchObject({ type: 'session', resumed: false });
    await client.close();
  });

  it('an auth frame on an authenticated connection (by the upgrade or by an auth frame): invalid_frame, and the connection stays', async () => {
    const user = newUser();
    const token = await gw.token({ user });
    const already = { type: 'error', error: 'invalid_frame', message: expect.stringMatching(/already authenticated/), at: expect.any(Number) };
    for (const opts of [{ headers: { authorization: `Bearer ${token}` } }, { query: `token=${encodeURIComponent(token)}` }]) {
      const client = await open(opts);
      client.send({ type: 'auth', token });
      expect(await client.next()).toEqual(already);
      client.send({ type: 'auth' });
      expect(await client.next()).toEqual(already);
      client.send({ type: 'session.start', options: {} });
      expect(await client.next()).toMatchObject({ type: 'session' });
      await client.close();
    }
    const client = await open({ origin: newOrigin() });
    client.send({ type: 'auth', token });
    expect(await client.next()).toMatchObject({ type: 'authenticated' });
    client.send({ type: 'auth', token: 'not-a-jwt' });
    expect(await client.next()).toEqual(already);
    expect(client.socket.readyState).toBe(WebSocket.OPEN);
    await client.close();
  });

  it('two auth frames racing: one authenticated, the other an error; the store lets exactly one write win', async () => {
    const user = newUser();
    const token = await gw.token({ user });
    for (let round = 0; round < 3; round++) {
      const client = await open({ origin: newOrigin() });
      client.send({ type: 'auth', token });
      client.send({ type: 'auth', token });
      const answers = [await client.next(), await client.next()];
      expect(answers.filter((a) => a.type === 'authenticated')).toHaveLength(1);
      expect(answers.filter((a) => a.type === 'error')).toEqual([
        { type: 'error', error: 'invalid_frame', message: expect.stringMatching(/already authenticated/), at: expect.any(Number) },
      ]);
      expect(client.socket.readyState).toBe(WebSocket.OPEN);
      await client.close();
    }

    // The conditional write itself, two at once on one connection: one wins, the other finds it taken.
    const connectionId = `race-${Date.now()}`;
    await putConnection(connectionId, undefined);
    const caller = (u: string) => ({ projectId: gw.projectId, userId: u, budget: BUDGET, expiresAt: Math.floor(Date.now() / 1000) + 3600 });
    const outcomes = await Promise.all([authenticateConnection(connectionId, caller('first')), authenticateConnection(connectionId, caller('second'))]);
    expect(outcomes.map((o) => o.kind).sort()).toEqual(['already', 'ok']);
    const winner = outcomes.find((o) => o.kind === 'ok')!;
    expect((await getConnection(connectionId))?.caller?.userId).toBe(winner.kind === 'ok' ? winner.connection.caller.userId : undefined);
    expect(await authenticateConnection('no-such-connection', caller('x'))).toEqual({ kind: 'unknown' });
  });
});

describe(`the deadline (${AUTH_DEADLINE_SECONDS} s)`, () => {
  it('a frame after it, still unauthenticated — the auth frame too: unauthorized (the deadline passed), then the close', async () => {
    const token = await gw.token({ user: newUser() });
    for (const frame of [
      { type: 'session.start', options: {} },
      { type: 'auth', token },
    ]) {
      // Real time again for a new connection (the last one is gone).
      gatewayClockAhead(0);
      const origin = newOrigin();
      const client = await open({ origin });
      // Just before it, a frame is refused and the connection stays.
      gatewayClockAhead(AUTH_DEADLINE_SECONDS * 1000 - 1_000);
      client.send({ type: 'interrupt' });
      expect(await client.next()).toMatchObject({ type: 'error', error: 'unauthorized', message: AUTH_FIRST });
      gatewayClockAhead(AUTH_DEADLINE_SECONDS * 1000 + 1_000);
      client.send(frame);
      expect(await client.next()).toEqual({
        type: 'error',
        error: 'unauthorized',
        message: `The deadline passed: no "auth" frame within ${AUTH_DEADLINE_SECONDS} s of the connect. Connect again and send {"type":"auth","token":…} first`,
        at: expect.any(Number),
      });
      expect(await client.closed).toEqual({ code: 1000, reason: '' });
      expect(await connectionItem(origin)).toBeUndefined();
    }
  });

  it('the sweeper closes a due unauthenticated connection with unauthorized, and leaves the authenticated ones', async () => {
    const origin = newOrigin();
    const waiting = await open({ origin });
    const authed = await open({ origin: newOrigin() });
    authed.send({ type: 'auth', token: await gw.token({ user: newUser() }) });
    expect(await authed.next()).toMatchObject({ type: 'authenticated' });
    // Not due yet: the sweep leaves it.
    await gw.invokeScheduled('SessionSweeper');
    expect(await connectionItem(origin)).toBeDefined();
    expect(waiting.frames).toEqual([]);

    gatewayClockAhead(AUTH_DEADLINE_SECONDS * 1000 + 1_000);
    await gw.invokeScheduled('SessionSweeper');
    await expectRefusedThenClosed(waiting, { type: 'error', error: 'unauthorized', message: DEADLINE_MESSAGE });
    expect(await connectionItem(origin)).toBeUndefined();
    expect(authed.socket.readyState).toBe(WebSocket.OPEN);
    expect(authed.frames.filter((f) => f.type === 'error')).toEqual([]);
    await authed.close();
  });

  it('$connect queues the deadline on the turn queue, delayed 10 s; its worker closes the connection if it is still unauthenticated', async () => {
    // The message, as the $connect sends it (a token on the upgrade queues none).
    const sent: unknown[] = [];
    const queue: QueueSender = {
      send: async (name, body, options) => {
        sent.push({ name, body, options });
        return 'm';
      },
      sendToDeadLetter: async () => 'm',
    };
    const sender = () => ({ send: async () => true, close: async () => {} });
    const connect = (connectionId: string, headers: Record<string, string>) =>
      handleSocketEvent(
        {
          kind: 'connect',
          connectionId,
          requestId: 'r',
          callbackUrl: 'https://api.example/stage',
          headers: new Headers(headers),
          query: new URLSearchParams(),
        },
        { sender, queue },
      );
    const connectionId = `deadline-${Date.now()}`;
    expect(await connect(connectionId, { origin: 'https://app.example' })).toEqual({ statusCode: 200 });
    expect(sent).toEqual([
      {
        name: 'turn',
        body: { kind: 'auth_deadline', connectionId, callbackUrl: 'https://api.example/stage' } satisfies AuthDeadlineMessage,
        options: { delaySeconds: AUTH_DEADLINE_SECONDS },
      },
    ]);
    expect(await getConnection(connectionId)).toMatchObject({ connectionId, origin: 'https://app.example', authBy: expect.any(Number) });
    expect(await connect(`${connectionId}-b`, { authorization: `Bearer ${await gw.token({ user: newUser() })}` })).toEqual({ statusCode: 200 });
    expect(sent).toHaveLength(1);

    // The worker, on real connections: before the deadline and on an authenticated one it does nothing.
    const origin = newOrigin();
    const waiting = await open({ origin });
    const authedOrigin = newOrigin();
    const authed = await open({ origin: authedOrigin });
    authed.send({ type: 'auth', token: await gw.token({ user: newUser() }) });
    expect(await authed.next()).toMatchObject({ type: 'authenticated' });
    const idOf = async (o: string) => connectionFromItem((await connectionItem(o))!).connectionId;
    const message = async (o: string) => ({ kind: 'auth_deadline', connectionId: await idOf(o), callbackUrl: gw.websocket!.managementEndpoint });
    const early = await message(origin);
    await processTurnMessage(early);
    expect(await connectionItem(origin)).toBeDefined();

    gatewayClockAhead(AUTH_DEADLINE_SECONDS * 1000);
    await processTurnMessage(await message(authedOrigin));
    await processTurnMessage(early);
    await expectRefusedThenClosed(waiting, { type: 'error', error: 'unauthorized', message: DEADLINE_MESSAGE });
    expect(await connectionItem(origin)).toBeUndefined();
    // A repeated message finds the connection gone, and does nothing.
    await processTurnMessage(early);
    expect(authed.socket.readyState).toBe(WebSocket.OPEN);
    expect(authed.frames.filter((f) => f.type === 'error')).toEqual([]);
    await authed.close();
  });

  it('in real time: no auth frame, and the connection is told and closed 10 s after its connect', async () => {
    const started = Date.now();
    const client = await open({ origin: newOrigin() });
    client.send({ type: 'session.start', options: {} });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'unauthorized', message: AUTH_FIRST });
    expect(await client.next(() => true, 20_000)).toMatchObject({ type: 'error', error: 'unauthorized', message: DEADLINE_MESSAGE });
    expect(await client.closed).toEqual({ code: 1000, reason: '' });
    const after = Date.now() - started;
    expect(after).toBeGreaterThanOrEqual(AUTH_DEADLINE_SECONDS * 1000 - 200);
    expect(after).toBeLessThan(AUTH_DEADLINE_SECONDS * 1000 + 5_000);
  }, 30_000);
});

describe('the Origin of the upgrade, checked against the token and its project', () => {
  const refusedBy = (origin: string, by: string) => ({
    type: 'error',
    error: 'origin_not_allowed',
    message: `Requests from origin ${JSON.stringify(origin)} are not allowed by ${by}`,
  });

  /** Every way in with `token` from `origin`: refused with `by`'s message, or let in (by === undefined). */
  async function expectEveryWay(token: string, origin: string | undefined, by: string | undefined): Promise<void> {
    const forPage = origin ? { origin } : {};
    // The auth frame.
    const client = await open(forPage);
    client.send({ type: 'auth', token });
    if (by) await expectRefusedThenClosed(client, refusedBy(origin!, by));
    else {
      expect(await client.next()).toMatchObject({ type: 'authenticated' });
      await client.close();
    }
    // The header and ?token= ways: the upgrade is refused with 403 and the conjure body.
    for (const way of [{ headers: { authorization: `Bearer ${token}` } }, { query: `token=${encodeURIComponent(token)}` }]) {
      if (by)
        expect(await refusal({ ...forPage, ...way })).toEqual({ status: 403, body: { error: 'origin_not_allowed', message: refusedBy(origin!, by).message } });
      else {
        const ok = await open({ ...forPage, ...way });
        ok.send({ type: 'session.start', options: {} });
        expect(await ok.next()).toMatchObject({ type: 'session' });
        await ok.close();
      }
    }
  }

  it("a token whose origins claim excludes the upgrade's Origin: origin_not_allowed by every way; an allowed Origin, or none, is let in", async () => {
    const token = await mintToken({
      projectId: gw.projectId,
      userId: newUser(),
      secret: gw.secret,
      budget: BUDGET,
      expiresInSeconds: 3600,
      origins: ['https://app.example'],
    });
    await expectEveryWay(token, 'https://evil.example', 'this token (its origins claim)');
    await expectEveryWay(token, 'https://app.example', undefined);
    await expectEveryWay(token, undefined, undefined);
  });

  it("a project whose origins exclude the upgrade's Origin: origin_not_allowed by every way; an allowed Origin, or none, is let in", async () => {
    const project = await createProject({ developerId: gw.developerId });
    await setProjectOrigins(project.projectId, ['https://app.example']);
    const token = await mintToken({ projectId: project.projectId, userId: newUser(), secret: project.secret, budget: BUDGET, expiresInSeconds: 3600 });
    await expectEveryWay(token, 'https://evil.example', `project ${project.projectId} (gateway project set-origins)`);
    await expectEveryWay(token, 'https://app.example', undefined);
    await expectEveryWay(token, undefined, undefined);
  });
});
