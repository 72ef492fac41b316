import { randomUUID } from 'node:crypto';
import { BatchWriteCommand, ScanCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { TOKEN_CLOCK_TOLERANCE_SECONDS, TURN_QUEUED_STALE_MS, TURN_STALE_MS } from '../../lambdas/config/timing.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { encodeConversation, sessionKey, type AuthenticatedConnection } from '../../lambdas/sessions/record.ts';
import { FrameOutbox } from '../../lambdas/sessions/outbox.ts';
import { getSession, queueTurn } from '../../lambdas/sessions/store.ts';
import { finishTurn } from '../../lambdas/sessions/turn.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { MAX_FRAME_BYTES } from '../../bin/local/websocket.ts';
import { setClock } from '../support/clock.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { connectWs, type WsClient } from '../support/ws.ts';

/**
 * The limits of /ws (docs/ws.md, "Limits" and "Errors"): frames per second, frame size, the idle time-out, the
 * sweeper freeing a turn whose worker stopped (`turn_lost`), and a token that expires during the connection. The
 * gateway runs with 3 frames a second and a 1-second idle time-out; the sweeper runs only when a test invokes it.
 */
const FRAMES_PER_SECOND = 3;
const IDLE_SECONDS = 1;
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({
    env: { SESSION_FRAMES_PER_SECOND: String(FRAMES_PER_SECOND), SESSION_IDLE_SECONDS: String(IDLE_SECONDS) },
    // The schedules run once at start-up, then only when a test invokes them.
    scheduleIntervalMs: 3_600_000,
  });
});
afterAll(async () => {
  await gw?.stop();
});
afterEach(() => {
  vi.unstubAllGlobals();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const newUser = () => `ws-limits-${++seq}`;

async function openSession(user: string, opts: { expiresInSeconds?: number } = {}): Promise<{ client: WsClient; sessionId: string }> {
  const client = await connectWs(gw.websocket!.url, await gw.token({ user, ...opts }));
  client.send({ type: 'session.start', options: {} });
  const session = await client.next((f) => f.type === 'session');
  return { client, sessionId: session.sessionId as string };
}

/** The connection item of the (only) connection of `userId`. */
async function connectionOf(userId: string): Promise<AuthenticatedConnection & { sweepAt: number }> {
  const out = await documentClient().send(new ScanCommand({ TableName: gw.tables.SESSIONS_TABLE!, ConsistentRead: true }));
  const items = (out.Items ?? []).filter((i) => String(i.pk).startsWith('connection#') && (i.caller as { userId?: string } | undefined)?.userId === userId);
  expect(items).toHaveLength(1);
  return items[0] as AuthenticatedConnection & { sweepAt: number };
}

/** Waits until the current second has just begun: frames sent now share one rate window. */
async function startOfSecond(): Promise<void> {
  const into = Date.now() % 1000;
  await sleep(1000 - into + 20);
}

describe('frames per second', () => {
  it(`more than ${FRAMES_PER_SECOND} frames in one second: rate_limited for the extra ones, and the connection stays open`, async () => {
    const { client } = await openSession(newUser());
    await startOfSecond();
    for (let i = 0; i < 6; i++) client.send({ type: 'interrupt' });
    const answers = [];
    for (let i = 0; i < 6; i++) answers.push(await client.next());
    const codes = answers.map((a) => a.error);
    expect(answers.every((a) => a.type === 'error')).toBe(true);
    // Every frame is answered: the admitted ones as usual (nothing to interrupt), the dropped ones rate_limited.
    expect(codes.filter((c) => c === 'rate_limited').length).toBeGreaterThanOrEqual(1);
    expect(codes.filter((c) => c === 'no_turn_running').length).toBeLessThanOrEqual(FRAMES_PER_SECOND);
    expect(codes.every((c) => c === 'rate_limited' || c === 'no_turn_running')).toBe(true);
    expect(answers.find((a) => a.error === 'rate_limited')!.message).toMatch(/Too many frames/);

    // The next second, frames go through again.
    await startOfSecond();
    expect(client.socket.readyState).toBe(client.socket.OPEN);
    client.send({ type: 'user', message: 'still open?' });
    expect((await client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: still open?' });
    await client.close();
  });
});

describe('frame size', () => {
  it("a frame of 32 KiB is read; one byte more closes the connection with 1009 (API Gateway's frame quota)", async () => {
    expect(MAX_FRAME_BYTES).toBe(32_768);
    const { client } = await openSession(newUser());
    const head = JSON.stringify({ type: 'no-such-frame', pad: '' });
    const fits = JSON.stringify({ type: 'no-such-frame', pad: 'x'.repeat(MAX_FRAME_BYTES - Buffer.byteLength(head)) });
    expect(Buffer.byteLength(fits)).toBe(MAX_FRAME_BYTES);
    client.send(fits);
    expect(await client.next()).toMatchObject({ type: 'error', error: 'invalid_frame' });
    expect(client.socket.readyState).toBe(client.socket.OPEN);

    const user = JSON.stringify({ type: 'user', message: 'x'.repeat(MAX_FRAME_BYTES - Buffer.byteLength('{"type":"user","message":""}') + 1) });
    expect(Buffer.byteLength(user)).toBe(MAX_FRAME_BYTES + 1);
    client.send(user);
    const closed = await client.closed;
    expect(closed.code).toBe(1009);
    // The oversized frame never reached the handler: no turn was started (nothing running, nothing due for 200 ms).
    await drained(gw, { quietMs: 200 });
    expect(client.frames.filter((f) => f.type === 'result' || f.type === 'assistant')).toEqual([]);
  });
});

describe('idle connections', () => {
  it(`after ${IDLE_SECONDS} s without a frame the sweeper sends idle_timeout and closes; a connection with a running turn stays`, async () => {
    const idle = await openSession(newUser());
    const bare = await connectWs(gw.websocket!.url, await gw.token({ user: newUser() }));
    const busyUser = newUser();
    const busy = await openSession(busyUser);
    busy.client.send({ type: 'user', message: 'A long answer [[words:200]] [[delay:25]]' });
    await busy.client.next((f) => f.type === 'assistant');
    // A fresh frame just before the sweep keeps a connection alive.
    await sleep(IDLE_SECONDS * 1000 + 300);
    const fresh = await openSession(newUser());

    await gw.invokeScheduled('SessionSweeper');

    for (const client of [idle.client, bare]) {
      expect(await client.next()).toMatchObject({ type: 'error', error: 'idle_timeout', message: expect.stringMatching(/No frame for 1 seconds/) });
      const closed = await client.closed;
      expect(closed.code).toBe(1000);
    }
    // The running turn's connection is open and its turn goes on; its idle deadline was pushed.
    expect(busy.client.socket.readyState).toBe(busy.client.socket.OPEN);
    expect((await connectionOf(busyUser)).sweepAt).toBeGreaterThan(Date.now());
    const before = busy.client.frames.length;
    await expect.poll(() => busy.client.frames.length, { timeout: 200, interval: 20 }).toBeGreaterThan(before);
    expect(fresh.client.socket.readyState).toBe(fresh.client.socket.OPEN);
    expect(fresh.client.frames.filter((f) => f.type === 'error')).toEqual([]);

    // The idle connection's session is kept: it resumes on a new connection.
    const again = await connectWs(gw.websocket!.url, await gw.token({ user: (await getSession(idle.sessionId))!.userId }));
    again.send({ type: 'session.start', sessionId: idle.sessionId });
    expect(await again.next()).toMatchObject({ type: 'session', sessionId: idle.sessionId, resumed: true, state: 'idle' });

    busy.client.send({ type: 'interrupt' });
    expect(await busy.client.next((f) => f.type === 'result')).toMatchObject({ subtype: 'interrupted' });
    await Promise.all([busy.client.close(), fresh.client.close(), again.close()]);
  });
});

describe('turn_lost: the sweeper frees a turn whose worker stopped', () => {
  it('a running turn whose heartbeat lapsed: turn_lost, the worker stops without a word, and the session is idle and usable', async () => {
    const user = newUser();
    const { client, sessionId } = await openSession(user);
    client.send({ type: 'user', message: 'Remember: blue.' });
    expect((await client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success' });

    const before = gw.upstreams.anthropic!.requests.length;
    client.send({ type: 'user', message: 'Never answered [[hang]]' });
    await expect.poll(async () => (await getSession(sessionId))?.state, { timeout: 5_000, interval: 50 }).toBe('running');
    await expect.poll(() => gw.upstreams.anthropic!.requests.length, { timeout: 5_000, interval: 50 }).toBe(before + 1);
    const hung = gw.upstreams.anthropic!.requests.at(-1)!;

    // The worker "stops": its claim lapses, as when it renewed it last more than TURN_STALE_MS ago. (Moving the clock
    // instead would race the worker of this process, whose watch would then renew the claim at once.)
    await documentClient().send(
      new UpdateCommand({
        TableName: gw.tables.SESSIONS_TABLE!,
        Key: sessionKey(sessionId),
        UpdateExpression: 'SET sweepAt = :at',
        ConditionExpression: '#state = :running',
        ExpressionAttributeNames: { '#state': 'state' },
        ExpressionAttributeValues: { ':at': Date.now() - TURN_STALE_MS - 1, ':running': 'running' },
      }),
    );
    await gw.invokeScheduled('SessionSweeper');

    const lost = await client.next();
    expect(lost).toMatchObject({ type: 'error', error: 'turn_lost', message: expect.any(String) });
    const stored = await getSession(sessionId);
    expect(stored).toMatchObject({ state: 'idle' });
    expect(stored?.turn).toBeUndefined();
    // The conversation is as before the turn.
    expect(stored?.conversation).toHaveLength(2);

    // The worker, finding its turn taken, gives its model call up and writes and sends nothing more.
    await expect.poll(() => hung.outcome, { timeout: 3_000, interval: 50 }).toBe('client_closed');
    await expect.poll(async () => liveLeases(gw.developerId), { timeout: 3_000, interval: 50 }).toEqual([]);
    await expect.poll(async () => windowsWithHolds(gw.tables.USAGE_TABLE!), { timeout: 3_000, interval: 50 }).toEqual([]);
    await drained(gw, { quietMs: 300 });
    expect(client.frames.slice(client.frames.indexOf(lost) + 1)).toEqual([]);
    expect((await getSession(sessionId))?.conversation).toHaveLength(2);

    // The session goes on from the conversation it had. (In a second of its own: this file allows 3 frames a
    // second, and everything above can happen within the first.)
    await startOfSecond();
    client.send({ type: 'user', message: 'What colour?' });
    const after = (await client.untilResult()).at(-1);
    expect(after, JSON.stringify(after)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: What colour?' });
    const last = gw.upstreams.anthropic!.requests.at(-1)!.body as { messages: unknown[] };
    expect(last.messages).toEqual([
      { role: 'user', content: 'Remember: blue.' },
      { role: 'assistant', content: [{ type: 'text', text: 'Echo: Remember: blue.' }] },
      { role: 'user', content: 'What colour?' },
    ]);
    await client.close();
  });

  it('a worker that reaches its end after the sweeper freed its turn (before its watch saw it) writes and sends nothing', async () => {
    const user = newUser();
    const { client, sessionId } = await openSession(user);
    client.send({ type: 'user', message: 'Never answered [[hang]]' });
    await expect.poll(async () => (await getSession(sessionId))?.state, { timeout: 5_000, interval: 50 }).toBe('running');
    const running = (await getSession(sessionId))!;
    await documentClient().send(
      new UpdateCommand({
        TableName: gw.tables.SESSIONS_TABLE!,
        Key: sessionKey(sessionId),
        UpdateExpression: 'SET sweepAt = :at',
        ExpressionAttributeValues: { ':at': Date.now() - TURN_STALE_MS - 1 },
      }),
    );
    await gw.invokeScheduled('SessionSweeper');
    expect(await client.next()).toMatchObject({ type: 'error', error: 'turn_lost' });

    // The end of a segment that finished just then, as the worker would write it: the turn is no longer its own.
    const posted: string[] = [];
    const outbox = new FrameOutbox(
      {
        send: async (_id, data) => {
          posted.push(String(data));
          return true;
        },
        close: async () => {},
      },
      running.turn!.connectionId,
    );
    const state = {
      conversation: [
        ...running.conversation,
        { role: 'user' as const, content: 'Never answered' },
        { role: 'assistant' as const, content: [{ type: 'text' as const, text: 'late' }] },
      ],
      spentMicros: 0,
      usage: { input_tokens: 0, output_tokens: 0 },
      turns: 1,
      corrections: 0,
      lastText: 'late',
      activeMs: 0,
    };
    await finishTurn(running, running.turn!, state, outbox, () => {}, { type: 'assistant', subtype: 'text', text: 'a result that must not be sent' });
    await outbox.flush();
    expect(posted).toEqual([]);
    expect(await getSession(sessionId)).toMatchObject({ state: 'idle', conversation: [] });
    client.send({ type: 'interrupt' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_turn_running' });
    await client.close();
  });

  it('a queued turn no worker ever claimed (its message was lost): turn_lost after TURN_QUEUED_STALE_MS', async () => {
    const user = newUser();
    const { client, sessionId } = await openSession(user);
    const connection = await connectionOf(user);
    // A turn queued as the frame handler would, but whose queue message never went out.
    const queued = await queueTurn(sessionId, {
      id: randomUUID(),
      connectionId: connection.connectionId,
      callbackUrl: gw.websocket!.managementEndpoint,
      caller: connection.caller,
      message: 'lost in the queue',
      queuedAt: Date.now(),
    });
    expect(queued.ok).toBe(true);
    client.send({ type: 'user', message: 'hello?' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'turn_in_progress' });

    // Not yet stale: the sweeper leaves it.
    await gw.invokeScheduled('SessionSweeper');
    expect((await getSession(sessionId))?.state).toBe('queued');

    const realTime = setClock(Date.now() + TURN_QUEUED_STALE_MS + 1_000);
    await gw.invokeScheduled('SessionSweeper');
    realTime();
    expect(await client.next()).toMatchObject({ type: 'error', error: 'turn_lost' });
    expect(await getSession(sessionId)).toMatchObject({ state: 'idle', conversation: [] });

    client.send({ type: 'user', message: 'hello again' });
    expect((await client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: hello again' });
    await client.close();
  });

  it('a stale turn written directly (a worker that died mid-turn): turn_lost, and a later resume sees it idle', async () => {
    const user = newUser();
    const { client, sessionId } = await openSession(user);
    const connection = await connectionOf(user);
    await documentClient().send(
      new UpdateCommand({
        TableName: gw.tables.SESSIONS_TABLE!,
        Key: sessionKey(sessionId),
        UpdateExpression: 'SET #state = :running, turn = :turn, sweepShard = :shard, sweepAt = :at',
        ExpressionAttributeNames: { '#state': 'state' },
        ExpressionAttributeValues: {
          ':running': 'running',
          ':turn': {
            id: randomUUID(),
            connectionId: connection.connectionId,
            callbackUrl: gw.websocket!.managementEndpoint,
            caller: connection.caller,
            queuedAt: Date.now() - 120_000,
          },
          ':shard': 'turn',
          ':at': Date.now() - 1,
        },
      }),
    );
    await gw.invokeScheduled('SessionSweeper');
    expect(await client.next()).toMatchObject({ type: 'error', error: 'turn_lost' });
    expect(client.socket.readyState).toBe(client.socket.OPEN);
    await client.close();

    const again = await connectWs(gw.websocket!.url, await gw.token({ user }));
    again.send({ type: 'session.start', sessionId });
    expect(await again.next()).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'idle', messages: 0 });
    again.send({ type: 'user', message: 'works' });
    expect((await again.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: works' });
    await again.close();
  });
});

describe('the sweeper under a backlog', () => {
  it('one sweep frees every stale turn, 250 of them (it reads the sweep index page after page, 8 at a time)', async () => {
    const stale = 250;
    const ids = Array.from({ length: stale }, () => randomUUID());
    const now = Date.now();
    const item = (sessionId: string, i: number) => ({
      ...sessionKey(sessionId),
      sessionId,
      projectId: gw.projectId,
      userId: `ws-backlog-${i}`,
      options: JSON.stringify({ model: 'claude-sonnet-4-5' }),
      conversation: encodeConversation([]),
      messages: 0,
      state: 'running',
      // Its connection is long gone: the turn_lost frame meets a 410, which does not stop the sweep.
      turn: {
        id: `turn-${i}`,
        connectionId: `gone-${i}`,
        callbackUrl: gw.websocket!.managementEndpoint,
        caller: { projectId: gw.projectId, userId: `ws-backlog-${i}` },
        queuedAt: now - 120_000,
      },
      version: 1,
      createdAt: now - 120_000,
      updatedAt: now - 120_000,
      sweepShard: 'turn',
      sweepAt: now - TURN_STALE_MS - i,
    });
    for (let i = 0; i < stale; i += 25) {
      const batch = ids.slice(i, i + 25).map((id, j) => ({ PutRequest: { Item: item(id, i + j) } }));
      await documentClient().send(new BatchWriteCommand({ RequestItems: { [gw.tables.SESSIONS_TABLE!]: batch } }));
    }

    await gw.invokeScheduled('SessionSweeper');

    const states = await Promise.all(ids.map(async (id) => (await getSession(id))?.state));
    expect(states.filter((s) => s === 'idle')).toHaveLength(stale);
  });
});

describe('a token that expires during the connection', () => {
  it('the next frame after its exp (and the 60 s leeway the connect allowed it) gets token_expired, then the connection is closed', async () => {
    // Expired 58 s ago: within the leeway, so the upgrade accepts it, and the leeway runs out 2 s from now.
    const { client } = await openSession(newUser(), { expiresInSeconds: 2 - TOKEN_CLOCK_TOLERANCE_SECONDS });
    client.send({ type: 'user', message: 'before expiry' });
    expect((await client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success' });
    // exp is a whole second: at most 2 s from now, at least 1.
    await sleep(2_300);
    client.send({ type: 'user', message: 'after expiry' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'token_expired', message: expect.any(String) });
    expect((await client.closed).code).toBe(1000);
    // The frame was not acted on.
    expect(client.frames.filter((f) => f.type === 'result')).toHaveLength(1);
  });
});
