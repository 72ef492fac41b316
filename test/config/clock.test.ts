import { afterEach, describe, expect, it, vi } from 'vitest';
import { clock, setClock } from '../../lambdas/config/clock.ts';
import { epochSeconds, hasExpired } from '../../lambdas/store/epoch.ts';
import { setClock as moveClock } from '../support/clock.ts';

afterEach(() => {
  vi.useRealTimers();
});

describe('the gateway clock (lambdas/config/clock.ts)', () => {
  it('reads real time by default', () => {
    const before = Date.now();
    const read = clock.now();
    expect(read).toBeGreaterThanOrEqual(before);
    expect(read).toBeLessThanOrEqual(Date.now());
  });

  it('follows fake timers, since it reads Date.now at each call', () => {
    vi.useFakeTimers({ now: 1_000_000 });
    expect(clock.now()).toBe(1_000_000);
    vi.advanceTimersByTime(1_500);
    expect(clock.now()).toBe(1_001_500);
  });

  it('setClock replaces it, for the code that reads the time through it, until its restore', () => {
    const restore = setClock(() => 1_700_000_000_500);
    try {
      expect(clock.now()).toBe(1_700_000_000_500);
      expect(epochSeconds()).toBe(1_700_000_000);
      expect(hasExpired(1_700_000_000)).toBe(true);
      expect(hasExpired(1_700_000_001)).toBe(false);
    } finally {
      restore();
    }
    expect(Math.abs(clock.now() - Date.now())).toBeLessThan(1_000);
  });

  it('restores nest: each puts back the clock it replaced, and passing clock.now around unbound reads the current one', () => {
    const read = clock.now;
    const outer = setClock(() => 1);
    const inner = setClock(() => 2);
    expect(read()).toBe(2);
    inner();
    expect(read()).toBe(1);
    outer();
    expect(read()).toBeGreaterThan(1_000_000_000_000);
  });

  it("test/support/clock.ts moves the gateway's clock and Date together, and puts both back", () => {
    const at = Date.now() + 2 * 3_600_000;
    const back = moveClock(at);
    expect(clock.now() - at).toBeGreaterThanOrEqual(0);
    expect(clock.now() - at).toBeLessThan(1_000);
    expect(Date.now() - at).toBeLessThan(1_000);
    const constructed = new Date();
    expect(constructed.getTime() - at).toBeLessThan(1_000);
    // Moved again within the same test: one put-back restores real time.
    moveClock(at + 60_000);
    expect(clock.now() - at).toBeGreaterThanOrEqual(60_000);
    back();
    expect(Math.abs(clock.now() - Date.now())).toBeLessThan(1_000);
    expect(Math.abs(Date.now() - at)).toBeGreaterThan(3_600_000);
  });
});
