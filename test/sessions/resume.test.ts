import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { createProject } from '../../lambdas/registry/registry.ts';
import { getSession } from '../../lambdas/sessions/store.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { drained, startedSince } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { connectWs, type WsClient } from '../support/ws.ts';

/**
 * /ws sessions across connections (issue 16, done-when 4): a session survives its connection and is resumed by its
 * sessionId with the conversation intact, only by its owner (same project, same user); a token on the upgrade is
 * checked there (401); and the frames a client gets wrong are answered with `error` frames on a connection that stays usable.
 */
let gw: TestGateway;
let seq = 0;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const newUser = () => `ws-resume-${++seq}`;
const messagesRequests = () => gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages');

async function connect(user: string): Promise<WsClient> {
  return connectWs(gw.websocket!.url, await gw.token({ user }));
}

/** A new session on `client`: its `session` frame. */
async function start(client: WsClient, options: Record<string, unknown> = {}) {
  client.send({ type: 'session.start', options });
  const frame = await client.next((f) => f.type === 'session' || f.type === 'error');
  expect(frame).toMatchObject({ type: 'session', resumed: false, state: 'idle', messages: 0 });
  return frame.sessionId as string;
}

/** The upgrade's refusal: its HTTP status and JSON body. */
async function refusal(token: string | undefined, viaQuery = false): Promise<{ status: number; body: unknown }> {
  const err = (await connectWs(gw.websocket!.url, token, { viaQuery }).then(
    async (client) => {
      await client.close();
      throw new Error('the upgrade was accepted');
    },
    (e: unknown) => e,
  )) as { status?: number; body?: string };
  return { status: err.status!, body: JSON.parse(err.body ?? 'null') };
}

/** The Sessions table's connection items of `userId` (a refused upgrade must leave none). */
async function connectionItemsOf(userId: string): Promise<Record<string, unknown>[]> {
  const out = await documentClient().send(new ScanCommand({ TableName: gw.tables.SESSIONS_TABLE!, ConsistentRead: true }));
  return (out.Items ?? []).filter((i) => String(i.pk).startsWith('connection#') && (i.caller as { userId?: string } | undefined)?.userId === userId);
}

describe('resuming a session on a new connection', () => {
  it('the conversation is intact: `session` says resumed, idle and the stored count, and the next turn sends it all', async () => {
    const user = newUser();
    const first = await connect(user);
    const sessionId = await start(first);
    first.send({ type: 'user', message: 'My name is Ada.' });
    const turn1 = await first.untilResult();
    expect(turn1.at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: My name is Ada.', sessionId });
    await first.close();

    const second = await connect(user);
    second.send({ type: 'session.start', sessionId });
    expect(await second.next()).toEqual({ type: 'session', sessionId, resumed: true, state: 'idle', messages: 2, at: expect.any(Number) });

    const before = messagesRequests().length;
    second.send({ type: 'user', message: 'What is my name?' });
    const turn2 = await second.untilResult();
    expect(turn2.at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: What is my name?', sessionId });
    const sent = messagesRequests().slice(before);
    expect(sent).toHaveLength(1);
    expect((sent[0]!.body as { messages: unknown }).messages).toEqual([
      { role: 'user', content: 'My name is Ada.' },
      { role: 'assistant', content: [{ type: 'text', text: 'Echo: My name is Ada.' }] },
      { role: 'user', content: 'What is my name?' },
    ]);

    // And once more, on a third connection: now four messages are stored.
    await second.close();
    const third = await connect(user);
    third.send({ type: 'session.start', sessionId });
    expect(await third.next()).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'idle', messages: 4 });
    await third.close();
  });

  it("another user's attempt fails with session_not_found, in the same project and in another one; the owner still resumes it", async () => {
    const owner = newUser();
    const a = await connect(owner);
    const sessionId = await start(a);
    a.send({ type: 'user', message: 'A secret: 42.' });
    expect((await a.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success' });
    await a.close();

    // Same project, another user.
    const intruder = await connect(newUser());
    intruder.send({ type: 'session.start', sessionId });
    const refused = await intruder.next();
    expect(refused).toMatchObject({ type: 'error', error: 'session_not_found', message: expect.any(String) });
    // The connection is still usable, and holds no session: a `user` frame is not the owner's turn.
    intruder.send({ type: 'user', message: 'Tell me the secret' });
    expect(await intruder.next()).toMatchObject({ type: 'error', error: 'no_session' });
    await intruder.close();

    // Another project of the same developer, even with the owner's user id.
    const other = await createProject({ developerId: gw.developerId });
    const foreignToken = await mintToken({
      projectId: other.projectId,
      userId: owner,
      secret: other.secret,
      budget: { ai: 10_000_000, compute: 3600, window: 'day' },
      expiresInSeconds: 3600,
    });
    const foreign = await connectWs(gw.websocket!.url, foreignToken);
    foreign.send({ type: 'session.start', sessionId });
    const foreignRefused = await foreign.next();
    expect(foreignRefused).toMatchObject({ type: 'error', error: 'session_not_found' });
    // Nothing tells an unknown session from another user's.
    foreign.send({ type: 'session.start', sessionId: '00000000-0000-4000-8000-000000000000' });
    const unknown = await foreign.next();
    expect(unknown).toMatchObject({ type: 'error', error: 'session_not_found' });
    expect(Object.keys(foreignRefused).sort()).toEqual(Object.keys(unknown).sort());
    await foreign.close();

    // No one else's frames reached the session: the owner resumes it as it was.
    const back = await connect(owner);
    back.send({ type: 'session.start', sessionId });
    expect(await back.next()).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'idle', messages: 2 });
    await back.close();
  });
});

