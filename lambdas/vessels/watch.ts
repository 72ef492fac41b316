import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { env } from '../config/env.ts';
import { logger } from '../observability/logger.ts';
import { LEASE_RENEW_INTERVAL_MS, LEASE_TTL_MS } from '../plans/leases.ts';
import { documentClient } from '../store/dynamo.ts';
import { vesselKey } from './record.ts';
import { touchVessel } from './store.ts';

/** How often an executing vessel looks for a cancel request: the longest a cancel waits to be seen. */
export const CANCEL_POLL_MS = 1_000;

export interface ExecutionWatch {
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
 * Watches an EXECUTING vessel on behalf of its execution (`runId`):
 * - every CANCEL_POLL_MS, reads whether a cancel was requested, and aborts the run with the reason if so;
 * - every LEASE_RENEW_INTERVAL_MS, pushes the vessel's `reconcileAt` a lease's length ahead — the reconciler treats
 *   an execution that stopped doing so as dead and retries the vessel;
 * - when that heartbeat finds the vessel moved on, or cannot be confirmed before `reconcileAt` would pass, the run is
 *   aborted and marked taken over: two executions of one vessel never run on together.
 */
export function watchExecution(vesselId: string, runId: string, abort: AbortController, opts: { pollMs?: number; heartbeatMs?: number } = {}): ExecutionWatch {
  let canceled = false;
  let takenOver = false;
  let confirmedAt = Date.now();
  let busy = false;
  let lastBeat = Date.now();
  const heartbeatMs = opts.heartbeatMs ?? LEASE_RENEW_INTERVAL_MS;

  const tick = async () => {
    if (busy || abort.signal.aborted) return;
    busy = true;
    try {
      const now = Date.now();
      if (now - lastBeat >= heartbeatMs) {
        lastBeat = now;
        const beat = await touchVessel(vesselId, {
          status: 'EXECUTING',
          when: { expression: 'runId = :run', values: { ':run': runId } },
          set: { reconcileAt: now + LEASE_TTL_MS },
        });
        if (!beat.ok) return lose('the vessel was given to another execution');
        confirmedAt = now;
        if (beat.vessel.cancelRequested) return cancel();
        return;
      }
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
      if (!seen || seen.status !== 'EXECUTING' || seen.runId !== runId) return lose('the vessel moved on');
      if (seen.cancelRequested) cancel();
    } catch (err) {
      // The store did not answer: try again next tick — unless ownership can no longer be vouched for.
      if (Date.now() - confirmedAt > LEASE_TTL_MS - 2 * (opts.pollMs ?? CANCEL_POLL_MS)) lose('the store could not confirm the execution in time');
      else logger.warn('vessel watch failed; retrying', { vesselId, error: err as Error });
    } finally {
      busy = false;
    }
  };
  const cancel = () => {
    canceled = true;
    abort.abort('The vessel was canceled while it ran');
  };
  const lose = (why: string) => {
    // A look already on its way when the run stopped sees the run's own end: nothing was lost.
    if (stopped) return;
    takenOver = true;
    logger.warn('vessel execution stops: it no longer owns the vessel', { vesselId, runId, why });
    abort.abort(`The execution stopped: ${why}`);
  };
  let stopped = false;
  const timer = setInterval(() => void tick(), opts.pollMs ?? CANCEL_POLL_MS);
  timer.unref?.();
  return {
    stop: () => {
      stopped = true;
      clearInterval(timer);
    },
    canceled: () => canceled,
    takenOver: () => takenOver,
  };
}
