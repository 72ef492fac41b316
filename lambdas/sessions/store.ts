import type Anthropic from '@anthropic-ai/sdk';
import { DeleteCommand, GetCommand, PutCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import type { Caller } from '../auth/claims.ts';
import { env } from '../config/env.ts';
import { conditionalPut, conditionalUpdate, type StoredItem } from '../store/conditional.ts';
import { documentClient, isConditionFailure } from '../store/dynamo.ts';
import {
  connectionFromItem,
  connectionKey,
  encodeConversation,
  sessionFromItem,
  sessionKey,
  type ClientResult,
  type ConnectionRecord,
  type PausedRun,
  type SessionRecord,
  type StopRequest,
  type TurnRecord,
} from './record.ts';

/**
 * The Sessions table's writes (docs/ws.md, "How a turn runs"). Each move of a session's state is one conditional
 * write naming the state and the turn it expects, so a repeated queue message, a late frame or the sweeper finds
 * the turn moved on and does nothing. Every write pushes the session's expiry (SESSION_RETENTION_SECONDS after its
 * last change: the table's TTL deletes it then).
 */

/** A running turn's worker renews its claim this often… */
export const TURN_HEARTBEAT_MS = 20_000;
/** …and the sweeper frees a turn whose claim is older than this (the worker stopped: `turn_lost`). */
export const TURN_STALE_MS = 60_000;
/** A queued turn no worker has claimed for this long is freed too (its queue message was lost). */
export const TURN_QUEUED_STALE_MS = 120_000;
/** How long a connection item outlives its connect: API Gateway closes every connection after 2 hours. */
const CONNECTION_TTL_SECONDS = 3 * 3600;

export const SWEEP_CONNECTION = 'connection';
export const SWEEP_TURN = 'turn';

const table = () => env().SESSIONS_TABLE;
const expiry = (now: number) => Math.floor(now / 1000) + env().SESSION_RETENTION_SECONDS;

/** Every session write: version, updatedAt and the expiry move together. */
function touched(now: number) {
  return { set: 'version = version + :one, updatedAt = :now, expiresAt = :exp', values: { ':one': 1, ':now': now, ':exp': expiry(now) } };
}

export async function getSession(sessionId: string): Promise<SessionRecord | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: sessionKey(sessionId), ConsistentRead: true }));
  return out.Item ? sessionFromItem(out.Item) : undefined;
}

export async function createSession(session: Omit<SessionRecord, 'version' | 'updatedAt' | 'turn' | 'state' | 'conversation'>): Promise<void> {
  // Conditional (a new id never meets an item), and once even when the SDK sends it twice (store/conditional.ts).
  const created = await conditionalPut({
    TableName: table(),
    Item: {
      ...sessionKey(session.sessionId),
      sessionId: session.sessionId,
      projectId: session.projectId,
      userId: session.userId,
      options: JSON.stringify(session.options),
      conversation: encodeConversation([]),
      messages: 0,
      state: 'idle',
      version: 1,
      createdAt: session.createdAt,
      updatedAt: session.createdAt,
      expiresAt: expiry(session.createdAt),
    },
    ConditionExpression: 'attribute_not_exists(pk)',
  });
  if (!created.ok) throw new Error(`Session ${session.sessionId} exists already`);
}

