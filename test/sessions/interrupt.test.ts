import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { getSession } from '../../lambdas/sessions/store.ts';
import type { RecordedRequest } from '../../bin/local/upstreams/types.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { connectWs, type Frame, type WsClient } from '../support/ws.ts';

/**
 * /ws interrupts and disconnects (issue 16, done-when 3) against the local runtime and the simulated upstream: a slow
 * stream (`[[words:400]] [[delay:30]]`, 12 s if left alone) stopped after a few deltas. The upstream sees its call
 * aborted, the turn is charged for what it produced (the ledger's delta, to the microdollar), nothing stays held, and
 * the partial text is kept in the conversation for the next turn.
 */
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const SLOW = '[[words:400]] [[delay:30]]';
const ALL_WORDS = Array.from({ length: 400 }, (_, i) => `word${i + 1}`).join(' ');
const budget = { ai: 10_000_000, compute: 3600, window: 'day' as const };

async function newUser() {
  const id = `ws-interrupt-${++seq}`;
  const token = await gw.token({ user: id, budget });
  return { id, token, usage: () => readUsage({ projectId: gw.projectId, userId: id, budget }) };
}

async function openSession(client: WsClient, frame: Record<string, unknown> = { options: {} }): Promise<Frame> {
  client.send({ type: 'session.start', ...frame });
  const session = await client.next((f) => f.type === 'session' || f.type === 'error');
  expect(session.type).toBe('session');
  return session;
}

const endOfTurn = (client: WsClient, timeoutMs?: number) => client.next((f) => f.type === 'result' || f.type === 'error', timeoutMs);

type Message = { role: string; content: string | Record<string, unknown>[] };
const messagesRequests = () => gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages');
const bodyMessages = (r: RecordedRequest) => (r.body as { messages: Message[] }).messages;
const textOf = (m: Message) =>
  typeof m.content === 'string'
    ? m.content
    : m.content
        .filter((b) => b.type === 'text')
        .map((b) => b.text)
        .join('');

/** The upstream request whose last user message says `marker`. */
function requestSaying(marker: string): RecordedRequest {
  const found = messagesRequests().filter((r) => textOf(bodyMessages(r).at(-1)!).includes(marker));
  expect(found).toHaveLength(1);
  return found[0]!;
}

