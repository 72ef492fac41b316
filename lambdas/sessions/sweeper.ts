import pLimit from 'p-limit';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { apiGatewayConnectionSender, type ConnectionSender } from '../http/websocket.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { dueItems } from '../store/due.ts';
import { SESSIONS_SWEEP_INDEX } from '../store/tables.ts';
import { encodeFrame, errorFrame } from './frames.ts';
import { connectionFromItem, conversationWithoutTurn, sessionFromItem } from './record.ts';
import { isTurnActive } from './states.ts';
import { deleteConnection, endTurn, extendConnection, getSession, SWEEP_CONNECTION, SWEEP_TURN } from './store.ts';

/**
 * The session sweeper (every minute; docs/ws.md, "Limits" and "How a turn runs"), over the Sessions table's sparse
 * `sweep` index:
 * - a connection whose client sent nothing for SESSION_IDLE_SECONDS, with no turn running for it, is told
 *   `idle_timeout` and closed (before API Gateway's own 10 minutes would close it without a word);
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
