import type Anthropic from '@anthropic-ai/sdk';
import { DeleteCommand, GetCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import type { Caller } from '../auth/claims.ts';
import { env } from '../config/env.ts';
import { AUTH_DEADLINE_SECONDS, CONNECTION_TTL_SECONDS, TURN_QUEUED_STALE_MS, TURN_STALE_MS } from '../config/timing.ts';
import { conditionalPut, conditionalUpdate, type ConditionalResult, type StoredItem } from '../store/conditional.ts';
import { documentClient } from '../store/dynamo.ts';
import {
  connectionFromItem,
  connectionKey,
  encodeConversation,
  sessionFromItem,
  sessionKey,
  type AuthenticatedConnection,
  type ClientResult,
  type ConnectionRecord,
  type PausedRun,
  type SessionRecord,
  type StopRequest,
  type TurnRecord,
} from './record.ts';
import { SessionStates, STATE_PLACEHOLDERS, type SessionState } from './states.ts';

/**
 * The Sessions table's writes (docs/ws.md, "How a turn runs"). Each move of a session's state is one conditional
 * write: a transition of the flow (sessions/states.ts) and the turn it expects, so a repeated queue message, a late
 * frame or the sweeper finds the turn moved on and does nothing. Every write goes through store/conditional.ts, so
 * it happens once however often the SDK sends it. Every change pushes the session's expiry
 * (SESSION_RETENTION_SECONDS after its last change: the table's TTL deletes it then).
 */

export const SWEEP_CONNECTION = 'connection';
export const SWEEP_TURN = 'turn';

const table = () => env().SESSIONS_TABLE;
const expiry = (now: number) => Math.floor(now / 1000) + env().SESSION_RETENTION_SECONDS;

/** Every session change: version, updatedAt and the expiry move together. */
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
      state: 'idle' satisfies SessionState,
      version: 1,
      createdAt: session.createdAt,
      updatedAt: session.createdAt,
      expiresAt: expiry(session.createdAt),
    },
    ConditionExpression: 'attribute_not_exists(pk)',
  });
  if (!created.ok) throw new Error(`Session ${session.sessionId} exists already`);
}

/** The state a session write expects (the flow's fragment, sessions/states.ts), and the state it moves to if any. */
interface StateFragment {
  condition: string;
  set?: string;
  names: Record<string, string>;
  values: Record<string, string>;
}

/** A move to `to` from `from`, as the flow allows it (else a RangeError: a move the flow forbids is never written). */
const move = (to: SessionState, from: SessionState | readonly SessionState[]): StateFragment => SessionStates.transition(to, { ...STATE_PLACEHOLDERS, from });

/** The session is in one of `states`, for the writes that change its turn and not its state. */
function inState(...states: SessionState[]): StateFragment {
  const c = SessionStates.statusIn(states, STATE_PLACEHOLDERS);
  return { condition: c.expression, names: c.names, values: c.values };
}

/**
 * The one conditional UpdateItem of a session (store/conditional.ts: made once however often the SDK sends it): the
 * state it expects (and moves to), `when` besides, and the write's SET and REMOVE clauses. With `now` the session is
 * touched (version, updatedAt, expiry).
 */
async function updateSession(
  sessionId: string,
  write: {
    state?: StateFragment;
    when?: string;
    set?: readonly string[];
    remove?: readonly string[];
    names?: Record<string, string>;
    values?: Record<string, unknown>;
    now?: number;
  },
  returnValues: 'ALL_NEW' | 'NONE' = 'ALL_NEW',
): Promise<ConditionalResult> {
  const touch = write.now === undefined ? undefined : touched(write.now);
  const set = [...(write.state?.set ? [write.state.set] : []), ...(write.set ?? []), ...(touch ? [touch.set] : [])];
  const condition = [write.state?.condition, write.when].filter((c) => c !== undefined).join(' AND ');
  const names = { ...write.state?.names, ...write.names };
  return conditionalUpdate({
    TableName: table(),
    Key: sessionKey(sessionId),
    UpdateExpression: `SET ${set.join(', ')}${write.remove?.length ? ` REMOVE ${write.remove.join(', ')}` : ''}`,
    ConditionExpression: condition,
    ...(Object.keys(names).length ? { ExpressionAttributeNames: names } : {}),
    ExpressionAttributeValues: { ...write.state?.values, ...write.values, ...touch?.values },
    ...(returnValues === 'ALL_NEW' ? { ReturnValues: 'ALL_NEW' } : {}),
  });
}

