import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { getSession } from '../../lambdas/sessions/store.ts';
import { drained, startedSince } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { mcpServer, toolServer } from '../support/tool-servers.ts';
import { connectWs, type Frame, type WsClient } from '../support/ws.ts';

/**
 * /ws tools (issue 16, done-when 2) against the local runtime and the simulated upstream: client tools (the model's
 * calls go to the client as `tool_use` frames, the turn pauses holding nothing, and resumes with the client's results
 * in the model's call order), a remote HTTP tool on a real local server and the MCP SDK's own server, run by the
 * gateway in the same session; the errors of a waiting turn, and an interrupt while it waits. Every turn's result
 * costs add up to the user's AI meter growth, to the microdollar.
 *
 * Directives are unscoped (`[[tool:…]]` in the turn's message): in a session the simulated upstream's turn number
 * counts every assistant message of the conversation, and a request whose last user message holds only tool results
 * reads no directive, so the model answers `Hello from the simulated upstream.` and the turn ends.
 */
const MODEL = 'claude-sonnet-4-6';
const FINAL = 'Hello from the simulated upstream.';
let gw: TestGateway;
let tools: Awaited<ReturnType<typeof toolServer>>;
let mcp: Awaited<ReturnType<typeof mcpServer>>;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  tools = await toolServer();
  mcp = await mcpServer();
});
afterAll(async () => {
  await gw?.stop();
  tools?.server.closeAllConnections();
  tools?.server.close();
  mcp?.server.closeAllConnections();
  mcp?.server.close();
});

const budget = { ai: 10_000_000, compute: 3600, window: 'day' as const };

/** A fresh user with its own token and meters. */
async function newUser() {
  const id = `ws-tools-${++seq}`;
  const token = await gw.token({ user: id, budget });
  return { id, token, usage: () => readUsage({ projectId: gw.projectId, userId: id, budget }) };
}

const readNote = {
  name: 'read_note',
  description: "Read one of the user's notes by its title",
  input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
};
const deviceTime = {
  name: 'device_time',
  description: 'The time on the user’s device',
  input_schema: { type: 'object', properties: { zone: { type: 'string' } } },
};
const weather = () => ({
  name: 'get_weather',
  description: 'Weather of a city',
  input_schema: { type: 'object', properties: { city: { type: 'string' } } },
  url: `${tools.url}/weather`,
  headers: { 'x-tool-key': 'k1' },
});

const TWO_CLIENT_CALLS = 'Check my note and my clock [[tool:read_note {"title":"Paris trip"}]] [[tool:device_time {"zone":"CET"}]]';

async function openSession(client: WsClient, options: Record<string, unknown>): Promise<string> {
  client.send({ type: 'session.start', options });
  const session = await client.next((f) => f.type === 'session' || f.type === 'error');
  expect(session).toMatchObject({ type: 'session', resumed: false, state: 'idle', messages: 0 });
  return session.sessionId as string;
}

/** The next `error` frame (frames of other types before it are skipped). */
const nextError = (client: WsClient) => client.next((f) => f.type === 'error');

/** The two client `tool_use` frames of a turn that asked for read_note and device_time. */
async function twoClientCalls(client: WsClient): Promise<[Frame, Frame]> {
  const first = await client.next((f) => f.type === 'tool_use' || f.type === 'result' || f.type === 'error');
  const second = await client.next((f) => f.type === 'tool_use' || f.type === 'result' || f.type === 'error');
  expect(first).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'read_note', input: { title: 'Paris trip' } });
  expect(second).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'device_time', input: { zone: 'CET' } });
  expect(first.id).not.toBe(second.id);
  return [first, second];
}

type Message = { role: string; content: string | Record<string, unknown>[] };
const messagesRequests = () => gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages');
const bodyMessages = (body: unknown) => (body as { messages: Message[] }).messages;

/** The upstream request whose last user message answers `toolUseId`. */
function requestAnswering(toolUseId: string) {
  return messagesRequests().find((r) => {
    const last = bodyMessages(r.body).at(-1)!;
    return last.role === 'user' && Array.isArray(last.content) && last.content.some((b) => b.type === 'tool_result' && b.tool_use_id === toolUseId);
  });
}

