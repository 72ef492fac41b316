import { randomUUID } from 'node:crypto';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_FRAME_BYTES } from '../../lambdas/http/websocket.ts';
import { MAX_JOINED_BYTES, PARTS_TTL_SECONDS, receivePart, type PartOutcome } from '../../lambdas/sessions/parts.ts';
import { putConnection, touchConnection } from '../../lambdas/sessions/store.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { connectPartClient, partsOf, type Frame, type PartClient } from './part-client.ts';

/**
 * Messages over API Gateway's 32 KB frame (docs/ws.md, "Large messages"), through the local runtime and real
 * WebSockets: a client's `user` and `tool_result` sent as `part` frames (in any order, repeated, cut inside an emoji)
 * are joined into one frame; the gateway's own frames over 32 KB arrive as parts that join to them; bad parts get
 * their documented errors. Then the store (sessions/parts.ts) directly: concurrent and repeated parts join once,
 * an expired message starts anew, a joined message's data is deleted; and a part's cost of the rate limit.
 */
/** SESSION_FRAMES_PER_SECOND's default. */
const FRAMES_PER_SECOND = 10;
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ env: { SESSION_FRAMES_PER_SECOND: String(FRAMES_PER_SECOND) } });
});
afterAll(async () => {
  await gw?.stop();
});

const readNote = {
  name: 'read_note',
  description: "Read one of the user's notes by its title",
  input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
};

async function openSession(options: Record<string, unknown> = {}): Promise<PartClient> {
  const client = await connectPartClient(gw.websocket!.url, await gw.token({ user: `ws-parts-${++seq}` }));
  client.send({ type: 'session.start', options });
  await client.next((f) => f.type === 'session');
  return client;
}

/** The text of the last user message of every /v1/messages request the simulated upstream received. */
function upstreamUserTexts(): string[] {
  return gw.upstreams
    .anthropic!.requests.filter((r) => r.path === '/v1/messages')
    .map((r) => {
      const last = (r.body as { messages: { role: string; content: unknown }[] }).messages.at(-1)!;
      return typeof last.content === 'string' ? last.content : JSON.stringify(last.content);
    });
}

/** The raw part frames of one gateway id, as received. */
function partsOfId(client: PartClient, id: string) {
  return client.raw.filter((r) => r.frame.type === 'part' && r.frame.id === id);
}

/** Sends `count` parts that join to `{"type":"interrupt"}` (a frame whose answer, here, is no_turn_running). */
function interruptParts(id: string, count: number) {
  const text = JSON.stringify({ type: 'interrupt' }).padEnd(count, ' ');
  const size = Math.ceil(text.length / count);
  return Array.from({ length: count }, (_, index) => ({ type: 'part', id, index, count, data: text.slice(index * size, (index + 1) * size) }));
}

/** The items of messages sent in parts (sessions/parts.ts) whose key holds `fragment`. */
async function partItems(fragment: string): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const out = await documentClient().send(
      new ScanCommand({
        TableName: gw.tables.SESSIONS_TABLE!,
        ConsistentRead: true,
        ExclusiveStartKey: start,
        FilterExpression: 'begins_with(pk, :part) AND contains(pk, :fragment)',
        ExpressionAttributeValues: { ':part': 'part', ':fragment': fragment },
      }),
    );
    items.push(...(out.Items ?? []));
    start = out.LastEvaluatedKey;
  } while (start);
  return items;
}