/** Replaces a session's options (a resume that gives new ones): they apply from its next model call. */
export async function replaceOptions(sessionId: string, options: SessionRecord['options'], now = clock.now()): Promise<void> {
  const replaced = await updateSession(
    sessionId,
    { when: 'attribute_exists(pk)', set: ['options = :options'], values: { ':options': JSON.stringify(options) }, now },
    'NONE',
  );
  if (!replaced.ok) throw new Error(`Session ${sessionId} does not exist`);
}

export type Moved = { ok: true; session: SessionRecord } | { ok: false; seen: SessionRecord | undefined };

function moved(result: ConditionalResult): Moved {
  if (result.ok) return { ok: true, session: sessionFromItem(result.attributes!) };
  return { ok: false, seen: result.seen ? sessionFromItem(result.seen) : undefined };
}

/** idle → queued: a user's message becomes a turn for a worker. */
export async function queueTurn(sessionId: string, turn: TurnRecord, now = clock.now()): Promise<Moved> {
  return moved(
    await updateSession(sessionId, {
      state: move('queued', 'idle'),
      set: ['turn = :turn', 'sweepShard = :shard', 'sweepAt = :sweepAt'],
      values: { ':turn': turn, ':shard': SWEEP_TURN, ':sweepAt': now + TURN_QUEUED_STALE_MS },
      now,
    }),
  );
}

/** queued → running, by the worker the turn's message reached (a repeated message finds it running and stops). */
export async function claimTurn(sessionId: string, turnId: string, now = clock.now()): Promise<Moved> {
  return moved(
    await updateSession(sessionId, {
      state: move('running', 'queued'),
      when: 'turn.id = :turn',
      set: ['sweepAt = :sweepAt'],
      values: { ':turn': turnId, ':sweepAt': now + TURN_STALE_MS },
      now,
    }),
  );
}

/** The running turn's worker is alive: the sweeper leaves it alone for another TURN_STALE_MS. */
export async function heartbeatTurn(sessionId: string, turnId: string, now = clock.now()): Promise<boolean> {
  // Not a change of the session (no version, no expiry) and nothing read back: only the claim is renewed.
  const result = await updateSession(
    sessionId,
    { state: inState('running'), when: 'turn.id = :turn', set: ['sweepAt = :sweepAt'], values: { ':turn': turnId, ':sweepAt': now + TURN_STALE_MS } },
    'NONE',
  );
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
  opts: { from?: readonly SessionState[]; now?: number; version?: number } = {},
): Promise<Moved> {
  return moved(
    await updateSession(sessionId, {
      state: move('idle', opts.from ?? ['running']),
      when: `turn.id = :turn${opts.version === undefined ? '' : ' AND version = :read'}`,
      set: conversation ? ['conversation = :conversation', 'messages = :messages'] : [],
      remove: ['turn', 'sweepShard', 'sweepAt'],
      values: {
        ':turn': turnId,
        ...(conversation ? { ':conversation': encodeConversation(conversation), ':messages': conversation.length } : {}),
        ...(opts.version === undefined ? {} : { ':read': opts.version }),
      },
      now: opts.now ?? clock.now(),
    }),
  );
}

/** running → awaiting_tools: the model called client-side tools; the session holds nothing while the client works. */
export async function pauseTurn(
  sessionId: string,
  turnId: string,
  conversation: Anthropic.MessageParam[],
  paused: PausedRun,
  now = clock.now(),
): Promise<Moved> {
  return moved(
    await updateSession(sessionId, {
      state: move('awaiting_tools', 'running'),
      when: 'turn.id = :turn',
      set: ['conversation = :conversation', 'messages = :messages', 'turn.paused = :paused', 'turn.pending = :pending', 'turn.clientResults = :none'],
      remove: ['turn.message', 'sweepShard', 'sweepAt'],
      values: {
        ':turn': turnId,
        ':conversation': encodeConversation(conversation),
        ':messages': conversation.length,
        ':paused': JSON.stringify(paused),
        ':pending': paused.calls.filter((c) => c.client).map((c) => c.id),
        ':none': {},
      },
      now,
    }),
  );
}

