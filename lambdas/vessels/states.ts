import { defineStates } from '../store/record-states.ts';

/**
 * A vessel's status flow (docs/incubate.md, "Lifecycle"), the one place it is written down:
 *
 *   PENDING ──due──▶ QUEUED ──lease──▶ EXECUTING ──▶ COMPLETED | FAILED (also when its execution stopped: a vessel
 *      │               │                  │                                  runs at most once, reconciler.ts)
 *      └───────────────┴──cancel──────────┴──▶ CANCELED (cooperative while EXECUTING)
 *
 * PENDING and QUEUED may also go straight to EXECUTING (a due message that finds room at once) or to FAILED (the
 * run could not start: the user's or the developer's budget is spent, the project is gone).
 */
export const VesselStates = defineStates({
  PENDING: ['QUEUED', 'EXECUTING', 'FAILED', 'CANCELED'],
  QUEUED: ['EXECUTING', 'FAILED', 'CANCELED'],
  EXECUTING: ['COMPLETED', 'FAILED', 'CANCELED'],
  COMPLETED: [],
  FAILED: [],
  CANCELED: [],
});

export type VesselStatus = (typeof VesselStates.statuses)[number];

/** Waiting to run: scheduled for later, or due and waiting for capacity. */
export const WAITING: readonly VesselStatus[] = ['PENDING', 'QUEUED'];

export const isWaiting = (status: VesselStatus): boolean => WAITING.includes(status);

/** The interface's flags: `isCompleted` for every end (so pollers stop), plus which end it was. */
export function flagsOf(status: VesselStatus): { isCompleted: boolean; isSuccess: boolean; isFailed: boolean; isCanceled: boolean } {
  return {
    isCompleted: VesselStates.isTerminal(status),
    isSuccess: status === 'COMPLETED',
    isFailed: status === 'FAILED',
    isCanceled: status === 'CANCELED',
  };
}
