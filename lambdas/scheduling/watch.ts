import { clock } from '../config/clock.ts';
/**
 * The watch loop, the one way a running job keeps an eye on the record it works for (an executing vessel:
 * lambdas/vessels/watch.ts; a running /ws turn: lambdas/sessions/watch.ts):
 * - every `pollMs` it looks at the record (a cancel, an interrupt, a new connection: the caller's to act on);
 * - every `heartbeatMs` it renews the job's claim on the record instead, so the sweep that frees the claims of dead
 *   workers (the vessel reconciler, the session sweeper) leaves it alone;
 * - a look or a renewal that finds the record no longer the job's stops the job (`onLost`), and so does a store that
 *   cannot confirm the claim before the sweep would take it: two workers of one record never run on together.
 *
 * It runs on a `ticker`, one timer for all of a job's periodic work: the job's lease renewals ride on the same timer
 * (plans/leases.ts `keepLeaseAlive`), so an executing vessel or a running turn has one timer, not three.
 */

export interface Ticker {
  /**
   * Runs `task` every `everyMs` from now on, rounded to whole ticks (at least one), never two runs of it at once: a
   * turn that comes while the last run is still going is skipped, as a busy `setInterval` callback would skip it.
   * `stop` removes this task alone.
   */
  every(everyMs: number, task: () => Promise<void>): { stop(): void };
  /** Stops the timer, and every task on it. */
  stop(): void;
}

/**
 * One `setInterval` of `tickMs` for several periodic tasks. Turns are counted in ticks, not measured on the clock, so
 * a timer that fires a millisecond early (Node rounds its delays) never makes a task miss its turn.
 */
export function ticker(tickMs: number): Ticker {
  let count = 0;
  const tasks = new Set<{ period: number; from: number; busy: boolean; run: () => Promise<void> }>();
  const timer = setInterval(() => {
    count++;
    for (const task of tasks) {
      if (task.busy || (count - task.from) % task.period !== 0) continue;
      task.busy = true;
      // A task handles its own failures; one that throws anyway is tried again at its next turn.
      void task
        .run()
        .catch(() => undefined)
        .finally(() => (task.busy = false));
    }
  }, tickMs);
  // Nothing here keeps a process alive: a job that ended stops its ticker, a process that ends takes it along.
  timer.unref?.();
  return {
    every(everyMs, run) {
      const task = { period: Math.max(1, Math.round(everyMs / tickMs)), from: count, busy: false, run };
      tasks.add(task);
      return { stop: () => tasks.delete(task) };
    },
    stop() {
      tasks.clear();
      clearInterval(timer);
    },
  };
}

/** What one look (or renewal) of the watch saw. */
export type Look =
  /** Still the job's; `confirmedAt` when this look proved the claim holds until a sweep could take it (epoch ms). */
  | { lost?: undefined; confirmedAt?: number }
  /** No longer the job's, and why. */
  | { lost: string };

export interface WatchSpec {
  /** The job's signal: once the job has stopped, nothing is looked at any more. */
  signal: AbortSignal;
  pollMs: number;
  heartbeatMs: number;
  /** Renews the job's claim, every `heartbeatMs`, in place of that turn's look (it may look too). */
  beat(now: number): Promise<Look>;
  /** Looks at the record, every other `pollMs`. */
  look(now: number): Promise<Look>;
  /**
   * A look that fails (the store did not answer) is retried at the next tick while the claim was confirmed less than
   * this long ago: the claim's life less a margin, past which a sweep may have taken it.
   */
  confirmWithinMs: number;
  /** The job is no longer the record's worker: stop it. Called at most once, never after `stop`. */
  onLost(why: string): void;
  /** A look failed and is retried at the next tick (for the log). */
  onRetry(err: unknown): void;
}

export interface Watch {
  /** The watch's timer, for the job's other periodic work (its lease's renewals). */
  ticker: Ticker;
  /** Stops the watch and its timer; a look already under way can no longer stop the job. */
  stop(): void;
  /** The job was found no longer the record's worker (`onLost` was called): its end must not be written. */
  lost(): boolean;
}

/** Why a job stops when the store could not confirm its claim in time. */
export const UNCONFIRMED = 'the store could not confirm the execution in time';

export function watchRecord(spec: WatchSpec): Watch {
  const timer = ticker(spec.pollMs);
  let lost = false;
  let stopped = false;
  let lastBeat = clock.now();
  let confirmedAt = clock.now();
  const lose = (why: string) => {
    // A look already on its way when the job ended sees the job's own end: nothing was lost.
    if (stopped || lost) return;
    lost = true;
    spec.onLost(why);
  };
  timer.every(spec.pollMs, async () => {
    if (stopped || spec.signal.aborted) return;
    try {
      const now = clock.now();
      let seen: Look;
      if (now - lastBeat >= spec.heartbeatMs) {
        lastBeat = now;
        seen = await spec.beat(now);
      } else {
        seen = await spec.look(now);
      }
      if (seen.lost !== undefined) return lose(seen.lost);
      if (seen.confirmedAt !== undefined) confirmedAt = seen.confirmedAt;
    } catch (err) {
      if (clock.now() - confirmedAt > spec.confirmWithinMs) lose(UNCONFIRMED);
      else spec.onRetry(err);
    }
  });
  return {
    ticker: timer,
    stop: () => {
      stopped = true;
      timer.stop();
    },
    lost: () => lost,
  };
}
