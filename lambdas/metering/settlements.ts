import { settle, type Reservation, type SettledCall, type SettleOutcome } from '../budgets/ledger.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';

/**
 * Turns a reservation into what the call cost (and counts it in the project's activity: `call` has its tokens, or
 * says it ended in the provider's error). A ledger failure never loses the answer: the hold stays, expires,
 * and the sweep charges its worst case (docs/contract.md, "Hard cap"); the failure is counted and logged.
 */
export async function settleCharge(
  reservation: Reservation,
  microdollars: number,
  context: { model: string; provider: string },
  call: Omit<SettledCall, 'model'> = {},
): Promise<SettleOutcome | undefined> {
  try {
    const outcome = await settle(reservation, { ai: microdollars, compute: 0 }, undefined, { model: context.model, ...call });
    emit('SpendMicrodollars', microdollars);
    if (outcome.overrun) {
      // The provider billed more than the bound: the truth is charged, and the estimate error made visible.
      emit('OverrunMicrodollars', outcome.overrun);
      logger.warn('charged above the reservation', {
        ...context,
        reservationId: reservation.id,
        reserved: reservation.held.ai,
        charged: microdollars,
        overrun: outcome.overrun,
      });
    }
    return outcome;
  } catch (err) {
    emit('LedgerErrors', 1);
    logger.error('settle failed', { error: err as Error, reservationId: reservation.id, ...context });
    return undefined;
  }
}