/** Replaces a session's options (a resume that gives new ones): they apply from its next model call. */
export async function replaceOptions(sessionId: string, options: SessionRecord['options'], now = Date.now()): Promise<void> {
  const t = touched(now);
  await documentClient().send(
    new UpdateCommand({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET options = :options, ${t.set}`,
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':options': JSON.stringify(options), ...t.values },
    }),
  );
}

export type Moved = { ok: true; session: SessionRecord } | { ok: false; seen: SessionRecord | undefined };

function moved(result: { ok: true; attributes?: StoredItem } | { ok: false; seen: StoredItem | undefined }): Moved {
  if (result.ok) return { ok: true, session: sessionFromItem(result.attributes!) };
  return { ok: false, seen: result.seen ? sessionFromItem(result.seen) : undefined };
}

/** idle → queued: a user's message becomes a turn for a worker. */
export async function queueTurn(sessionId: string, turn: TurnRecord, now = Date.now()): Promise<Moved> {
  const t = touched(now);
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET #state = :queued, turn = :turn, sweepShard = :shard, sweepAt = :sweepAt, ${t.set}`,
      ConditionExpression: '#state = :idle',
      ExpressionAttributeNames: { '#state': 'state' },
      ExpressionAttributeValues: {
        ':queued': 'queued',
        ':idle': 'idle',
        ':turn': turn,
        ':shard': SWEEP_TURN,
        ':sweepAt': now + TURN_QUEUED_STALE_MS,
        ...t.values,
      },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/** queued → running, by the worker the turn's message reached (a repeated message finds it running and stops). */
export async function claimTurn(sessionId: string, turnId: string, now = Date.now()): Promise<Moved> {
  const t = touched(now);
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET #state = :running, sweepAt = :sweepAt, ${t.set}`,
      ConditionExpression: '#state = :queued AND turn.id = :turn',
      ExpressionAttributeNames: { '#state': 'state' },
      ExpressionAttributeValues: { ':running': 'running', ':queued': 'queued', ':turn': turnId, ':sweepAt': now + TURN_STALE_MS, ...t.values },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/** The running turn's worker is alive: the sweeper leaves it alone for another TURN_STALE_MS. */
export async function heartbeatTurn(sessionId: string, turnId: string, now = Date.now()): Promise<boolean> {
  const result = await conditionalUpdate({
    TableName: table(),
    Key: sessionKey(sessionId),
    UpdateExpression: 'SET sweepAt = :sweepAt',
    ConditionExpression: '#state = :running AND turn.id = :turn',
    ExpressionAttributeNames: { '#state': 'state' },
    ExpressionAttributeValues: { ':running': 'running', ':turn': turnId, ':sweepAt': now + TURN_STALE_MS },
  });
  return result.ok;
}

/**
 * What a running turn's watch reads every poll: whether it still owns the turn, whether it is asked to stop, and the
 * connection its frames go to now (a resume on another connection moves it: moveTurn).
 */
export async function turnSignals(
  sessionId: string,
  turnId: string,
): Promise<{ owned: boolean; stop?: StopRequest; connection?: { connectionId: string; callbackUrl: string } }> {
  const out = await documentClient().send(
    new GetCommand({
      TableName: table(),
      Key: sessionKey(sessionId),
      ConsistentRead: true,
      ProjectionExpression: '#state, turn.id, turn.#stop, turn.connectionId, turn.callbackUrl',
      ExpressionAttributeNames: { '#state': 'state', '#stop': 'stop' },
    }),
  );
  const item = out.Item as { state?: string; turn?: { id?: string; stop?: StopRequest; connectionId?: string; callbackUrl?: string } } | undefined;
  const owned = item?.state === 'running' && item.turn?.id === turnId;
  const connection =
    owned && item.turn?.connectionId && item.turn.callbackUrl ? { connectionId: item.turn.connectionId, callbackUrl: item.turn.callbackUrl } : undefined;
  return { owned, ...(item?.turn?.stop ? { stop: item.turn.stop } : {}), ...(connection ? { connection } : {}) };
}

/**
 * running (or, for the sweeper and a refused turn, queued) → idle with the turn's conversation: the turn is over.
 * `conversation` undefined keeps the stored one.
 */
export async function endTurn(
  sessionId: string,
  turnId: string,
  conversation: Anthropic.MessageParam[] | undefined,
  opts: { from?: readonly ('queued' | 'running' | 'awaiting_tools')[]; now?: number; version?: number } = {},
): Promise<Moved> {
  const now = opts.now ?? Date.now();
  const from = opts.from ?? ['running'];
  const t = touched(now);
  const stored = conversation ? { ':conversation': encodeConversation(conversation), ':messages': conversation.length } : {};
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET #state = :idle, ${conversation ? 'conversation = :conversation, messages = :messages, ' : ''}${t.set} REMOVE turn, sweepShard, sweepAt`,
      ConditionExpression: `#state IN (${from.map((_, i) => `:from${i}`).join(', ')}) AND turn.id = :turn${opts.version === undefined ? '' : ' AND version = :read'}`,
      ExpressionAttributeNames: { '#state': 'state' },
      ExpressionAttributeValues: {
        ':idle': 'idle',
        ':turn': turnId,
        ...Object.fromEntries(from.map((s, i) => [`:from${i}`, s])),
        ...stored,
        ...(opts.version === undefined ? {} : { ':read': opts.version }),
        ...t.values,
      },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/** running → awaiting_tools: the model called client-side tools; the session holds nothing while the client works. */
export async function pauseTurn(
  sessionId: string,
  turnId: string,
  conversation: Anthropic.MessageParam[],
  paused: PausedRun,
  now = Date.now(),
): Promise<Moved> {
  const t = touched(now);
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET #state = :awaiting, conversation = :conversation, messages = :messages, turn.paused = :paused, turn.pending = :pending, turn.clientResults = :none, ${t.set} REMOVE turn.message, sweepShard, sweepAt`,
      ConditionExpression: '#state = :running AND turn.id = :turn',
      ExpressionAttributeNames: { '#state': 'state' },
      ExpressionAttributeValues: {
        ':awaiting': 'awaiting_tools',
        ':running': 'running',
        ':turn': turnId,
        ':conversation': encodeConversation(conversation),
        ':messages': conversation.length,
        ':paused': JSON.stringify(paused),
        ':pending': paused.calls.filter((c) => c.client).map((c) => c.id),
        ':none': {},
        ...t.values,
      },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/** One client result of a paused turn, once: the id must be pending and not answered yet. */
export async function recordClientResult(sessionId: string, turnId: string, toolUseId: string, result: ClientResult, now = Date.now()): Promise<Moved> {
  const t = touched(now);
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET turn.clientResults.#id = :result, ${t.set}`,
      ConditionExpression: '#state = :awaiting AND turn.id = :turn AND contains(turn.pending, :id) AND attribute_not_exists(turn.clientResults.#id)',
      ExpressionAttributeNames: { '#state': 'state', '#id': toolUseId },
      ExpressionAttributeValues: { ':awaiting': 'awaiting_tools', ':turn': turnId, ':id': toolUseId, ':result': result, ...t.values },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/** awaiting_tools → queued: every result is in; a worker continues the turn (on `connection`, the latest one). */
export async function queueResume(sessionId: string, turnId: string, now = Date.now()): Promise<Moved> {
  const t = touched(now);
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET #state = :queued, turn.queuedAt = :now, sweepShard = :shard, sweepAt = :sweepAt, ${t.set}`,
      ConditionExpression: '#state = :awaiting AND turn.id = :turn',
      ExpressionAttributeNames: { '#state': 'state' },
      ExpressionAttributeValues: {
        ':queued': 'queued',
        ':awaiting': 'awaiting_tools',
        ':turn': turnId,
        ':shard': SWEEP_TURN,
        ':sweepAt': now + TURN_QUEUED_STALE_MS,
        ...t.values,
      },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/** Asks the queued or running turn to stop (its worker polls for it). */
export async function requestStop(sessionId: string, turnId: string, stop: StopRequest, opts: { connectionId?: string; now?: number } = {}): Promise<Moved> {
  const now = opts.now ?? Date.now();
  const t = touched(now);
  return moved(
    await conditionalUpdate({
      TableName: table(),
      Key: sessionKey(sessionId),
      UpdateExpression: `SET turn.#stop = :stop, ${t.set}`,
      // A client leaving does not replace its own interrupt: were it to come back, the interrupt must still hold.
      ConditionExpression: `#state IN (:queued, :running) AND turn.id = :turn${opts.connectionId ? ' AND turn.connectionId = :conn' : ''}${stop === 'disconnected' ? ' AND (attribute_not_exists(turn.#stop) OR turn.#stop <> :interrupted)' : ''}`,
      ExpressionAttributeNames: { '#state': 'state', '#stop': 'stop' },
      ExpressionAttributeValues: {
        ':queued': 'queued',
        ':running': 'running',
        ':turn': turnId,
        ':stop': stop,
        ...(opts.connectionId ? { ':conn': opts.connectionId } : {}),
        ...(stop === 'disconnected' ? { ':interrupted': 'interrupted' } : {}),
        ...t.values,
      },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/**
 * Sends the turn's frames to another connection from now on (a session resumed on a new connection). A stop the
 * $disconnect of the turn's connection asked for is withdrawn: its client is back (a paused turn would otherwise be
 * ended by it once resumed, and a running one end without a result). An interrupt stays.
 */
export async function moveTurn(sessionId: string, turnId: string, connectionId: string, callbackUrl: string, now = Date.now()): Promise<Moved> {
  const t = touched(now);
  const move = async (withdraw: boolean) =>
    moved(
      await conditionalUpdate({
        TableName: table(),
        Key: sessionKey(sessionId),
        UpdateExpression: `SET turn.connectionId = :conn, turn.callbackUrl = :url, ${t.set}${withdraw ? ' REMOVE turn.#stop' : ''}`,
        ConditionExpression: `turn.id = :turn AND ${withdraw ? 'turn.#stop = :left' : '(attribute_not_exists(turn.#stop) OR turn.#stop <> :left)'}`,
        ExpressionAttributeNames: { '#stop': 'stop' },
        ExpressionAttributeValues: { ':turn': turnId, ':conn': connectionId, ':url': callbackUrl, ':left': 'disconnected', ...t.values },
        ReturnValues: 'ALL_NEW',
      }),
    );
  const plain = await move(false);
  return !plain.ok && plain.seen?.turn?.id === turnId && plain.seen.turn.stop === 'disconnected' ? move(true) : plain;
}

// ——— connections ———

export async function putConnection(connectionId: string, caller: Caller, now = Date.now()): Promise<void> {
  await documentClient().send(
    new PutCommand({
      TableName: table(),
      Item: {
        ...connectionKey(connectionId),
        connectionId,
        caller,
        connectedAt: now,
        lastSeenAt: now,
        rateWindow: Math.floor(now / 1000),
        rateCount: 0,
        sweepShard: SWEEP_CONNECTION,
        sweepAt: now + env().SESSION_IDLE_SECONDS * 1000,
        expiresAt: Math.floor(now / 1000) + CONNECTION_TTL_SECONDS,
      },
    }),
  );
}

export type Touched = { kind: 'ok'; connection: ConnectionRecord } | { kind: 'rate_limited' } | { kind: 'unknown' };

/**
 * A frame arrived on the connection: counts it in the current second (at most SESSION_FRAMES_PER_SECOND) and pushes
 * the idle deadline — one write per frame, which also reads the connection.
 */
export async function touchConnection(connectionId: string, now = Date.now()): Promise<Touched> {
  const window = Math.floor(now / 1000);
  const { SESSION_FRAMES_PER_SECOND: max, SESSION_IDLE_SECONDS: idle } = env();
  const common = { ':now': now, ':sweepAt': now + idle * 1000, ':w': window };
  for (let attempt = 0; attempt < 2; attempt++) {
    // The same second: one more frame, within the limit.
    const same = await conditionalUpdate({
      TableName: table(),
      Key: connectionKey(connectionId),
      UpdateExpression: 'SET lastSeenAt = :now, sweepAt = :sweepAt ADD rateCount :one',
      ConditionExpression: 'rateWindow = :w AND rateCount < :max',
      ExpressionAttributeValues: { ...common, ':one': 1, ':max': max },
      ReturnValues: 'ALL_NEW',
    });
    if (same.ok) return { kind: 'ok', connection: connectionFromItem(same.attributes!) };
    if (!same.seen) return { kind: 'unknown' };
    if (same.seen.rateWindow === window) return { kind: 'rate_limited' };
    // A new second: the count starts again.
    const fresh = await conditionalUpdate({
      TableName: table(),
      Key: connectionKey(connectionId),
      UpdateExpression: 'SET lastSeenAt = :now, sweepAt = :sweepAt, rateWindow = :w, rateCount = :one',
      ConditionExpression: 'rateWindow < :w',
      ExpressionAttributeValues: { ...common, ':one': 1 },
      ReturnValues: 'ALL_NEW',
    });
    if (fresh.ok) return { kind: 'ok', connection: connectionFromItem(fresh.attributes!) };
    if (!fresh.seen) return { kind: 'unknown' };
  }
  // Two frames raced for the new second twice: the limit is being hit.
  return { kind: 'rate_limited' };
}

/** The connection now holds `sessionId` (its frames concern that session). */
export async function bindConnection(connectionId: string, sessionId: string): Promise<void> {
  await documentClient().send(
    new UpdateCommand({
      TableName: table(),
      Key: connectionKey(connectionId),
      UpdateExpression: 'SET sessionId = :session',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':session': sessionId },
    }),
  );
}

export async function getConnection(connectionId: string): Promise<ConnectionRecord | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: connectionKey(connectionId), ConsistentRead: true }));
  return out.Item ? connectionFromItem(out.Item) : undefined;
}

/** Forgets a connection; answers what it was (undefined when it was already gone). */
export async function deleteConnection(connectionId: string, opts: { ifSweepAt?: number } = {}): Promise<ConnectionRecord | undefined> {
  try {
    const out = await documentClient().send(
      new DeleteCommand({
        TableName: table(),
        Key: connectionKey(connectionId),
        ReturnValues: 'ALL_OLD',
        ...(opts.ifSweepAt === undefined ? {} : { ConditionExpression: 'sweepAt = :at', ExpressionAttributeValues: { ':at': opts.ifSweepAt } }),
      }),
    );
    return out.Attributes ? connectionFromItem(out.Attributes) : undefined;
  } catch (err) {
    if (isConditionFailure(err)) return undefined;
    throw err;
  }
}

/** Pushes a connection's idle deadline (the sweeper found a turn running on it). */
export async function extendConnection(connectionId: string, sweepAt: number): Promise<void> {
  await conditionalUpdate({
    TableName: table(),
    Key: connectionKey(connectionId),
    UpdateExpression: 'SET sweepAt = :at',
    ConditionExpression: 'attribute_exists(pk)',
    ExpressionAttributeValues: { ':at': sweepAt },
  });
}