describe('a client message over 32 KB, sent as parts', () => {
  it('a 40 KB user message in parts (out of order, one repeated, a cut inside an emoji) is one turn that sees it whole; the result over 32 KB arrives as parts that join to it', async () => {
    const client = await openSession();
    // Long words (the simulated model answers a word a token, 8,192 at most); the frame's text is cut every 10,000
    // code units: an emoji across the first cut.
    const head = '{"type":"user","message":"';
    const words = (from: number, n: number) => Array.from({ length: n }, (_, i) => `long-word-number-${String(from + i).padStart(6, '0')}-of-the-message`);
    const first = words(0, 400)
      .join(' ')
      .slice(0, 10_000 - 1 - head.length);
    const message = `${first}😀 ${words(400, 800).join(' ')}`;
    const text = JSON.stringify({ type: 'user', message });
    expect(text.charCodeAt(9_999)).toBe(0xd83d);
    expect(Buffer.byteLength(text)).toBeGreaterThan(40_000);
    const parts = partsOf(text, 'u1');
    expect(parts).toHaveLength(5);
    client.sendParts([parts[3], parts[0], parts[4], parts[1], parts[1], parts[2]]);

    const result = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(result).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: `Echo: ${message}` });
    // The model was called with the whole message, once.
    expect(upstreamUserTexts().filter((t) => t === message)).toHaveLength(1);
    // Every frame the gateway sent fits in API Gateway's frame; the result came as parts of one id, in order.
    expect(client.raw.every((r) => r.bytes <= MAX_FRAME_BYTES)).toBe(true);
    const resultPart = client.raw.find((r) => r.frame.type === 'part' && String(r.frame.data).startsWith('{"type":"result"'))!;
    const own = partsOfId(client, resultPart.frame.id as string);
    const count = own[0]!.frame.count as number;
    expect(count).toBeGreaterThanOrEqual(2);
    expect(own.map((r) => r.frame.index)).toEqual(Array.from({ length: count }, (_, i) => i));
    expect(own.every((r) => r.frame.count === count)).toBe(true);
    expect(JSON.parse(own.map((r) => r.frame.data as string).join(''))).toEqual(result);
    // Nothing else was answered: the session, the streamed text, the result.
    expect(client.frames.filter((f) => f.type !== 'assistant').map((f) => f.type)).toEqual(['session', 'result']);
    expect(
      client.frames
        .filter((f) => f.type === 'assistant')
        .map((f) => f.text)
        .join(''),
    ).toBe(`Echo: ${message}`);
    await client.close();
  });

  it('a tool_result over 32 KB in parts answers its client tool, and the model gets it whole', async () => {
    const client = await openSession({ tools: [readNote] });
    client.send({ type: 'user', message: 'Read it. [[tool:read_note {"title":"big"}]]' });
    const call = await client.next((f) => f.type === 'tool_use');
    const content = `The big note: ${'é and "quoted" words; '.repeat(2_000)}`;
    const text = JSON.stringify({ type: 'tool_result', tool_use_id: call.id, content });
    expect(Buffer.byteLength(text)).toBeGreaterThan(MAX_FRAME_BYTES);
    client.sendParts(partsOf(text, 'tr-1'));
    const result = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(result).toMatchObject({ type: 'result', subtype: 'success' });
    const withResult = gw.upstreams.anthropic!.requests.filter((r) => JSON.stringify(r.body).includes(call.id as string)).at(-1)!;
    const last = (withResult.body as { messages: { role: string; content: { type: string; tool_use_id?: string; content?: unknown }[] }[] }).messages.at(-1)!;
    expect(last.content.find((b) => b.type === 'tool_result')).toMatchObject({ tool_use_id: call.id, content });
    await client.close();
  });
});