/** One client result of a paused turn, once: the id must be pending and not answered yet. */
export async function recordClientResult(sessionId: string, turnId: string, toolUseId: string, result: ClientResult, now = clock.now()): Promise<Moved> {
  return moved(
    await updateSession(sessionId, {
      state: inState('awaiting_tools'),
      when: 'turn.id = :turn AND contains(turn.pending, :id) AND attribute_not_exists(turn.clientResults.#id)',
      set: ['turn.clientResults.#id = :result'],
      names: { '#id': toolUseId },
      values: { ':turn': turnId, ':id': toolUseId, ':result': result },
      now,
    }),
  );
}

/** awaiting_tools → queued: every result is in; a worker continues the turn (on `connection`, the latest one). */
export async function queueResume(sessionId: string, turnId: string, now = clock.now()): Promise<Moved> {
  return moved(
    await updateSession(sessionId, {
      state: move('queued', 'awaiting_tools'),
      when: 'turn.id = :turn',
      set: ['turn.queuedAt = :now', 'sweepShard = :shard', 'sweepAt = :sweepAt'],
      values: { ':turn': turnId, ':shard': SWEEP_TURN, ':sweepAt': now + TURN_QUEUED_STALE_MS },
      now,
    }),
  );
}

/** Asks the queued or running turn to stop (its worker polls for it). */
export async function requestStop(sessionId: string, turnId: string, stop: StopRequest, opts: { connectionId?: string; now?: number } = {}): Promise<Moved> {
  const when = ['turn.id = :turn'];
  if (opts.connectionId) when.push('turn.connectionId = :conn');
  // A client leaving does not replace its own interrupt: were it to come back, the interrupt must still hold.
  if (stop === 'disconnected') when.push('(attribute_not_exists(turn.#stop) OR turn.#stop <> :interrupted)');
  return moved(
    await updateSession(sessionId, {
      state: inState('queued', 'running'),
      when: when.join(' AND '),
      set: ['turn.#stop = :stop'],
      names: { '#stop': 'stop' },
      values: {
        ':turn': turnId,
        ':stop': stop,
        ...(opts.connectionId ? { ':conn': opts.connectionId } : {}),
        ...(stop === 'disconnected' ? { ':interrupted': 'interrupted' satisfies StopRequest } : {}),
      },
      now: opts.now ?? clock.now(),
    }),
  );
}

/**
 * Sends the turn's frames to another connection from now on (a session resumed on a new connection). A stop the
 * $disconnect of the turn's connection asked for is withdrawn: its client is back (a paused turn would otherwise be
 * ended by it once resumed, and a running one end without a result). An interrupt stays. In whatever state the turn
 * is: the write names the turn, which only a session with a turn has.
 */
export async function moveTurn(sessionId: string, turnId: string, connectionId: string, callbackUrl: string, now = clock.now()): Promise<Moved> {
  const retarget = async (withdraw: boolean) =>
    moved(
      await updateSession(sessionId, {
        when: `turn.id = :turn AND ${withdraw ? 'turn.#stop = :left' : '(attribute_not_exists(turn.#stop) OR turn.#stop <> :left)'}`,
        set: ['turn.connectionId = :conn', 'turn.callbackUrl = :url'],
        ...(withdraw ? { remove: ['turn.#stop'] } : {}),
        names: { '#stop': 'stop' },
        values: { ':turn': turnId, ':conn': connectionId, ':url': callbackUrl, ':left': 'disconnected' satisfies StopRequest },
        now,
      }),
    );
  const plain = await retarget(false);
  return !plain.ok && plain.seen?.turn?.id === turnId && plain.seen.turn.stop === 'disconnected' ? retarget(true) : plain;
}

// ——— connections ———

/**
 * A connection being forgotten is closed first (`closedAt`, deleteConnection): every other connection write
 * conditions on it being open, so none lands between the close and the delete.
 */
const OPEN = 'attribute_not_exists(closedAt)';

/**
 * Records a connection the $connect accepted. With its caller (a token on the upgrade), idle from now; without one (a
 * browser's: docs/ws.md, "The auth frame"), awaiting its `auth` frame until `authBy`, AUTH_DEADLINE_SECONDS from now,
 * which is also when the sweeper is due to close it (`sweepAt`: frames before the auth do not push it, touchConnection).
 * `origin` is the upgrade's `Origin` header, checked against the token once it is known.
 */
