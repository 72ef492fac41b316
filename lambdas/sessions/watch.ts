import { clock } from '../config/clock.ts';
import { STOP_POLL_MS, TURN_HEARTBEAT_MS, TURN_STALE_MS } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import { INTERRUPTED } from '../agent/result.ts';
import { watchRecord, type Ticker } from '../scheduling/watch.ts';
import { heartbeatTurn, turnSignals } from './store.ts';

/** The abort reason of a turn whose client went away (no result is sent: nobody is there). */
export const CLIENT_GONE = 'The client went away';

export interface TurnWatch {
  /** The watch's timer: the turn's lease renewals ride on it (agent/admitted-run.ts), one timer per turn. */
  ticker: Ticker;
  stop(): void;
  /** The sweeper gave the turn up (this worker had stopped renewing it): its end must not be written. */
  lost(): boolean;
}

/**
 * Watches a running turn for its worker with the watch loop (scheduling/watch.ts), as vessels/watch.ts does for an
 * execution: every STOP_POLL_MS it reads whether an interrupt (or the client's $disconnect) asked the turn to stop,
 * and aborts the run if so; every TURN_HEARTBEAT_MS it renews the turn's claim first, so the sweeper leaves it alone.
 * A turn found no longer its own — or not confirmed before the sweeper would take it — is aborted and marked lost.
 */
export function watchTurn(
  sessionId: string,
  turnId: string,
  abort: AbortController,
  opts: { pollMs?: number; onConnection?: (connectionId: string, callbackUrl: string) => void } = {},
): TurnWatch {
  const look = async () => {
    const seen = await turnSignals(sessionId, turnId);
    if (!seen.owned) return { lost: 'the turn moved on' };
    const confirmedAt = clock.now();
    // The session resumed on another connection: the turn's frames go there from now on.
    if (seen.connection) opts.onConnection?.(seen.connection.connectionId, seen.connection.callbackUrl);
    if (seen.stop === 'interrupted') abort.abort(INTERRUPTED);
    else if (seen.stop === 'disconnected') abort.abort(CLIENT_GONE);
    return { confirmedAt };
  };
  const watch = watchRecord({
    signal: abort.signal,
    pollMs: opts.pollMs ?? STOP_POLL_MS,
    heartbeatMs: TURN_HEARTBEAT_MS,
    // The claim is renewed, then the turn looked at as on every tick.
    beat: async (now) => ((await heartbeatTurn(sessionId, turnId, now)) ? look() : { lost: 'the turn was given up' }),
    look,
    confirmWithinMs: TURN_STALE_MS - 2 * TURN_HEARTBEAT_MS,
    onLost() {
      logger.warn("a /ws turn stops: it is no longer its worker's", { sessionId, turnId });
      abort.abort('The turn was given up by the sweeper');
    },
    onRetry(err) {
      logger.warn('turn watch failed; retrying', { sessionId, turnId, error: err as Error });
    },
  });
  return { ticker: watch.ticker, stop: watch.stop, lost: watch.lost };
}
