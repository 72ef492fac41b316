import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { env } from '../config/env.ts';
import { CANCEL_POLL_MS, leaseRenewIntervalMs, leaseTtlMs } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import { watchRecord, type Ticker } from '../scheduling/watch.ts';
import { documentClient } from '../store/dynamo.ts';
import { vesselKey } from './record.ts';
import { touchVessel } from './store.ts';

export interface ExecutionWatch {
  /** The watch's timer: the run's lease renewals ride on it (agent/admitted-run.ts), one timer per execution. */
  ticker: Ticker;
  stop(): void;
  /** A cancel was requested and the run was told to stop. */
  canceled(): boolean;
  /**
   * The execution no longer owns the vessel: the reconciler gave it to another execution (this one had stopped
   * renewing), or it could not confirm its ownership before the reconciler would. Its end must not be written.
   */
  takenOver(): boolean;
}

/**
 * Watches an EXECUTING vessel on behalf of its execution (`runId`), with the watch loop (scheduling/watch.ts):
 * - every CANCEL_POLL_MS, reads whether a cancel was requested, and aborts the run with the reason if so;
 * - every leaseRenewIntervalMs(), pushes the vessel's `reconcileAt` a lease's length ahead — the reconciler treats
 *   an execution that stopped doing so as dead and retries the vessel;
 * - when that heartbeat finds the vessel moved on, or cannot be confirmed before `reconcileAt` would pass, the run is
 *   aborted and marked taken over: two executions of one vessel never run on together.
 */
export function watchExecution(vesselId: string, runId: string, abort: AbortController, opts: { pollMs?: number; heartbeatMs?: number } = {}): ExecutionWatch {
  let canceled = false;
  const pollMs = opts.pollMs ?? CANCEL_POLL_MS;
  const leaseMs = leaseTtlMs();
  const cancel = () => {
    canceled = true;
    abort.abort('The vessel was canceled while it ran');
  };
  const watch = watchRecord({
    signal: abort.signal,
    pollMs,
    heartbeatMs: opts.heartbeatMs ?? leaseRenewIntervalMs(),
    // Only the heartbeat pushes `reconcileAt`, so only it confirms the execution for the reconciler's sake.
    async beat(now) {
      const beat = await touchVessel(vesselId, {
        status: 'EXECUTING',
        when: { expression: 'runId = :run', values: { ':run': runId } },
        set: { reconcileAt: now + leaseMs },
      });
      if (!beat.ok) return { lost: 'the vessel was given to another execution' };
      if (beat.vessel.cancelRequested) cancel();
      return { confirmedAt: now };
    },
    async look() {
      const out = await documentClient().send(
        new GetCommand({
          TableName: env().VESSELS_TABLE,
          Key: vesselKey(vesselId),
          ConsistentRead: true,
          ProjectionExpression: '#status, runId, cancelRequested',
          ExpressionAttributeNames: { '#status': 'status' },
        }),
      );
      const seen = out.Item as { status?: string; runId?: string; cancelRequested?: boolean } | undefined;
      if (seen?.status !== 'EXECUTING' || seen.runId !== runId) return { lost: 'the vessel moved on' };
      if (seen.cancelRequested) cancel();
      return {};
    },
    confirmWithinMs: leaseMs - 2 * pollMs,
    onLost(why) {
      logger.warn('vessel execution stops: it no longer owns the vessel', { vesselId, runId, why });
      abort.abort(`The execution stopped: ${why}`);
    },
    onRetry(err) {
      logger.warn('vessel watch failed; retrying', { vesselId, error: err as Error });
    },
  });
  return { ticker: watch.ticker, stop: watch.stop, canceled: () => canceled, takenOver: watch.lost };
}