export async function putConnection(connectionId: string, caller: Caller | undefined, now = clock.now(), opts: { origin?: string | null } = {}): Promise<void> {
  const authBy = now + AUTH_DEADLINE_SECONDS * 1000;
  // API Gateway never reuses a connection id: an item already there is this put's own first send (store/conditional.ts).
  const put = await conditionalPut({
    TableName: table(),
    Item: {
      ...connectionKey(connectionId),
      connectionId,
      ...(caller ? { caller } : { authBy }),
      ...(opts.origin ? { origin: opts.origin } : {}),
      connectedAt: now,
      lastSeenAt: now,
      rateWindow: Math.floor(now / 1000),
      rateCount: 0,
      sweepShard: SWEEP_CONNECTION,
      sweepAt: caller ? now + env().SESSION_IDLE_SECONDS * 1000 : authBy,
      expiresAt: Math.floor(now / 1000) + CONNECTION_TTL_SECONDS,
    },
    ConditionExpression: 'attribute_not_exists(pk)',
  });
  if (!put.ok) throw new Error(`Connection ${connectionId} exists already`);
}

export type Authenticated = { kind: 'ok'; connection: AuthenticatedConnection } | { kind: 'already' } | { kind: 'unknown' };

/**
 * A connection awaiting its `auth` frame gets its caller: once, by a write conditioned on it having none (two `auth`
 * frames handled side by side: one wins, the other finds `already`). Its deadline goes, and its idle deadline starts.
 */
export async function authenticateConnection(connectionId: string, caller: Caller, now = clock.now()): Promise<Authenticated> {
  const set = await conditionalUpdate({
    TableName: table(),
    Key: connectionKey(connectionId),
    UpdateExpression: 'SET caller = :caller, sweepAt = :sweepAt REMOVE authBy',
    ConditionExpression: `attribute_exists(pk) AND ${OPEN} AND attribute_not_exists(caller)`,
    ExpressionAttributeValues: { ':caller': caller, ':sweepAt': now + env().SESSION_IDLE_SECONDS * 1000 },
    ReturnValues: 'ALL_NEW',
  });
  if (set.ok) return { kind: 'ok', connection: connectionFromItem(set.attributes!) as AuthenticatedConnection };
  return set.seen && set.seen.closedAt === undefined && set.seen.caller !== undefined ? { kind: 'already' } : { kind: 'unknown' };
}

export type Touched = { kind: 'ok'; connection: ConnectionRecord } | { kind: 'rate_limited' } | { kind: 'unknown' };

/**
 * What a frame costs of SESSION_FRAMES_PER_SECOND, in eighths: a frame a whole one, a `part` an eighth (docs/ws.md,
 * "Limits"). A message sent in parts is thus not refused for its size (256 KiB in 32 KB parts is about one frame's
 * worth), while a flood of parts is still bounded: at most 8 × SESSION_FRAMES_PER_SECOND a second.
 */
export const PARTS_PER_FRAME = 8;
export type FrameCost = 'frame' | 'part';

/**
 * A frame arrived on the connection: counts it in the current second (at most SESSION_FRAMES_PER_SECOND frames, a
 * part an eighth of one: `rateCount` is in eighths) and pushes the idle deadline — one write per frame, which also
 * reads the connection. A connection awaiting its `auth` frame keeps its deadline (`sweepAt` stays `authBy`): frames
 * that are refused do not buy it time.
 */
