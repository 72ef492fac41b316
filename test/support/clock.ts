import { onTestFinished, vi } from 'vitest';
import { setClock as setGatewayClock } from '../../lambdas/config/clock.ts';

/** What puts the gateway's clock back as it was before the first move of the running test. */
let restoreGateway: (() => void) | undefined;

/**
 * Moves the clock so that it reads `at` now, and runs on with real time from there. The gateway's clock
 * (lambdas/config/clock.ts, which every read of the time in lambdas/ goes through) reads real time plus an offset; so
 * does the process's `Date` (its constructor without arguments and `Date.now`), for what is not the gateway's code: the
 * local runtime's stand-ins (the scheduler's tick) and the test's own reads. Call it within a test: both are put back
 * when the test ends, or earlier by the function it returns. A test's own `vi.unstubAllGlobals()` puts back `Date` only.
 */
export function setClock(at: number): () => void {
  const RealDate = (globalThis as { __realDate?: DateConstructor }).__realDate ?? Date;
  (globalThis as { __realDate?: DateConstructor }).__realDate = RealDate;
  const offset = at - RealDate.now();
  const undo = setGatewayClock(() => RealDate.now() + offset);
  if (!restoreGateway) {
    restoreGateway = undo;
    onTestFinished(() => restore());
  }
  class ShiftedDate extends RealDate {
    constructor(...args: unknown[]) {
      if (args.length === 0) super(RealDate.now() + offset);
      else super(...(args as [string | number | Date]));
    }
    static override now(): number {
      return RealDate.now() + offset;
    }
    static override [Symbol.hasInstance](value: unknown): boolean {
      return value instanceof RealDate;
    }
  }
  vi.stubGlobal('Date', ShiftedDate);
  return restore;
}

/** Puts the gateway's clock and `Date` back to real time. */
function restore(): void {
  restoreGateway?.();
  restoreGateway = undefined;
  vi.unstubAllGlobals();
}
