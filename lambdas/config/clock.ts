/**
 * The gateway's one clock: every read of the time in lambdas/ is `clock.now()` (epoch milliseconds), or
 * `new Date(clock.now())` where a Date is wanted, and every `now` parameter defaults to it. Tests move it with
 * `setClock` (test/support/clock.ts does, for a clock set to a given moment); nothing else replaces it. By default it
 * reads `Date.now()` at each call, so fake timers (vi.useFakeTimers) move it too. Parsing and formatting a given time
 * (`new Date(value)`, `Date.parse`) are not reads of the clock and stay as they are. It imports nothing, so any module
 * may use it, the receivers' helper (webhooks/verify.ts) included.
 */

/** A clock: now, in epoch milliseconds. */
export type Clock = () => number;

const systemClock: Clock = () => Date.now();
let current: Clock = systemClock;

export const clock = {
  /** Now, in epoch milliseconds. Safe to pass around unbound (`now: () => number = clock.now`). */
  now: (): number => current(),
};

/** Replaces the clock (tests); returns what puts back the one it replaced. */
export function setClock(next: Clock): () => void {
  const previous = current;
  current = next;
  return () => {
    current = previous;
  };
}
