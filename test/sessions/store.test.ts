import { randomUUID } from 'node:crypto';
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Caller } from '../../lambdas/auth/claims.ts';
import { env } from '../../lambdas/config/env.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { connectionKey, sessionKey, type PausedRun, type TurnRecord } from '../../lambdas/sessions/record.ts';
import type { SessionState } from '../../lambdas/sessions/states.ts';
import {
  bindConnection,
  claimTurn,
  createSession,
  deleteConnection,
  endTurn,
  extendConnection,
  getSession,
  heartbeatTurn,
  pauseTurn,
  putConnection,
  queueResume,
  queueTurn,
  recordClientResult,
  replaceOptions,
  requestStop,
  touchConnection,
} from '../../lambdas/sessions/store.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';

/**
 * The Sessions table's writes (lambdas/sessions/store.ts) against DynamoDB Local: each move of a session is its
 * flow's transition (sessions/states.ts) and is refused from a state the flow does not move from, and every write,
 * connections' included, goes through the write-once layer (store/conditional.ts).
 */

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  resetInstanceState();
  await gw?.stop();
});

const caller: Caller = { projectId: 'p-store', userId: 'u-store', budget: { ai: 1, compute: 1, window: 'day' }, expiresAt: 4_000_000_000 };
const options = { model: 'claude-sonnet-4-6' } as Parameters<typeof createSession>[0]['options'];
const paused: PausedRun = {
  run: {} as PausedRun['run'],
  calls: [{ id: 'toolu_1', name: 'device_time', input: {}, client: true }],
  serverResults: [],
};

const item = async (key: { pk: string }) =>
  (await documentClient().send(new GetCommand({ TableName: env().SESSIONS_TABLE, Key: key, ConsistentRead: true }))).Item;

async function newSession(): Promise<string> {
  const sessionId = randomUUID();
  await createSession({ sessionId, projectId: caller.projectId, userId: caller.userId, options, createdAt: Date.now() });
  return sessionId;
}

const turnOf = (id: string): TurnRecord => ({ id, connectionId: 'c-1', callbackUrl: 'http://127.0.0.1/cb', caller, message: 'hi', queuedAt: Date.now() });

/** A session brought to `state` through the flow's own moves; answers it with its turn's id. */
async function sessionIn(state: SessionState): Promise<{ sessionId: string; turnId: string }> {
  const sessionId = await newSession();
  const turnId = randomUUID();
  if (state === 'idle') return { sessionId, turnId };
  expect((await queueTurn(sessionId, turnOf(turnId))).ok).toBe(true);
  if (state === 'queued') return { sessionId, turnId };
  expect((await claimTurn(sessionId, turnId)).ok).toBe(true);
  if (state === 'running') return { sessionId, turnId };
  expect((await pauseTurn(sessionId, turnId, [{ role: 'user', content: 'hi' }], paused)).ok).toBe(true);
  return { sessionId, turnId };
}

describe('a session moves along its flow only', () => {
  it('idle → queued → running → awaiting_tools → queued → running → idle, each move touching it', async () => {
    const { sessionId, turnId } = await sessionIn('awaiting_tools');
    expect((await getSession(sessionId))!).toMatchObject({ state: 'awaiting_tools', version: 4 });
    expect(await recordClientResult(sessionId, turnId, 'toolu_1', { content: '14:00' })).toMatchObject({ ok: true, session: { state: 'awaiting_tools' } });
    expect(await queueResume(sessionId, turnId)).toMatchObject({ ok: true, session: { state: 'queued' } });
    expect(await claimTurn(sessionId, turnId)).toMatchObject({ ok: true, session: { state: 'running' } });
    expect(await heartbeatTurn(sessionId, turnId)).toBe(true);
    const ended = await endTurn(sessionId, turnId, [{ role: 'user', content: 'hi' }]);
    expect(ended).toMatchObject({ ok: true, session: { state: 'idle', version: 8 } });
    expect(ended.ok && ended.session.turn).toBeUndefined();
  });

  it('each move is refused from a state its transition does not start from, with the session as it was', async () => {
    const refusals: [SessionState, string, (s: string, t: string) => Promise<{ ok: boolean; seen?: { state: string } | undefined }>][] = [
      ['queued', 'queueTurn', (s) => queueTurn(s, turnOf(randomUUID()))],
      ['idle', 'claimTurn', (s, t) => claimTurn(s, t)],
      ['running', 'claimTurn', (s, t) => claimTurn(s, t)],
      ['queued', 'pauseTurn', (s, t) => pauseTurn(s, t, [], paused)],
      ['awaiting_tools', 'pauseTurn', (s, t) => pauseTurn(s, t, [], paused)],
      ['running', 'queueResume', (s, t) => queueResume(s, t)],
      ['queued', 'endTurn (from running)', (s, t) => endTurn(s, t, undefined)],
      ['awaiting_tools', 'endTurn (from queued, running)', (s, t) => endTurn(s, t, undefined, { from: ['queued', 'running'] })],
      ['running', 'recordClientResult', (s, t) => recordClientResult(s, t, 'toolu_1', { content: 'x' })],
      ['awaiting_tools', 'requestStop', (s, t) => requestStop(s, t, 'interrupted')],
    ];
    for (const [state, name, write] of refusals) {
      const { sessionId, turnId } = await sessionIn(state);
      const before = await getSession(sessionId);
      const r = await write(sessionId, turnId);
      expect(r, `${name} in ${state}`).toMatchObject({ ok: false, seen: { state } });
      expect(await getSession(sessionId), `${name} in ${state}`).toEqual(before);
    }
    const { sessionId, turnId } = await sessionIn('queued');
    expect(await heartbeatTurn(sessionId, turnId)).toBe(false);
  });

  it('a move the flow forbids is never written: idle → idle throws before any write', async () => {
    const { sessionId, turnId } = await sessionIn('idle');
    const before = await item(sessionKey(sessionId));
    await expect(endTurn(sessionId, turnId, undefined, { from: ['idle'] })).rejects.toThrow('Status idle cannot move to idle');
    expect(await item(sessionKey(sessionId))).toEqual(before);
  });

  it('the moves that name a turn are refused for another turn', async () => {
    const { sessionId } = await sessionIn('queued');
    expect(await claimTurn(sessionId, 'another')).toMatchObject({ ok: false, seen: { state: 'queued' } });
    expect(await endTurn(sessionId, 'another', undefined, { from: ['queued'] })).toMatchObject({ ok: false, seen: { state: 'queued' } });
  });
});