async function until<T>(what: string, probe: () => Promise<T> | T, ok: (v: T) => boolean, timeoutMs = 5000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (ok(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: still ${JSON.stringify(value)} after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Waits for `n` assistant frames of the turn in progress. */
async function deltas(client: WsClient, n: number): Promise<void> {
  for (let i = 0; i < n; i++)
    await client.next((f) => f.type === 'assistant' || f.type === 'result' || f.type === 'error').then((f) => expect(f.type).toBe('assistant'));
}

describe('/ws interrupt', () => {
  it('during a slow stream: the upstream call is aborted, result interrupted with the partial text, charged exactly, nothing held', async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    const before = await u.usage();
    const { sessionId } = await openSession(client);

    const from = client.frames.length;
    client.send({ type: 'user', message: `Tell me a long story. ${SLOW}` });
    await deltas(client, 3);
    const sentAt = Date.now();
    client.send({ type: 'interrupt' });
    const result = await endOfTurn(client);
    // Seen within a poll or two, not after the 12 s the stream would take.
    expect(Date.now() - sentAt).toBeLessThan(2000);
    expect(result).toMatchObject({ type: 'result', subtype: 'interrupted', is_error: true, num_turns: 1, sessionId, error: 'The turn was interrupted' });

    // The result's text is what was streamed: every delta posted before it, nothing more.
    const streamed = client.frames
      .slice(from)
      .filter((f) => f.type === 'assistant')
      .map((f) => f.text as string)
      .join('');
    const text = result.text as string;
    expect(text.length).toBeGreaterThan(0);
    expect(text.startsWith(streamed)).toBe(true);
    expect(text).toBe(streamed);
    expect(ALL_WORDS.startsWith(text)).toBe(true);
    expect(text.length).toBeLessThan(ALL_WORDS.length);

    // Charged for what was produced, exactly what the ledger grew by.
    expect(result.total_cost_microdollars as number).toBeGreaterThan(0);
    expect(result.total_cost_usd).toBe((result.total_cost_microdollars as number) / 1_000_000);
    const afterInterrupt = await u.usage();
    expect(afterInterrupt.used.ai - before.used.ai).toBe(result.total_cost_microdollars);
    expect((result.usage as { output_tokens: number }).output_tokens).toBeLessThan(400);

    // The upstream saw its call aborted.
    const call = requestSaying('Tell me a long story.');
    await until(
      'the upstream call outcome',
      () => call.outcome,
      (o) => o !== undefined,
    );
    expect(call.outcome).toBe('client_closed');

    // Nothing held: no reservation, no lease.
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);

    // The next turn sees the partial answer in its conversation.
    client.send({ type: 'user', message: 'Go on, briefly. [[words:2]]' });
    const next = await endOfTurn(client);
    expect(next).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2', sessionId });
    const messages = bodyMessages(requestSaying('Go on, briefly.'));
    expect(messages).toHaveLength(3);
    expect(messages[1]).toEqual({ role: 'assistant', content: [{ type: 'text', text }] });

    const after = await u.usage();
    expect(after.used.ai - before.used.ai).toBe((result.total_cost_microdollars as number) + (next.total_cost_microdollars as number));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    await client.close();
  });

  it('interrupt with no turn running → no_turn_running; the session stays usable', async () => {
    const u = await newUser();
    const client = await connectWs(gw.websocket!.url, u.token);
    await openSession(client);
    client.send({ type: 'interrupt' });
    expect(await endOfTurn(client)).toMatchObject({ type: 'error', error: 'no_turn_running' });

    client.send({ type: 'user', message: 'Hi [[words:2]]' });
    expect(await endOfTurn(client)).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2' });
    // After a finished turn there is nothing to interrupt either.
    client.send({ type: 'interrupt' });
    expect(await endOfTurn(client)).toMatchObject({ type: 'error', error: 'no_turn_running' });
    await client.close();
  });

  it('a client that disconnects mid-stream: the upstream is aborted, nothing held; resumed on a new connection it is idle and goes on', async () => {
    const u = await newUser();
    const first = await connectWs(gw.websocket!.url, u.token);
    const before = await u.usage();
    const { sessionId } = await openSession(first);
    first.send({ type: 'user', message: `Tell me another long story. ${SLOW}` });
    await deltas(first, 3);
    await first.close();

    // The turn stops: the upstream call is aborted, the session is idle again, its charges are settled.
    const call = requestSaying('Tell me another long story.');
    await until(
      'the upstream call outcome',
      () => call.outcome,
      (o) => o !== undefined,
    );
    expect(call.outcome).toBe('client_closed');
    await until(
      'the session state',
      async () => (await getSession(sessionId as string))?.state,
      (s) => s === 'idle',
    );
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    const charged = (await u.usage()).used.ai - before.used.ai;
    expect(charged).toBeGreaterThan(0);

    // A new connection resumes it: idle, with the user's message and the partial answer kept.
    const second = await connectWs(gw.websocket!.url, u.token);
    const resumed = await openSession(second, { sessionId });
    expect(resumed).toMatchObject({ type: 'session', sessionId, resumed: true, state: 'idle', messages: 2 });
    second.send({ type: 'user', message: 'And the end? [[words:2]]' });
    const next = await endOfTurn(second);
    expect(next).toMatchObject({ type: 'result', subtype: 'success', text: 'word1 word2', sessionId });
    const messages = bodyMessages(requestSaying('And the end?'));
    expect(messages).toHaveLength(3);
    expect(messages[1]!.role).toBe('assistant');
    const partial = textOf(messages[1]!);
    expect(partial.length).toBeGreaterThan(0);
    expect(ALL_WORDS.startsWith(partial)).toBe(true);
    // No frame of the stopped turn reached the new connection: only the new turn's.
    expect(second.frames.filter((f) => f.type === 'result')).toHaveLength(1);

    const after = await u.usage();
    expect(after.used.ai - before.used.ai).toBe(charged + (next.total_cost_microdollars as number));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    expect(await liveLeases(gw.developerId)).toEqual([]);
    await second.close();
  });
});