export async function touchConnection(connectionId: string, now = clock.now(), cost: FrameCost = 'frame'): Promise<Touched> {
  const window = Math.floor(now / 1000);
  const { SESSION_FRAMES_PER_SECOND: max, SESSION_IDLE_SECONDS: idle } = env();
  const units = cost === 'frame' ? PARTS_PER_FRAME : 1;
  const common = { ':now': now, ':sweepAt': now + idle * 1000, ':w': window, ':units': units };
  /** No connection, or one being forgotten: the frame is as good as after its delete. */
  const gone = (seen: StoredItem | undefined) => !seen || seen.closedAt !== undefined;
  for (let attempt = 0; attempt < 2; attempt++) {
    // The same second: one more frame, within the limit.
    const same = await conditionalUpdate({
      TableName: table(),
      Key: connectionKey(connectionId),
      UpdateExpression: 'SET lastSeenAt = :now, sweepAt = if_not_exists(authBy, :sweepAt) ADD rateCount :units',
      ConditionExpression: `${OPEN} AND rateWindow = :w AND rateCount <= :room`,
      ExpressionAttributeValues: { ...common, ':room': max * PARTS_PER_FRAME - units },
      ReturnValues: 'ALL_NEW',
    });
    if (same.ok) return { kind: 'ok', connection: connectionFromItem(same.attributes!) };
    if (gone(same.seen)) return { kind: 'unknown' };
    if (same.seen!.rateWindow === window) return { kind: 'rate_limited' };
    // A new second: the count starts again.
    const fresh = await conditionalUpdate({
      TableName: table(),
      Key: connectionKey(connectionId),
      UpdateExpression: 'SET lastSeenAt = :now, sweepAt = if_not_exists(authBy, :sweepAt), rateWindow = :w, rateCount = :units',
      ConditionExpression: `${OPEN} AND rateWindow < :w`,
      ExpressionAttributeValues: common,
      ReturnValues: 'ALL_NEW',
    });
    if (fresh.ok) return { kind: 'ok', connection: connectionFromItem(fresh.attributes!) };
    if (gone(fresh.seen)) return { kind: 'unknown' };
  }
  // Two frames raced for the new second twice: the limit is being hit.
  return { kind: 'rate_limited' };
}

/** The connection now holds `sessionId` (its frames concern that session). */
export async function bindConnection(connectionId: string, sessionId: string): Promise<void> {
  const bound = await conditionalUpdate({
    TableName: table(),
    Key: connectionKey(connectionId),
    UpdateExpression: 'SET sessionId = :session',
    ConditionExpression: `attribute_exists(pk) AND ${OPEN}`,
    ExpressionAttributeValues: { ':session': sessionId },
  });
  if (!bound.ok) throw new Error(`Connection ${connectionId} is gone`);
}

export async function getConnection(connectionId: string): Promise<ConnectionRecord | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: connectionKey(connectionId), ConsistentRead: true }));
  return out.Item && out.Item.closedAt === undefined ? connectionFromItem(out.Item) : undefined;
}

/**
 * Forgets a connection; answers what it was (undefined when it was already gone, or `ifSweepAt` no longer held).
 *
 * A delete leaves no item to carry a write token (store/conditional.ts), so the SDK's second send of a delete whose
 * answer was lost would find nothing and answer "already gone": the $disconnect would then not stop the connection's
 * turn, the sweeper not tell the client `idle_timeout`. So the decision is a write made once, which closes the
 * connection (and takes it out of the sweep index) under the delete's conditions; the item is then deleted, which
 * needs no condition and no token: it is closed, nothing writes it any more, and deleting it twice deletes nothing
 * more. A close whose delete never came (the function stopped between the two) is left to the TTL.
 */
export async function deleteConnection(connectionId: string, opts: { ifSweepAt?: number } = {}): Promise<ConnectionRecord | undefined> {
  const closed = await conditionalUpdate({
    TableName: table(),
    Key: connectionKey(connectionId),
    UpdateExpression: 'SET closedAt = :now REMOVE sweepShard, sweepAt',
    ConditionExpression: `attribute_exists(pk) AND ${OPEN}${opts.ifSweepAt === undefined ? '' : ' AND sweepAt = :at'}`,
    ExpressionAttributeValues: { ':now': clock.now(), ...(opts.ifSweepAt === undefined ? {} : { ':at': opts.ifSweepAt }) },
    ReturnValues: 'ALL_NEW',
  });
  if (!closed.ok) return undefined;
  await documentClient().send(new DeleteCommand({ TableName: table(), Key: connectionKey(connectionId) }));
  return connectionFromItem(closed.attributes!);
}

/** Pushes a connection's idle deadline (the sweeper found a turn running on it). */
export async function extendConnection(connectionId: string, sweepAt: number): Promise<void> {
  await conditionalUpdate({
    TableName: table(),
    Key: connectionKey(connectionId),
    UpdateExpression: 'SET sweepAt = :at',
    ConditionExpression: `attribute_exists(pk) AND ${OPEN}`,
    ExpressionAttributeValues: { ':at': sweepAt },
  });
}