describe('bad parts', () => {
  it('a part out of shape gets invalid_part (with its id when it has one) and is dropped', async () => {
    const client = await openSession();
    const cases: [unknown, Frame][] = [
      [
        { type: 'part', id: 'b1', index: 2, count: 2, data: 'x' },
        { type: 'error', error: 'invalid_part', message: 'part: index must be below count (parts are numbered from 0)', id: 'b1' },
      ],
      [
        { type: 'part', id: 'b2', index: 0, count: 65, data: 'x' },
        { type: 'error', error: 'invalid_part', message: 'part: count is at most 64: a message is sent in at most 64 parts', id: 'b2' },
      ],
      [
        { type: 'part', id: 'b 3', index: 0, count: 1, data: 'x' },
        { type: 'error', error: 'invalid_part', message: 'part: id is 1 to 64 characters among A-Z a-z 0-9 . _ : -', id: 'b 3' },
      ],
      [
        { type: 'part', index: 0, count: 1, data: 'x' },
        { type: 'error', error: 'invalid_part', message: 'part: id is required and must be a string' },
      ],
      [
        { type: 'part', id: 'b5', index: 0.5, count: 1, data: 'x' },
        { type: 'error', error: 'invalid_part', message: 'part: index must be a whole number', id: 'b5' },
      ],
      [
        { type: 'part', id: 'b6', index: 0, count: 1, data: 7 },
        { type: 'error', error: 'invalid_part', message: 'part: data is required and must be a string', id: 'b6' },
      ],
    ];
    for (const [sent, answer] of cases) {
      client.send(sent);
      expect(await client.next()).toEqual(answer);
    }
    await client.close();
  });

  it('a part whose count differs from its message is refused; the message keeps its parts and joins when the right ones come', async () => {
    const client = await openSession();
    const id = `mm-${randomUUID()}`;
    const parts = interruptParts(id, 3);
    client.send(parts[0]);
    // Stored (a pending part gets no answer) before the wrong one is sent: it is the first part that sets the count.
    await expect.poll(async () => (await partItems(`#${id}`)).length).toBeGreaterThan(0);
    client.send({ ...parts[1], count: 2 });
    expect(await client.next()).toEqual({
      type: 'error',
      error: 'invalid_part',
      message: `Part 1 of "${id}" says count 2, but the parts received before it say 3: every part of a message carries the same count`,
      id,
    });
    client.sendParts([parts[2], parts[1]]);
    // The joined frame is an interrupt, answered as one: there is no turn.
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_turn_running' });
    await client.close();
  });

  it('joined text that is not a frame gets invalid_frame naming the parts; a joined part too', async () => {
    const client = await openSession();
    client.sendParts(partsOf('{"type":"user","mess', 'j1', 10));
    expect(await client.next()).toEqual({
      type: 'error',
      error: 'invalid_frame',
      message: 'The message joined from the parts of "j1": The frame is not JSON',
      id: 'j1',
    });
    client.sendParts(partsOf(JSON.stringify({ type: 'part', id: 'inner', index: 0, count: 1, data: '{"type":"interrupt"}' }), 'j2', 20));
    expect(await client.next()).toEqual({
      type: 'error',
      error: 'invalid_frame',
      message: 'The message joined from the parts of "j2": a message sent in parts is not itself a "part"',
      id: 'j2',
    });
    await client.close();
  });

  it(`parts over ${MAX_JOINED_BYTES} bytes: message_too_large once, and the message's later parts are ignored`, async () => {
    const client = await openSession();
    const slice = 'x'.repeat(30_000);
    const parts = Array.from({ length: 10 }, (_, index) => ({ type: 'part', id: 'big', index, count: 10, data: slice }));
    // 9 parts hold 270,000 bytes: past the limit.
    for (const part of parts.slice(0, 9)) client.send(part);
    expect(await client.next()).toEqual({
      type: 'error',
      error: 'message_too_large',
      message: `The parts of "big" hold more than ${MAX_JOINED_BYTES} bytes, the most a message may have: it is dropped, and its further parts are ignored`,
      id: 'big',
    });
    client.send(parts[9]);
    client.send(parts[0]);
    client.send({ type: 'interrupt' });
    // The next answer is the interrupt's: the two parts got none.
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_turn_running' });
    expect(client.frames.filter((f) => f.type === 'error').map((f) => f.error)).toEqual(['message_too_large', 'no_turn_running']);
    await client.close();
  });
});

