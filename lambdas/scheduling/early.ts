import { clock } from '../config/clock.ts';
/**
 * "Too early, put it back", the one way. A queue delay is whole seconds and a schedule fires to the second
 * (delay.ts), so a message may come before its time. Its consumer then sends it again for the rest of the wait: the
 * queue does the waiting, not an invocation that is paid by the millisecond. A message within `waitOutMs` of its time
 * is waited out here instead, where one more trip through the queue would cost more than the wait. Used by the vessel
 * executor (lambdas/vessels/executor.ts) and the webhook sender (lambdas/webhooks/sender.ts).
 */

export interface EarlyCheck {
  /** When the message is due (epoch ms); undefined: whenever it comes. */
  due: number | undefined;
  /** The consumer's clock when it took the message (epoch ms). */
  now: number;
  /** Sends the message again for the rest of the wait. */
  putBack: () => Promise<void>;
  /** How early a message may be and still be waited out here (default 0: every early message is put back). */
  waitOutMs?: number;
}

/** True when the message was early and has been put back (its consumer stops there); false once it is due. */
export async function putBackIfEarly({ due, now, putBack, waitOutMs = 0 }: EarlyCheck): Promise<boolean> {
  if (due === undefined) return false;
  if (due - now > waitOutMs) {
    await putBack();
    return true;
  }
  // A timer may fire a millisecond early (Node rounds its delays): wait until the due time has really come.
  while (clock.now() < due) await new Promise((resolve) => setTimeout(resolve, due - clock.now()));
  return false;
}