describe('every session write goes through the write-once layer', () => {
  it('replaceOptions: a token of its own on the session; refused (thrown) for a session that does not exist', async () => {
    const sessionId = await newSession();
    const created = (await item(sessionKey(sessionId)))!;
    await replaceOptions(sessionId, { ...options, model: 'claude-haiku-4-5' });
    const replaced = (await item(sessionKey(sessionId)))!;
    expect(replaced.writeToken).toMatch(/^[0-9a-f-]{36}$/);
    expect(replaced.writeToken).not.toBe(created.writeToken);
    expect(JSON.parse(replaced.options as string)).toMatchObject({ model: 'claude-haiku-4-5' });
    expect(replaced.version).toBe(2);
    await expect(replaceOptions(randomUUID(), options)).rejects.toThrow(/does not exist/);
  });

  it('putConnection and bindConnection: tokens of their own; bind refused (thrown) for an unknown connection', async () => {
    const connectionId = `c-${randomUUID()}`;
    await putConnection(connectionId, caller);
    const put = (await item(connectionKey(connectionId)))!;
    expect(put.writeToken).toMatch(/^[0-9a-f-]{36}$/);
    await bindConnection(connectionId, 's-1');
    const bound = (await item(connectionKey(connectionId)))!;
    expect(bound).toMatchObject({ sessionId: 's-1' });
    expect(bound.writeToken).not.toBe(put.writeToken);
    await expect(bindConnection(`c-${randomUUID()}`, 's-1')).rejects.toThrow(/is gone/);
  });

  it('deleteConnection answers the connection once, then nothing; with ifSweepAt, only if no frame came', async () => {
    const connectionId = `c-${randomUUID()}`;
    await putConnection(connectionId, caller);
    await bindConnection(connectionId, 's-2');
    const sweepAt = (await item(connectionKey(connectionId)))!.sweepAt as number;
    expect(await deleteConnection(connectionId, { ifSweepAt: sweepAt - 1 })).toBeUndefined();
    expect(await item(connectionKey(connectionId))).toBeDefined();
    expect(await deleteConnection(connectionId, { ifSweepAt: sweepAt })).toMatchObject({ connectionId, sessionId: 's-2' });
    expect(await item(connectionKey(connectionId))).toBeUndefined();
    expect(await deleteConnection(connectionId)).toBeUndefined();
  });

  it('a connection closed but not yet deleted is gone for every other write', async () => {
    const connectionId = `c-${randomUUID()}`;
    await putConnection(connectionId, caller);
    // As a delete that stopped between its close and its delete leaves it.
    await documentClient().send(
      new UpdateCommand({
        TableName: env().SESSIONS_TABLE,
        Key: connectionKey(connectionId),
        UpdateExpression: 'SET closedAt = :now',
        ExpressionAttributeValues: { ':now': Date.now() },
      }),
    );
    const closed = await item(connectionKey(connectionId));
    expect(await touchConnection(connectionId)).toEqual({ kind: 'unknown' });
    await expect(bindConnection(connectionId, 's-3')).rejects.toThrow(/is gone/);
    await extendConnection(connectionId, Date.now() + 1000);
    expect(await deleteConnection(connectionId)).toBeUndefined();
    expect(await item(connectionKey(connectionId))).toEqual(closed);
  });

  describe('whose answers are lost once (the SDK sends them again)', () => {
    let loss: AnswerLoss;
    beforeAll(() => {
      loss = loseAnswers();
    });
    const onKey = (key: { pk: string }) => (input: WriteInput) => input.Key?.pk?.S === key.pk || input.Item?.pk?.S === key.pk;

    it('putConnection, bindConnection and replaceOptions succeed, and deleteConnection still answers the connection', async () => {
      const connectionId = `c-${randomUUID()}`;
      loss.loseNext('putConnection', onKey(connectionKey(connectionId)));
      await putConnection(connectionId, caller);
      loss.loseNext('bindConnection', onKey(connectionKey(connectionId)));
      await bindConnection(connectionId, 's-4');
      const sessionId = await newSession();
      loss.loseNext('replaceOptions', onKey(sessionKey(sessionId)));
      await replaceOptions(sessionId, options);
      expect((await item(sessionKey(sessionId)))!.version).toBe(2);
      loss.loseNext('deleteConnection', onKey(connectionKey(connectionId)));
      expect(await deleteConnection(connectionId)).toMatchObject({ connectionId, sessionId: 's-4' });
      expect(loss.lost).toEqual(['putConnection', 'bindConnection', 'replaceOptions', 'deleteConnection']);
      expect(loss.pending()).toEqual([]);
      expect(await item(connectionKey(connectionId))).toBeUndefined();
    });
  });
});
