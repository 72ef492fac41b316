import { settle, type Reservation, type SettleOutcome } from '../budgets/ledger.ts';
import { onInstanceReset } from '../instance/state.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';

/**
 * Settlements still being written to the ledger. An invocation must not end with any: Lambda may freeze the
 * instance as soon as it returns, and the charge would then wait for the sweep. A cancelled stream's `cancel()`
 * awaits its settlement and the response pipe waits for `cancel()`; every handler also awaits this set before it
 * returns, so the guarantee does not rest on how a body happens to be piped.
 */
const pending = new Set<Promise<unknown>>();
onInstanceReset(() => pending.clear());

/** Registers a settlement until it completes. */
export function track<T>(settlement: Promise<T>): Promise<T> {
  const tracked = settlement.finally(() => pending.delete(tracked));
  pending.add(tracked);
  return tracked;
}

export async function settlementsInFlight(): Promise<void> {
  await Promise.allSettled([...pending]);
}

/** How many settlements are still being written. */
export function unsettledCount(): number {
  return pending.size;
}

/**
 * Turns a reservation into what the call cost. A ledger failure never loses the answer: the hold stays, expires,
 * and the sweep charges its worst case (docs/contract.md, "Hard cap"); the failure is counted and logged.
 */
export async function settleCharge(reservation: Reservation, microdollars: number, context: Record<string, unknown>): Promise<SettleOutcome | undefined> {
  try {
    const outcome = await settle(reservation, { ai: microdollars, compute: 0 });
    emit('SpendMicrodollars', microdollars);
    if (outcome.overrun) {
      // The provider billed more than the bound: the truth is charged, and the estimate error made visible.
      emit('OverrunMicrodollars', outcome.overrun);
      logger.warn('charged above the reservation', { ...context, reservationId: reservation.id, reserved: reservation.held.ai, charged: microdollars, overrun: outcome.overrun });
    }
    return outcome;
  } catch (err) {
    emit('LedgerErrors', 1);
    logger.error('settle failed', { error: err as Error, reservationId: reservation.id, ...context });
    return undefined;
  }
}
