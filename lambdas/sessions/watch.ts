import { logger } from '../observability/logger.ts';
import { INTERRUPTED } from '../agent/result.ts';
import { heartbeatTurn, TURN_HEARTBEAT_MS, TURN_STALE_MS, turnSignals } from './store.ts';

/** How often a running turn looks for an interrupt: the longest an interrupt waits to be seen. */
export const STOP_POLL_MS = 250;

/** The abort reason of a turn whose client went away (no result is sent: nobody is there). */
export const CLIENT_GONE = 'The client went away';

export interface TurnWatch {
  stop(): void;
  /** The sweeper gave the turn up (this worker had stopped renewing it): its end must not be written. */
  lost(): boolean;
}

/**
 * Watches a running turn for its worker, as vessels/watch.ts does for an execution: every STOP_POLL_MS it reads
 * whether an interrupt (or the client's $disconnect) asked the turn to stop, and aborts the run if so; every
 * TURN_HEARTBEAT_MS it renews the turn's claim, so the sweeper leaves it alone. A turn found no longer its own — or
 * not confirmed before the sweeper would take it — is aborted and marked lost.
 */
export function watchTurn(
  sessionId: string,
  turnId: string,
  abort: AbortController,
  opts: { pollMs?: number; onConnection?: (connectionId: string, callbackUrl: string) => void } = {},
): TurnWatch {
  let lost = false;
  let stopped = false;
  let busy = false;
  let lastBeat = Date.now();
  let confirmedAt = Date.now();
  const pollMs = opts.pollMs ?? STOP_POLL_MS;

  const tick = async () => {
    if (busy || stopped || abort.signal.aborted) return;
    busy = true;
    try {
      const now = Date.now();
      if (now - lastBeat >= TURN_HEARTBEAT_MS) {
        lastBeat = now;
        if (!(await heartbeatTurn(sessionId, turnId, now))) return lose();
      }
      const seen = await turnSignals(sessionId, turnId);
      if (!seen.owned) return lose();
      confirmedAt = Date.now();
      // The session resumed on another connection: the turn's frames go there from now on.
      if (seen.connection) opts.onConnection?.(seen.connection.connectionId, seen.connection.callbackUrl);
      if (seen.stop === 'interrupted') abort.abort(INTERRUPTED);
      else if (seen.stop === 'disconnected') abort.abort(CLIENT_GONE);
    } catch (err) {
      if (Date.now() - confirmedAt > TURN_STALE_MS - 2 * TURN_HEARTBEAT_MS) lose();
      else logger.warn('turn watch failed; retrying', { sessionId, turnId, error: err as Error });
    } finally {
      busy = false;
    }
  };
  const lose = () => {
    // A look already on its way when the turn ended sees the turn's own end: nothing was lost.
    if (stopped) return;
    lost = true;
    logger.warn("a /ws turn stops: it is no longer its worker's", { sessionId, turnId });
    abort.abort('The turn was given up by the sweeper');
  };
  const timer = setInterval(() => void tick(), pollMs);
  timer.unref?.();
  return {
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
    lost: () => lost,
  };
}
