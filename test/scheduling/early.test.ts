import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { putBackIfEarly } from '../../lambdas/scheduling/early.ts';

/**
 * "Too early, put it back" (lambdas/scheduling/early.ts) on a fake clock: put back beyond the wait-out margin, waited
 * out within it, and let through once due.
 */

const T = Date.parse('2026-11-22T16:30:00.000Z');

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(T);
});
afterEach(() => {
  vi.useRealTimers();
});

describe('putBackIfEarly', () => {
  it('no due time, or due now or earlier: not put back, and no wait', async () => {
    const putBack = vi.fn(async () => undefined);
    await expect(putBackIfEarly({ due: undefined, now: T, putBack })).resolves.toBe(false);
    await expect(putBackIfEarly({ due: T, now: T, putBack })).resolves.toBe(false);
    await expect(putBackIfEarly({ due: T - 5_000, now: T, putBack, waitOutMs: 1_500 })).resolves.toBe(false);
    expect(putBack).not.toHaveBeenCalled();
    expect(Date.now()).toBe(T);
  });

  it('a millisecond early, with no wait-out margin: put back', async () => {
    const putBack = vi.fn(async () => undefined);
    await expect(putBackIfEarly({ due: T + 1, now: T, putBack })).resolves.toBe(true);
    expect(putBack).toHaveBeenCalledOnce();
  });

  it('earlier than the margin: put back at once, nothing waited', async () => {
    const putBack = vi.fn(async () => undefined);
    await expect(putBackIfEarly({ due: T + 1_501, now: T, putBack, waitOutMs: 1_500 })).resolves.toBe(true);
    expect(putBack).toHaveBeenCalledOnce();
    expect(Date.now()).toBe(T);
  });

  it('within the margin: waited out until the due time has really come, then let through', async () => {
    const putBack = vi.fn(async () => undefined);
    let settled: boolean | undefined;
    const check = putBackIfEarly({ due: T + 1_500, now: T, putBack, waitOutMs: 1_500 }).then((put) => (settled = put));
    await vi.advanceTimersByTimeAsync(1_499);
    expect(settled).toBeUndefined();
    await vi.advanceTimersByTimeAsync(1);
    await check;
    expect(settled).toBe(false);
    expect(putBack).not.toHaveBeenCalled();
    expect(Date.now()).toBeGreaterThanOrEqual(T + 1_500);
  });

  it("a put-back that fails is the consumer's failure (the queue retries the message)", async () => {
    const putBack = vi.fn(async () => {
      throw new Error('queue down');
    });
    await expect(putBackIfEarly({ due: T + 10_000, now: T, putBack })).rejects.toThrow('queue down');
  });
});
