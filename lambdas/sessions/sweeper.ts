import pLimit from 'p-limit';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { apiGatewayConnectionSender, type ConnectionSender } from '../http/websocket.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { dueItems } from '../store/due.ts';
import { SESSIONS_SWEEP_INDEX } from '../store/tables.ts';
import { AUTH_DEADLINE_SECONDS } from '../config/timing.ts';
import { encodeFrame, errorFrame } from './frames.ts';
import { connectionFromItem, conversationWithoutTurn, isAuthenticated, sessionFromItem } from './record.ts';
import { isTurnActive } from './states.ts';
import { deleteConnection, endTurn, extendConnection, getConnection, getSession, SWEEP_CONNECTION, SWEEP_TURN } from './store.ts';

/**
 * The session sweeper (every minute; docs/ws.md, "Limits" and "How a turn runs"), over the Sessions table's sparse
 * `sweep` index:
 * - a connection whose client sent nothing for SESSION_IDLE_SECONDS, with no turn running for it, is told
 *   `idle_timeout` and closed (before API Gateway's own 10 minutes would close it without a word);
 * - a connection opened without a token that sent no good `auth` frame within AUTH_DEADLINE_SECONDS is told
 *   `unauthorized` and closed (its deadline's own message on the turn queue usually came first: closeUnauthenticated);
 * - a turn whose worker stopped renewing its claim (or whose queue message was lost) is freed: `turn_lost`, and the
 *   conversation stays as it was saved before the turn.
 */

/** One sweep handles at most this many items per shard (the rest are next minute's), this many at a time. */
const LIMIT = 2000;
const CONCURRENCY = 8;

export interface SweepDeps {
  sender: ConnectionSender;
}

function defaultDeps(): SweepDeps {
  const endpoint = env().WEBSOCKET_CALLBACK_URL;
  if (!endpoint)
    throw new Error("WEBSOCKET_CALLBACK_URL is not set: the sweeper reaches connections through the stage's management endpoint (manifest access.connections)");
  return { sender: apiGatewayConnectionSender(endpoint) };
}

export async function sweepSessions(now = clock.now(), deps?: SweepDeps): Promise<{ closed: number; freed: number }> {
  const d = deps ?? defaultDeps();
  let closed = 0;
  let freed = 0;
  // Each item catches its own failure: the sweep goes on past one.
  await pLimit(CONCURRENCY).map(await due(SWEEP_CONNECTION, now), async (item) => {
    try {
      if (await closeIdle(item, now, d)) closed++;
    } catch (err) {
      logger.error('sweeping a connection failed', { error: err as Error, connectionId: item.connectionId });
    }
  });
  await pLimit(CONCURRENCY).map(await due(SWEEP_TURN, now), async (item) => {
    try {
      if (await freeTurn(item, now, d)) freed++;
    } catch (err) {
      logger.error('sweeping a turn failed', { error: err as Error, sessionId: item.sessionId });
    }
  });
  emit('SessionsSwept', closed + freed);
  if (closed || freed) logger.info('sessions swept', { closed, freed });
  return { closed, freed };
}

const due = (shard: string, now: number) =>
  dueItems({ table: env().SESSIONS_TABLE, index: SESSIONS_SWEEP_INDEX, shardAttribute: 'sweepShard', shard, dueAttribute: 'sweepAt', now, limit: LIMIT });

async function closeIdle(item: Record<string, unknown>, now: number, deps: SweepDeps): Promise<boolean> {
  const connection = connectionFromItem(item);
  if (!isAuthenticated(connection)) return closeAtDeadline(connection.connectionId, item.sweepAt as number, deps.sender);
  const session = connection.sessionId ? await getSession(connection.sessionId) : undefined;
  // A client waiting for its turn's frames is not idle.
  if (session && isTurnActive(session.state) && session.turn?.connectionId === connection.connectionId) {
    await extendConnection(connection.connectionId, now + env().SESSION_IDLE_SECONDS * 1000);
    return false;
  }
  // Only if no frame came meanwhile (which would have pushed sweepAt).
  const gone = await deleteConnection(connection.connectionId, { ifSweepAt: item.sweepAt as number });
  if (!gone) return false;
  const seconds = env().SESSION_IDLE_SECONDS;
  await deps.sender.send(
    connection.connectionId,
    encodeFrame(
      errorFrame('idle_timeout', `No frame for ${seconds} seconds: the connection is closed. Resume the session on a new connection with its sessionId`),
    ),
  );
  await deps.sender.close(connection.connectionId);
  return true;
}

async function freeTurn(item: Record<string, unknown>, now: number, deps: SweepDeps): Promise<boolean> {
  const session = sessionFromItem(item);
  const turn = session.turn;
  if (!turn || !isTurnActive(session.state)) return false;
  const freed = await endTurn(session.sessionId, turn.id, conversationWithoutTurn(session, turn), { from: [session.state as 'queued' | 'running'], now });
  if (!freed.ok) return false;
  logger.warn('a /ws turn was freed: its worker stopped', { sessionId: session.sessionId, turnId: turn.id, state: session.state });
  await deps.sender.send(
    turn.connectionId,
    encodeFrame(
      errorFrame('turn_lost', 'The turn stopped before its end (its worker failed); the conversation is as it was before it. Send the message again'),
    ),
  );
  return true;
}

/** The frame a connection gets when its auth deadline passes (docs/ws.md, "The auth frame"). */
const DEADLINE_FRAME = errorFrame(
  'unauthorized',
  `No "auth" frame within ${AUTH_DEADLINE_SECONDS} s of the connect: the connection is closed. Connect again and send {"type":"auth","token":…} first`,
);

/** Closes a connection awaiting auth whose deadline passed, unless it changed since it was read (`sweepAt`). */
async function closeAtDeadline(connectionId: string, sweepAt: number, sender: ConnectionSender): Promise<boolean> {
  const gone = await deleteConnection(connectionId, { ifSweepAt: sweepAt });
  if (!gone) return false;
  await sender.send(connectionId, encodeFrame(DEADLINE_FRAME));
  await sender.close(connectionId);
  return true;
}

/**
 * How early a deadline message may come and still close its connection: the instances' clocks may differ by a little
 * (SQS itself never delivers a delayed message early).
 */
const DEADLINE_LEEWAY_MS = 1_000;

/**
 * The auth deadline's message (sessions/turn.ts): a connection opened without a token and still without a caller is
 * told `unauthorized` and closed. One that authenticated, or is gone, is left as it is. Answers whether it closed it.
 */
export async function closeUnauthenticated(connectionId: string, sender: ConnectionSender, now = clock.now()): Promise<boolean> {
  const connection = await getConnection(connectionId);
  if (!connection || isAuthenticated(connection) || connection.authBy > now + DEADLINE_LEEWAY_MS) return false;
  // Its sweepAt is its deadline (frames before the auth do not move it): the delete is conditioned on it, as the sweep's.
  return closeAtDeadline(connectionId, connection.authBy, sender);
}
