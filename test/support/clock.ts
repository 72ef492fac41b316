import { vi } from 'vitest';

/**
 * Moves the process's clock so that it reads `at` now, and runs on with real time from there: `Date` (its
 * constructor without arguments and `Date.now`) reads real time plus an offset. Undone by vi.unstubAllGlobals().
 */
export function setClock(at: number): void {
  const RealDate = (globalThis as { __realDate?: DateConstructor }).__realDate ?? Date;
  (globalThis as { __realDate?: DateConstructor }).__realDate = RealDate;
  const offset = at - RealDate.now();
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
}
