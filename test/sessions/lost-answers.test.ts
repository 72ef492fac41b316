import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { SessionStates, STATE_PLACEHOLDERS, type SessionState } from '../../lambdas/sessions/states.ts';
import { getSession } from '../../lambdas/sessions/store.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';
import { connectWs, type Frame } from '../support/ws.ts';

/**
 * A /ws session whose every move of the Sessions table loses its answer once (a connection dropped after DynamoDB
 * applied the write): the SDK sends the same write again, and that second send meets the first one's result. Each
 * write must read that as its own success (store/conditional.ts), not as another writer's move:
 *
 *   createSession  the PutItem of the session             (else: "exists already", an internal_error frame)
 *   queueTurn      idle → queued                           (else: turn_in_progress for the user's own message)
 *   claimTurn      queued → running                        (else: "ignored", the turn stuck running, no result)
 *   pauseTurn      running → awaiting_tools                (else: "could not be saved", no tool_use frame)
 *   recordClientResult  the client's tool result           (else: unknown_tool_use_id, the turn never resumed)
 *   queueResume    awaiting_tools → queued                 (else: the resume never handed off, no result)
 *   endTurn        the turn's end: → idle                  (else: no result frame, the session left as it was)
 *
 * The first turn calls a client-side tool (so it pauses, is answered, resumes and ends); a second turn, with no loss,
 * shows the session is still usable and remembers the first.
 */
const MODEL = 'claude-sonnet-4-6';
const FINAL = 'Hello from the simulated upstream.';
const USER = 'ws-lost-answers';

let gw: TestGateway;
let answers: AnswerLoss;

beforeAll(async () => {
  gw = await startTestGateway();
  // Nothing in flight yet: the write client is built again with the step that loses answers.
  answers = loseAnswers();
});
afterAll(async () => {
  resetInstanceState();
  await gw?.stop();
});

const deviceTime = {
  name: 'device_time',
  description: 'The time on the user’s device',
  input_schema: { type: 'object', properties: { zone: { type: 'string' } } },
};

/** A write on the Sessions table. */
const onSessions = (input: WriteInput) => input.TableName === process.env.SESSIONS_TABLE;
/** An UpdateItem of the session item `sessionId` whose UpdateExpression holds `part`. */
const updating = (sessionId: string, part: string) => (input: WriteInput) =>
  onSessions(input) && input.Key?.pk?.S === `session#${sessionId}` && (input.UpdateExpression ?? '').includes(part);
/** An UpdateItem of the session item `sessionId` moving it to `to` (its transition, sessions/states.ts), and holding `part`. */
const moving = (sessionId: string, to: SessionState, part = '') => {
  const t = SessionStates.transition(to, STATE_PLACEHOLDERS);
  const target = t.set.slice(t.set.indexOf(' = ') + 3);
  return (input: WriteInput) => updating(sessionId, `${t.set}${part}`)(input) && input.ExpressionAttributeValues?.[target]?.S === to;
};

describe('a /ws session whose writes each lose their answer once', () => {
  it('session, client tool_use and a success result per turn; a second turn works; stored idle with both turns', async () => {
    const token = await gw.token({ user: USER });
    const client = await connectWs(gw.websocket!.url, token);

    // createSession: the session's PutItem (its id is not known before; the user is).
    answers.loseNext('createSession', (input) => onSessions(input) && input.Item?.pk?.S?.startsWith('session#') === true && input.Item.userId?.S === USER);
    client.send({ type: 'session.start', options: { model: MODEL, tools: [deviceTime] } });
    const session = await client.next((f) => f.type === 'session' || f.type === 'error');
    expect(session).toMatchObject({ type: 'session', resumed: false, state: 'idle', messages: 0 });
    const sessionId = session.sessionId as string;
    expect(answers.lost).toEqual(['createSession']);

    // The moves of the first turn, each losing its answer once (in the order they happen).
    answers.loseNext('queueTurn', moving(sessionId, 'queued', ', turn = :turn'));
    answers.loseNext('claimTurn', moving(sessionId, 'running'));
    answers.loseNext('pauseTurn', moving(sessionId, 'awaiting_tools'));
    answers.loseNext('recordClientResult', updating(sessionId, 'turn.clientResults.#id = :result'));
    answers.loseNext('queueResume', moving(sessionId, 'queued', ', turn.queuedAt = :now'));
    answers.loseNext('endTurn', moving(sessionId, 'idle'));

    // Turn 1: the model asks for a client tool; the turn pauses for it.
    client.send({ type: 'user', message: 'What time is it? [[tool:device_time {"zone":"CET"}]]' });
    const call = await client.next((f) => f.type === 'tool_use' || f.type === 'result' || f.type === 'error');
    expect(call).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'device_time', input: { zone: 'CET' } });
    expect(answers.lost).toEqual(['createSession', 'queueTurn', 'claimTurn', 'pauseTurn']);
    expect((await getSession(sessionId))?.state).toBe('awaiting_tools');

    client.send({ type: 'tool_result', tool_use_id: call.id, content: '14:00' });
    const result1 = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(result1).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: FINAL, num_turns: 2, sessionId });

    // Every rule fired, each once, in the order of the turn's moves.
    expect(answers.pending()).toEqual([]);
    expect(answers.lost).toEqual(['createSession', 'queueTurn', 'claimTurn', 'pauseTurn', 'recordClientResult', 'queueResume', 'endTurn']);

    // Turn 2: the session goes on, with the first turn in its conversation.
    client.send({ type: 'user', message: 'Thanks [[words:2]]' });
    const result2 = await client.next((f) => f.type === 'result' || f.type === 'error');
    expect(result2).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: 'word1 word2', num_turns: 1, sessionId });
    const requests = gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages');
    const sent = (requests.at(-1)!.body as { messages: { role: string; content: unknown }[] }).messages;
    expect(sent).toHaveLength(5);
    expect(JSON.stringify(sent[0])).toContain('What time is it?');

    // Each frame came once: one session, one tool_use, one result per turn, and no error at all.
    const frames = client.frames;
    const ofType = (type: string) => frames.filter((f: Frame) => f.type === type);
    expect(ofType('error')).toEqual([]);
    expect(ofType('session')).toHaveLength(1);
    expect(ofType('tool_use')).toHaveLength(1);
    expect(ofType('result').map((f) => f.subtype)).toEqual(['success', 'success']);

    // The stored session: idle, no turn, the conversation holding both turns (4 messages, then 2).
    const stored = (await getSession(sessionId))!;
    expect(stored.state).toBe('idle');
    expect(stored.turn).toBeUndefined();
    expect(stored.conversation.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant', 'user', 'assistant']);
    expect(JSON.stringify(stored.conversation[0])).toContain('What time is it?');
    expect(JSON.stringify(stored.conversation[1])).toContain('device_time');
    expect(JSON.stringify(stored.conversation[2])).toContain('14:00');
    expect(JSON.stringify(stored.conversation[3])).toContain(FINAL);
    expect(JSON.stringify(stored.conversation[4])).toContain('Thanks');
    expect(JSON.stringify(stored.conversation[5])).toContain('word1 word2');
    // No write token leaks into what the store answers.
    expect(stored).not.toHaveProperty('writeToken');

    await client.close();
  });
});