describe('the rate limit counts a part as an eighth of a frame', () => {
  it(`30 parts at once are not rate limited (30 frames would be, at ${FRAMES_PER_SECOND} a second)`, async () => {
    const client = await openSession();
    client.sendParts(interruptParts('many', 30));
    expect(await client.next()).toMatchObject({ type: 'error', error: 'no_turn_running' });
    expect(client.frames.filter((f) => f.type === 'error').map((f) => f.error)).toEqual(['no_turn_running']);
    await client.close();
  });

  it('in one second: a part costs an eighth of a frame, and the limit counts them so', async () => {
    const connectionId = `c-${randomUUID()}`;
    const caller = { projectId: gw.projectId, userId: 'rate', budget: { ai: 1, compute: 1, window: 'day' as const }, expiresAt: 9_999_999_999 };
    const at = Math.floor(Date.now() / 1000) * 1000 + 10_000;
    await putConnection(connectionId, caller, at - 5_000);
    const kinds: string[] = [];
    // Two frames and the rest of the second's frames in parts: the limit.
    const costs = ['frame', 'frame', ...Array<'part'>(8 * (FRAMES_PER_SECOND - 2)).fill('part')] as const;
    for (const cost of costs) kinds.push((await touchConnection(connectionId, at + 100, cost)).kind);
    expect(kinds).toEqual(costs.map(() => 'ok'));
    expect((await touchConnection(connectionId, at + 200, 'part')).kind).toBe('rate_limited');
    expect((await touchConnection(connectionId, at + 300, 'frame')).kind).toBe('rate_limited');
    // The next second starts again.
    expect((await touchConnection(connectionId, at + 1_000, 'frame')).kind).toBe('ok');
  });
});

describe('the stored parts (sessions/parts.ts)', () => {
  const part = (id: string, index: number, count: number, data: string) => ({ type: 'part' as const, id, index, count, data });

  it('every part sent twice at once: exactly one invocation joins the message, in index order; its data is then deleted', async () => {
    const connectionId = `c-${randomUUID()}`;
    const slices = Array.from({ length: 12 }, (_, i) => `<${i}>`);
    const outcomes = await Promise.all([...slices, ...slices].map((data, n) => receivePart(connectionId, part('m', n % 12, 12, data))));
    const joined = outcomes.filter((o): o is Extract<PartOutcome, { kind: 'joined' }> => o.kind === 'joined');
    expect(joined).toEqual([{ kind: 'joined', text: slices.join('') }]);
    expect(outcomes.every((o) => o.kind === 'joined' || o.kind === 'pending' || o.kind === 'repeated')).toBe(true);
    // Only the message's item stays (until its TTL), done: a late repeat is recognised.
    const items = await partItems(`#${connectionId}#`);
    expect(items.map((i) => i.pk)).toEqual([`parts#${connectionId}#m`]);
    expect(items[0]).toMatchObject({ count: 12, outcome: 'joined' });
    expect(await receivePart(connectionId, part('m', 3, 12, 'late'))).toEqual({ kind: 'repeated' });
  });

  it(`a message whose parts stopped for ${PARTS_TTL_SECONDS} s starts anew: its old parts are not joined into the new one`, async () => {
    const connectionId = `c-${randomUUID()}`;
    const t = Date.now();
    expect(await receivePart(connectionId, part('e', 0, 2, 'OLD'), t)).toEqual({ kind: 'pending' });
    const later = t + (PARTS_TTL_SECONDS + 1) * 1000;
    expect(await receivePart(connectionId, part('e', 1, 2, 'b'), later)).toEqual({ kind: 'pending' });
    expect(await receivePart(connectionId, part('e', 0, 2, 'a'), later + 1000)).toEqual({ kind: 'joined', text: 'ab' });
  });

  it('the first data of an index counts: a repeat with other data changes nothing', async () => {
    const connectionId = `c-${randomUUID()}`;
    expect(await receivePart(connectionId, part('r', 0, 2, 'first'))).toEqual({ kind: 'pending' });
    expect(await receivePart(connectionId, part('r', 0, 2, 'second'))).toEqual({ kind: 'repeated' });
    expect(await receivePart(connectionId, part('r', 1, 2, '!'))).toEqual({ kind: 'joined', text: 'first!' });
  });

  it('parts of one id on two connections are two messages', async () => {
    const [a, b] = [`c-${randomUUID()}`, `c-${randomUUID()}`];
    expect(await receivePart(a, part('same', 0, 2, 'a0'))).toEqual({ kind: 'pending' });
    expect(await receivePart(b, part('same', 1, 2, 'b1'))).toEqual({ kind: 'pending' });
    expect(await receivePart(a, part('same', 1, 2, 'a1'))).toEqual({ kind: 'joined', text: 'a0a1' });
    expect(await receivePart(b, part('same', 0, 2, 'b0'))).toEqual({ kind: 'joined', text: 'b0b1' });
  });
});