describe('disconnecting mid-turn, and resuming', () => {
  it('a disconnect during a streaming turn stops it (model call aborted, nothing held); the resume finds it idle with the partial answer', async () => {
    const user = newUser();
    const client = await connect(user);
    const sessionId = await start(client);
    const before = messagesRequests().length;
    client.send({ type: 'user', message: 'A long one [[words:400]] [[delay:25]]' });
    await client.next((f) => f.type === 'assistant');
    await client.close();

    const call = messagesRequests()[before]!;
    await expect.poll(() => call.outcome, { timeout: 5_000, interval: 50 }).toBe('client_closed');
    await expect.poll(async () => (await getSession(sessionId))?.state, { timeout: 5_000, interval: 50 }).toBe('idle');
    await expect.poll(async () => liveLeases(gw.developerId), { timeout: 3_000, interval: 50 }).toEqual([]);
    await expect.poll(async () => windowsWithHolds(gw.tables.USAGE_TABLE!), { timeout: 3_000, interval: 50 }).toEqual([]);

    const again = await connect(user);
    again.send({ type: 'session.start', sessionId });
    const session = await again.next();
    // The user's message and what the model had said before the stop.
    expect(session).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'idle', messages: 2 });
    const stored = (await getSession(sessionId))!.conversation;
    expect(stored[0]).toEqual({ role: 'user', content: 'A long one [[words:400]] [[delay:25]]' });
    expect(JSON.stringify(stored[1])).toContain('word1 word2');
    again.send({ type: 'user', message: 'Go on' });
    expect((await again.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: Go on' });
    await again.close();
  });

  it('a turn running when its session is resumed elsewhere moves there: the rest of its deltas and its result arrive on the new connection', async () => {
    const user = newUser();
    const text = Array.from({ length: 80 }, (_, i) => `word${i + 1}`).join(' ');
    for (const closeOld of [false, true]) {
      const a = await connect(user);
      const sessionId = await start(a);
      a.send({ type: 'user', message: 'Long [[words:80]] [[delay:20]]' });
      await a.next((f) => f.type === 'assistant');
      const b = await connect(user);
      b.send({ type: 'session.start', sessionId });
      expect(await b.next()).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'running', messages: 0 });
      // A client that reconnected: its old connection goes away (its $disconnect must not stop the moved turn).
      if (closeOld) await a.close();
      const result = await b.next((f) => f.type === 'result');
      expect(result).toMatchObject({ subtype: 'success', sessionId, text });
      expect(a.frames.filter((f) => f.type === 'result')).toEqual([]);
      // Every delta went to one connection or the other, in order: nothing lost at the move.
      const deltas = (c: WsClient) =>
        c.frames
          .filter((f) => f.type === 'assistant')
          .map((f) => f.text as string)
          .join('');
      expect(deltas(a) + deltas(b)).toBe(text);
      expect(deltas(b).length).toBeGreaterThan(0);
      await Promise.all([a.close(), b.close()]);
    }
  });

  it('a session waiting for client tools survives the disconnect: the resume says awaiting_tools, repeats the pending calls, and the answers finish the turn there', async () => {
    const user = newUser();
    const tool = { name: 'read_note', description: 'Reads a note', input_schema: { type: 'object', properties: { title: { type: 'string' } } } };
    const client = await connect(user);
    const sessionId = await start(client, { tools: [tool] });
    client.send({ type: 'user', message: 'Notes please [[tool:read_note {"title":"a"}]] [[tool:read_note {"title":"b"}]]' });
    const first = await client.next((f) => f.type === 'tool_use');
    const second = await client.next((f) => f.type === 'tool_use');
    // One answered before leaving.
    client.send({ type: 'tool_result', tool_use_id: first.id, content: 'note a' });
    await expect.poll(async () => Object.keys((await getSession(sessionId))?.turn?.clientResults ?? {}), { timeout: 3_000, interval: 50 }).toEqual([first.id]);
    const since = gw.activity();
    await client.close();
    // The disconnect taken up by the gateway, and over: nothing running, nothing due for 200 ms.
    await startedSince(gw, since, 'websocket');
    await drained(gw, { quietMs: 200 });
    expect(await getSession(sessionId)).toMatchObject({ state: 'awaiting_tools' });

    const again = await connect(user);
    again.send({ type: 'session.start', sessionId });
    expect(await again.next()).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'awaiting_tools', messages: 2 });
    // Only the call without a result comes again.
    expect(await again.next()).toEqual({
      type: 'tool_use',
      subtype: 'client',
      id: second.id,
      name: 'read_note',
      input: { title: 'b' },
      at: expect.any(Number),
    });
    again.send({ type: 'tool_result', tool_use_id: first.id, content: 'again' });
    expect(await again.next()).toMatchObject({ type: 'error', error: 'unknown_tool_use_id', pending: [second.id] });
    again.send({ type: 'tool_result', tool_use_id: second.id, content: 'note b' });
    const result = await again.next((f) => f.type === 'result');
    expect(result).toMatchObject({ subtype: 'success', sessionId, num_turns: 2 });
    const last = messagesRequests().at(-1)!.body as { messages: { role: string; content: unknown }[] };
    expect(last.messages.at(-1)).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: first.id, content: 'note a' },
        { type: 'tool_result', tool_use_id: second.id, content: 'note b' },
      ],
    });
    expect(client.frames.filter((f) => f.type === 'result')).toEqual([]);
    await again.close();
  });

  it('resuming with options replaces the stored ones from the next turn', async () => {
    const user = newUser();
    const client = await connect(user);
    const sessionId = await start(client, { systemPrompt: 'You are terse.' });
    client.send({ type: 'user', message: 'hi' });
    await client.untilResult();
    expect((messagesRequests().at(-1)!.body as { system?: unknown }).system).toEqual('You are terse.');
    await client.close();

    const again = await connect(user);
    again.send({ type: 'session.start', sessionId, options: { systemPrompt: 'You are verbose.' } });
    expect(await again.next()).toMatchObject({ type: 'session', resumed: true, messages: 2 });
    again.send({ type: 'user', message: 'hi again' });
    await again.untilResult();
    expect((messagesRequests().at(-1)!.body as { system?: unknown }).system).toEqual('You are verbose.');
    // Invalid options on a resume are refused as on a start, and change nothing.
    again.send({ type: 'session.start', sessionId, options: { maxTurns: 0 } });
    expect(await again.next()).toMatchObject({ type: 'error', error: 'invalid_request' });
    expect((await getSession(sessionId))!.options.systemPrompt).toBe('You are verbose.');
    await again.close();
  });
});