/** Every tool_use of every assistant message is answered by a tool_result in the message after it. */
function expectEveryCallAnswered(messages: Message[]): void {
  messages.forEach((m, i) => {
    if (m.role !== 'assistant' || typeof m.content === 'string') return;
    const ids = m.content.filter((b) => b.type === 'tool_use').map((b) => b.id);
    if (ids.length === 0) return;
    const next = messages[i + 1];
    expect(next?.role).toBe('user');
    const answered = Array.isArray(next!.content) ? next!.content.filter((b) => b.type === 'tool_result').map((b) => b.tool_use_id) : [];
    expect(answered).toEqual(ids);
  });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('/ws tools', () => {
  it('one session: two client tools answered out of order, then an HTTP tool and an MCP tool run by the gateway', async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const before = await u.usage();
    const sessionId = await openSession(client, {
      model: MODEL,
      tools: [readNote, deviceTime, weather()],
      mcpServers: { calc: { type: 'http', url: `${mcp.url}/mcp` } },
    });

    // Turn 1: the model asks for two client tools in one message.
    client.send({ type: 'user', message: TWO_CLIENT_CALLS });
    const [note, clock] = await twoClientCalls(client);
    // The turn waits for the client holding nothing: no lease, no reservation.
    expect(await liveLeases(gw.developerId)).toEqual([]);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    const requestsBefore = messagesRequests().length;
    // Time spent by the client is not the turn's: neither counted nor charged.
    await sleep(2200);
    expect(messagesRequests().length).toBe(requestsBefore);
    // Answered in reverse order: the clock first (as an error), then the note (as content blocks).
    // (Frames of one connection are handled concurrently, as API Gateway invokes the function per frame: a pause
    // between them makes the order the one the gateway sees.)
    client.send({ type: 'tool_result', tool_use_id: clock.id, content: 'clock unavailable', is_error: true });
    await sleep(300);
    client.send({ type: 'tool_result', tool_use_id: note.id, content: [{ type: 'text', text: 'Paris, 12-14 June. Walk along the Seine.' }] });
    const turn1 = await client.untilResult();
    const result1 = turn1.at(-1)!;
    expect(result1).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: FINAL, num_turns: 2, model: MODEL, sessionId });
    expect(result1.duration_secs as number).toBeLessThan(2.2);
    expect(turn1.filter((f) => f.type === 'error')).toEqual([]);
    // The resumed call carries both results in the model's call order, with the client's contents.
    const resumed = requestAnswering(note.id as string)!;
    expect(resumed).toBeDefined();
    const resumedMessages = bodyMessages(resumed.body);
    expect(resumedMessages.at(-1)).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: note.id, content: [{ type: 'text', text: 'Paris, 12-14 June. Walk along the Seine.' }] },
        { type: 'tool_result', tool_use_id: clock.id, content: 'clock unavailable', is_error: true },
      ],
    });
    const calls = resumedMessages.at(-2)!;
    expect(calls.role).toBe('assistant');
    expect((calls.content as Record<string, unknown>[]).filter((b) => b.type === 'tool_use').map((b) => [b.id, b.name, b.input])).toEqual([
      [note.id, 'read_note', { title: 'Paris trip' }],
      [clock.id, 'device_time', { zone: 'CET' }],
    ]);
    const afterTurn1 = await u.usage();
    expect(afterTurn1.used.ai - before.used.ai).toBe(result1.total_cost_microdollars);
    // Two segments of well under a second each: 1 + 1 compute seconds, not the ~2.5 s the turn took on the clock.
    expect(afterTurn1.used.compute - before.used.compute).toBe(2);

    // Turn 2: a remote HTTP tool, run by the gateway; the client only sees it.
    tools.calls.length = 0;
    client.send({ type: 'user', message: 'Weather? [[tool:get_weather {"city":"Paris"}]]' });
    const turn2 = await client.untilResult();
    const result2 = turn2.at(-1)!;
    expect(result2).toMatchObject({ type: 'result', subtype: 'success', text: FINAL, num_turns: 2, sessionId });
    const httpUse = turn2.find((f) => f.type === 'tool_use')!;
    expect(httpUse).toMatchObject({ type: 'tool_use', subtype: 'http', name: 'get_weather', input: { city: 'Paris' } });
    expect(turn2.find((f) => f.type === 'tool_result')).toMatchObject({
      type: 'tool_result',
      subtype: 'http',
      tool_use_id: httpUse.id,
      name: 'get_weather',
      is_error: false,
      text: '18°C in Paris',
    });
    expect(turn2.filter((f) => f.type === 'tool_use' && f.subtype === 'client')).toEqual([]);
    expect(tools.calls.map((c) => [c.path, c.body])).toEqual([['/weather', { city: 'Paris' }]]);
    expect(tools.calls[0]!.headers['x-tool-key']).toBe('k1');
    expect(bodyMessages(requestAnswering(httpUse.id as string)!.body).at(-1)).toEqual({
      role: 'user',
      content: [{ type: 'tool_result', tool_use_id: httpUse.id, content: '18°C in Paris' }],
    });
    // A server-side tool's call is not the client's to answer.
    client.send({ type: 'tool_result', tool_use_id: httpUse.id, content: 'mine' });
    expect(await nextError(client)).toMatchObject({ error: 'unknown_tool_use_id', pending: [] });

    // Turn 3: an MCP tool (the SDK's own server), run by the gateway too.
    mcp.calls.length = 0;
    client.send({ type: 'user', message: 'Add [[tool:mcp__calc__add {"a":2,"b":3}]]' });
    const turn3 = await client.untilResult();
    const result3 = turn3.at(-1)!;
    expect(result3).toMatchObject({ type: 'result', subtype: 'success', text: FINAL, num_turns: 2, sessionId });
    expect(result3.mcp_servers).toEqual([expect.objectContaining({ name: 'calc', status: 'connected' })]);
    const mcpUse = turn3.find((f) => f.type === 'tool_use')!;
    expect(mcpUse).toMatchObject({ type: 'tool_use', subtype: 'mcp', name: 'mcp__calc__add', input: { a: 2, b: 3 } });
    expect(turn3.find((f) => f.type === 'tool_result')).toMatchObject({
      type: 'tool_result',
      subtype: 'mcp',
      tool_use_id: mcpUse.id,
      name: 'mcp__calc__add',
      is_error: false,
      text: '5',
    });
    expect(mcp.calls).toEqual([{ a: 2, b: 3 }]);

    // The whole session's conversation went with the last call: every call answered, nothing lost.
    const lastMessages = bodyMessages(requestAnswering(mcpUse.id as string)!.body);
    expect(lastMessages).toHaveLength(11);
    expect(JSON.stringify(lastMessages[0])).toContain('Check my note and my clock');
    expectEveryCallAnswered(lastMessages);

    const after = await u.usage();
    expect(after.used.ai - before.used.ai).toBe([result1, result2, result3].reduce((s, r) => s + (r.total_cost_microdollars as number), 0));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    await client.close();
  });

  it('while the turn waits: user → awaiting_tool_results, missing or unknown ids → errors; the right results still complete it', async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const before = await u.usage();
    await openSession(client, { model: MODEL, tools: [readNote, deviceTime] });
    client.send({ type: 'user', message: TWO_CLIENT_CALLS });
    const [note, clock] = await twoClientCalls(client);
    expect(await liveLeases(gw.developerId)).toEqual([]);

    client.send({ type: 'user', message: 'Hurry up' });
    expect(await nextError(client)).toMatchObject({ error: 'awaiting_tool_results', pending: [note.id, clock.id] });

    client.send({ type: 'tool_result', content: 'no id' });
    const invalid = await nextError(client);
    expect(invalid).toMatchObject({ error: 'invalid_frame' });
    expect(invalid.message).toContain('tool_use_id');

    client.send({ type: 'tool_result', tool_use_id: 'toolu_nobody', content: 'stray' });
    const unknown = await nextError(client);
    expect(unknown).toMatchObject({ error: 'unknown_tool_use_id', pending: [note.id, clock.id] });
    expect(unknown.message).toContain('toolu_nobody');

    // Let the frames-per-second window pass before the next burst.
    await sleep(1000);
    client.send({ type: 'tool_result', tool_use_id: note.id, content: 'Seine walk' });
    await sleep(300);
    // Once answered, an id is no longer pending: a second answer is refused, and the other is still awaited.
    client.send({ type: 'tool_result', tool_use_id: note.id, content: 'again' });
    expect(await nextError(client)).toMatchObject({ error: 'unknown_tool_use_id', pending: [clock.id] });
    client.send({ type: 'user', message: 'Still there?' });
    expect(await nextError(client)).toMatchObject({ error: 'awaiting_tool_results', pending: [clock.id] });

    client.send({ type: 'tool_result', tool_use_id: clock.id, content: '14:00' });
    const result = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(result).toMatchObject({ type: 'result', subtype: 'success', text: FINAL, num_turns: 2 });
    expect(bodyMessages(requestAnswering(note.id as string)!.body).at(-1)).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: note.id, content: 'Seine walk' },
        { type: 'tool_result', tool_use_id: clock.id, content: '14:00' },
      ],
    });

    // And the session goes on.
    client.send({ type: 'user', message: 'Thanks [[words:2]]' });
    const next = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(next).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2', num_turns: 1 });

    const after = await u.usage();
    expect(after.used.ai - before.used.ai).toBe((result.total_cost_microdollars as number) + (next.total_cost_microdollars as number));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    await client.close();
  });

  it("tool_result content: the Messages API's blocks pass as given; a malformed or unknown block is invalid_frame, nothing stored, still pending", async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    await openSession(client, { model: MODEL, tools: [readNote, deviceTime] });
    client.send({ type: 'user', message: TWO_CLIENT_CALLS });
    const [note, clock] = await twoClientCalls(client);

    const refusals: [unknown, string][] = [
      [
        [{ type: 'video', url: 'x' }],
        'content.0.type: a tool result holds text, image, document, search_result, tool_reference, browser_state blocks, not "video"',
      ],
      [[{ type: 'text' }], 'content.0.text: a text block\'s "text" must be a string'],
      [
        [{ type: 'image', source: { type: 'base64', media_type: 'image/bmp', data: 'AAAA' } }],
        "content.0.source.media_type: an image's media_type is image/jpeg, image/png, image/gif or image/webp",
      ],
      [
        [{ type: 'search_result', source: 'notes://paris', title: 'Paris', content: 'not blocks' }],
        'content.0.content: a search_result\'s "content" is an array of text blocks',
      ],
    ];
    for (const [content, message] of refusals) {
      client.send({ type: 'tool_result', tool_use_id: note.id, content });
      expect(await nextError(client)).toMatchObject({ error: 'invalid_frame', message: `tool_result: ${message}` });
      await sleep(350); // the frames-per-second window
    }
    // Nothing was recorded: the same id is still pending.
    client.send({ type: 'user', message: 'Well?' });
    expect(await nextError(client)).toMatchObject({ error: 'awaiting_tool_results', pending: [note.id, clock.id] });

    await sleep(1000);
    const blocks = [
      { type: 'text', text: 'Seine walk', cache_control: { type: 'ephemeral' } },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
      {
        type: 'search_result',
        source: 'notes://paris',
        title: 'Paris trip',
        content: [{ type: 'text', text: 'Louvre on Monday' }],
        citations: { enabled: true },
      },
      { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'Packing list' }, title: 'List' },
    ];
    client.send({ type: 'tool_result', tool_use_id: note.id, content: blocks });
    client.send({ type: 'tool_result', tool_use_id: clock.id, content: '14:00', is_error: false });
    expect(await client.next((f) => f.type === 'result' || f.type === 'error')).toMatchObject({ type: 'result', subtype: 'success', text: FINAL });
    expect(bodyMessages(requestAnswering(note.id as string)!.body).at(-1)).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: note.id, content: blocks },
        { type: 'tool_result', tool_use_id: clock.id, content: '14:00' },
      ],
    });
    await client.close();
  });

  it('a session on an OpenAI model refuses, before storing it, a tool result block its translation cannot carry', async () => {
    await gw.setProviderKey('openai', 'sk-test-openai');
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const sessionId = await openSession(client, { model: 'gpt-4.1', tools: [readNote] });
    client.send({ type: 'user', message: 'Check my note [[tool:read_note {"title":"Paris trip"}]]' });
    const call = await client.next((f) => f.type === 'tool_use' || f.type === 'result' || f.type === 'error');
    expect(call).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'read_note' });

    client.send({
      type: 'tool_result',
      tool_use_id: call.id,
      content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'Packing list' } }],
    });
    const refused = await nextError(client);
    expect(refused).toMatchObject({ error: 'invalid_frame', pending: [call.id] });
    expect(refused.message).toBe(
      'tool_result.content.0: document (PDF / plain-text document) blocks cannot be sent to OpenAI, which serves this model; use a Claude model for them',
    );

    await sleep(400);
    client.send({ type: 'tool_result', tool_use_id: call.id, content: [{ type: 'text', text: 'Seine walk' }] });
    expect(await client.next((f) => f.type === 'result' || f.type === 'error')).toMatchObject({ type: 'result', subtype: 'success', sessionId });
    await client.close();
  });

  it("a turn the model's API refuses as invalid (400) is dropped: the session goes on from before it, new or resumed after client tools", async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const sessionId = await openSession(client, { model: MODEL, tools: [readNote] });
    const stored = async () => (await getSession(sessionId))!;

    // A new turn refused by the API: the error result, and nothing of it kept.
    client.send({ type: 'user', message: 'Summarise everything [[error:400]]' });
    const refused = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(refused).toMatchObject({ type: 'result', subtype: 'error_during_execution', is_error: true, sessionId });
    expect(await stored()).toMatchObject({ state: 'idle', conversation: [] });
    client.send({ type: 'user', message: 'Hello [[words:2]]' });
    expect(await client.next((f) => f.type === 'result' || f.type === 'error')).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2' });
    expect(bodyMessages(messagesRequests().at(-1)!.body)).toEqual([{ role: 'user', content: 'Hello [[words:2]]' }]);
    const before = (await stored()).conversation;
    expect(before).toHaveLength(2);

    // A turn refused when it resumes with the client's result: the user message, the call and the result all go. (A
    // session of its own: the simulator reads a turn's scripted directives from the conversation's first message.)
    await sleep(400);
    const second = await openSession(client, { model: MODEL, tools: [readNote] });
    const storedSecond = async () => (await getSession(second))!;
    client.send({ type: 'user', message: 'Check my note [[1> tool:read_note {"title":"Paris trip"}]] [[2> error:400]]' });
    const call = await client.next((f) => f.type === 'tool_use' || f.type === 'result' || f.type === 'error');
    expect(call).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'read_note' });
    client.send({ type: 'tool_result', tool_use_id: call.id, content: 'Seine walk' });
    expect(await client.next((f) => f.type === 'result' || f.type === 'error')).toMatchObject({
      type: 'result',
      subtype: 'error_during_execution',
      is_error: true,
      num_turns: 2,
    });
    expect(await storedSecond()).toMatchObject({ state: 'idle', conversation: [] });
    await sleep(400);
    client.send({ type: 'user', message: 'Again [[words:1]]' });
    expect(await client.next((f) => f.type === 'result' || f.type === 'error')).toMatchObject({ type: 'result', subtype: 'success', text: 'word1' });
    expect(bodyMessages(messagesRequests().at(-1)!.body)).toEqual([{ role: 'user', content: 'Again [[words:1]]' }]);
    // The first session is as it was.
    expect((await stored()).conversation).toEqual(before);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    await client.close();
  });

  it('an interrupt while the turn waits for client tools ends it as interrupted; the next turn has every call answered', async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const before = await u.usage();
    const sessionId = await openSession(client, { model: MODEL, tools: [readNote, deviceTime] });
    client.send({ type: 'user', message: TWO_CLIENT_CALLS });
    const [note, clock] = await twoClientCalls(client);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    const requestsBefore = messagesRequests().length;

    // One of the two answered, then the user gives up.
    client.send({ type: 'tool_result', tool_use_id: clock.id, content: '14:00' });
    await sleep(300);
    client.send({ type: 'interrupt' });
    const interrupted = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(interrupted).toMatchObject({ type: 'result', subtype: 'interrupted', is_error: true, num_turns: 1, sessionId, text: 'Calling tools.' });
    expect(interrupted.total_cost_microdollars as number).toBeGreaterThan(0);
    // No model call was made for the interrupted turn after the pause.
    expect(messagesRequests().length).toBe(requestsBefore);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);

    // The dropped call is no longer pending; a second interrupt finds nothing to stop.
    client.send({ type: 'tool_result', tool_use_id: note.id, content: 'too late' });
    expect(await nextError(client)).toMatchObject({ error: 'unknown_tool_use_id', pending: [] });
    client.send({ type: 'interrupt' });
    expect(await nextError(client)).toMatchObject({ error: 'no_turn_running' });

    // The next turn works, and its call answers every tool_use of the conversation: the client's result as given,
    // the unanswered one as interrupted.
    client.send({ type: 'user', message: 'Never mind [[words:3]]' });
    const next = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(next).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2 word3', num_turns: 1, sessionId });
    const last = messagesRequests().at(-1)!;
    const messages = bodyMessages(last.body);
    expectEveryCallAnswered(messages);
    expect(messages).toHaveLength(3);
    const answers = messages[2]!.content as Record<string, unknown>[];
    expect(answers[0]).toMatchObject({ type: 'tool_result', tool_use_id: note.id, is_error: true });
    expect(answers[1]).toEqual({ type: 'tool_result', tool_use_id: clock.id, content: '14:00' });
    expect(answers.at(-1)).toEqual({ type: 'text', text: 'Never mind [[words:3]]' });

    const after = await u.usage();
    expect(after.used.ai - before.used.ai).toBe((interrupted.total_cost_microdollars as number) + (next.total_cost_microdollars as number));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    await client.close();
  });

  it('the last result and an interrupt at once: the turn ends interrupted or completes, never "no_turn_running" while it goes on', async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const before = await u.usage();
    await openSession(client, { model: MODEL, tools: [readNote, deviceTime] });
    const results: Frame[] = [];
    // A race: a few rounds give each order a chance (the interrupt handled before, between or after the resume).
    for (let round = 0; round < 4; round++) {
      client.send({ type: 'user', message: TWO_CLIENT_CALLS });
      const [note, clock] = await twoClientCalls(client);
      client.send({ type: 'tool_result', tool_use_id: note.id, content: 'Seine walk' });
      await sleep(300);
      const from = client.frames.length;
      const since = gw.activity();
      client.send({ type: 'tool_result', tool_use_id: clock.id, content: '14:00' });
      client.send({ type: 'interrupt' });
      const result = await client.next((f) => f.type === 'result');
      results.push(result);
      // Both frames taken up by the gateway, and everything they started over: nothing running, nothing due for 300 ms.
      await startedSince(gw, since, 'websocket', 2);
      await drained(gw, { quietMs: 300 });
      const errors = client.frames.slice(from).filter((f) => f.type === 'error');
      if (result.subtype === 'success') {
        // The interrupt came too late to stop it, or was asked and the turn ended first: either way, not refused.
        expect(errors).toEqual([]);
      } else {
        expect(result).toMatchObject({ subtype: 'interrupted', is_error: true });
        // The result that lost the race is refused as no longer pending.
        expect(errors.every((e) => e.error === 'unknown_tool_use_id')).toBe(true);
      }
      expect(client.frames.slice(from).filter((f) => f.type === 'result')).toHaveLength(1);
      // The frames after the result (a refused result) are this round's: step past them.
      const late = client.frames.slice(client.frames.indexOf(result) + 1).length;
      for (let i = 0; i < late; i++) await client.next();
    }
    const after = await u.usage();
    expect(after.used.ai - before.used.ai).toBe(results.reduce((s, r) => s + (r.total_cost_microdollars as number), 0));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    // Every round left a conversation the model can read.
    client.send({ type: 'user', message: 'Done [[words:1]]' });
    expect(await client.next((f) => f.type === 'result' || f.type === 'error')).toMatchObject({ type: 'result', subtype: 'success', text: 'word1' });
    expectEveryCallAnswered(bodyMessages(messagesRequests().at(-1)!.body));
    await client.close();
  });
});