describe('the token, checked at the upgrade', () => {
  it('a forged signature, an expired token, a malformed one: HTTP 401 with {error, message}, by header and by ?token=; no token: accepted, awaiting auth', async () => {
    const user = newUser();
    const good = await gw.token({ user });
    const forged = good.slice(0, -4) + (good.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    // Past the verifier's 60 s clock tolerance.
    const expired = await gw.token({ user, expiresInSeconds: -120 });
    for (const viaQuery of [false, true]) {
      // The conjure routes' 401 bodies (docs/api.md, "401 messages").
      expect(await refusal(forged, viaQuery)).toEqual({ status: 401, body: { error: 'invalid_token', message: 'Token signature is invalid' } });
      expect(await refusal(expired, viaQuery)).toEqual({ status: 401, body: { error: 'token_expired', message: 'Token expired' } });
    }
    expect(await refusal('not-a-jwt')).toEqual({ status: 401, body: { error: 'invalid_token', message: 'Malformed token' } });
    // No token at all (a browser's WebSocket sets no header): accepted, and it must send an `auth` frame first
    // (test/sessions/auth-frame.test.ts).
    const anonymous = await connectWs(gw.websocket!.url, undefined);
    anonymous.send({ type: 'session.start', options: {} });
    expect(await anonymous.next()).toMatchObject({ type: 'error', error: 'unauthorized', message: 'Send {"type":"auth","token":…} first' });
    await anonymous.close();
    // Nothing was recorded for the refused upgrades.
    expect(await connectionItemsOf(user)).toEqual([]);

    // The same user's good token connects both ways.
    for (const viaQuery of [false, true]) {
      const client = await connectWs(gw.websocket!.url, good, { viaQuery });
      await start(client);
      await client.close();
    }
  });
});

describe('frames the client gets wrong', () => {
  it("session.start with invalid options: invalid_request with /prompt's message; `token` is an unknown option here", async () => {
    const token = await gw.token({ user: newUser() });
    const client = await connectWs(gw.websocket!.url, token);

    // /prompt's 400 for the same options.
    const prompt = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'hi', options: { token, maxTurns: 0 } }),
    });
    expect(prompt.status).toBe(400);
    const promptBody = (await prompt.json()) as { error: string; message: string };
    expect(promptBody.message).toMatch(/maxTurns/);

    client.send({ type: 'session.start', options: { maxTurns: 0 } });
    expect(await client.next()).toEqual({ type: 'error', error: 'invalid_request', message: promptBody.message, at: expect.any(Number) });

    const unknownKey = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'hi', options: { token, maxTurn: 3 } }),
    });
    const unknownBody = (await unknownKey.json()) as { message: string };
    client.send({ type: 'session.start', options: { maxTurn: 3 } });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'invalid_request', message: unknownBody.message });

    client.send({ type: 'session.start', options: { token } });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'invalid_request', message: unknownBody.message.replace('maxTurn', 'token') });

    // None of them started a session.
    client.send({ type: 'user', message: 'hi' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_session' });
    await client.close();
  });

  it('user, tool_result and interrupt before session.start: no_session', async () => {
    const client = await connect(newUser());
    client.send({ type: 'user', message: 'hi' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_session', message: expect.any(String) });
    client.send({ type: 'tool_result', tool_use_id: 'toolu_1', content: 'x' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_session' });
    client.send({ type: 'interrupt' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_session' });
    // Then a session works.
    await start(client);
    client.send({ type: 'user', message: 'hi' });
    expect((await client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: hi' });
    await client.close();
  });

  it('a second `user` while a turn runs: turn_in_progress, and the running turn goes on to its result', async () => {
    const client = await connect(newUser());
    const sessionId = await start(client);
    const before = messagesRequests().length;
    client.send({ type: 'user', message: 'Count [[words:60]] [[delay:20]]' });
    await client.next((f) => f.type === 'assistant');
    client.send({ type: 'user', message: 'And another thing' });
    const busy = await client.next((f) => f.type === 'error');
    expect(busy).toMatchObject({ type: 'error', error: 'turn_in_progress', message: expect.any(String) });
    const result = await client.next((f) => f.type === 'result');
    expect(result).toMatchObject({ subtype: 'success', sessionId, text: Array.from({ length: 60 }, (_, i) => `word${i + 1}`).join(' ') });
    // The refused message never reached the model.
    const sent = messagesRequests().slice(before);
    expect(sent).toHaveLength(1);
    expect(JSON.stringify(sent[0]!.body)).not.toContain('And another thing');
    // Nor can the connection switch to another session while its turn runs.
    client.send({ type: 'user', message: 'Again [[words:60]] [[delay:20]]' });
    await client.next((f) => f.type === 'assistant');
    client.send({ type: 'session.start', options: {} });
    expect(await client.next((f) => f.type === 'error' || f.type === 'session')).toMatchObject({ type: 'error', error: 'turn_in_progress' });
    expect(await client.next((f) => f.type === 'result')).toMatchObject({ subtype: 'success', sessionId });
    // A turn queued but not yet claimed is as busy: two `user` frames at once start one turn.
    client.send({ type: 'user', message: 'One' });
    client.send({ type: 'user', message: 'Two' });
    const answers = [await client.next((f) => f.type === 'result' || f.type === 'error'), await client.next((f) => f.type === 'result' || f.type === 'error')];
    expect(answers.map((a) => a.type).sort()).toEqual(['error', 'result']);
    expect(answers.find((a) => a.type === 'error')).toMatchObject({ error: 'turn_in_progress' });
    await client.close();
  });

  it('not JSON, a JSON array, an unknown type, a field of the wrong type: invalid_frame, and the connection stays usable', async () => {
    const client = await connect(newUser());
    const bad: [unknown, RegExp][] = [
      ['this is not json', /not JSON/],
      ['[1,2,3]', /JSON object/],
      ['"a string"', /JSON object/],
      ['null', /JSON object/],
      [{ type: 'hello' }, /Unknown frame type "hello"/],
      [{ message: 'no type' }, /Unknown frame type null/],
      [{ type: 'user', message: 5 }, /^user: .*message/],
      [{ type: 'tool_result', tool_use_id: 'toolu_1' }, /^tool_result: .*content/],
    ];
    for (const [frame, message] of bad) {
      client.send(frame);
      const answer = await client.next();
      expect(answer, JSON.stringify(frame)).toMatchObject({ type: 'error', error: 'invalid_frame' });
      expect(answer.message as string, JSON.stringify(frame)).toMatch(message);
      // Pace the frames under the per-second limit.
      await new Promise((r) => setTimeout(r, 120));
    }
    expect(client.socket.readyState).toBe(client.socket.OPEN);
    await start(client);
    client.send({ type: 'user', message: 'still here?' });
    expect((await client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: still here?' });
    await client.close();
  });
});
