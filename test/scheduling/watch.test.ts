import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { ticker, UNCONFIRMED, watchRecord, type Look, type WatchSpec } from '../../lambdas/scheduling/watch.ts';

/**
 * The watch loop and its timer (lambdas/scheduling/watch.ts) on a fake clock, with inline fakes for the record: what
 * runs on which tick, a busy task skipped, a lost claim, a store that does not answer. The real loops are tested
 * through their jobs: test/vessels/cancel.test.ts and crash.test.ts, test/sessions/interrupt.test.ts and crash.test.ts.
 */

beforeEach(() => {
  vi.useFakeTimers();
  vi.setSystemTime(Date.parse('2026-11-22T16:30:00.000Z'));
});
afterEach(() => {
  vi.useRealTimers();
});

describe('ticker', () => {
  it('runs each task on its own period from when it was added, on one timer', async () => {
    const t = ticker(100);
    const runs: string[] = [];
    t.every(100, async () => void runs.push(`fast@${Date.now() % 10_000}`));
    await vi.advanceTimersByTimeAsync(100);
    t.every(300, async () => void runs.push(`slow@${Date.now() % 10_000}`));
    await vi.advanceTimersByTimeAsync(600);
    t.stop();
    expect(runs.filter((r) => r.startsWith('fast'))).toHaveLength(7);
    // Added at tick 1, so due at ticks 4 and 7 (400 and 700 ms).
    expect(runs.filter((r) => r.startsWith('slow'))).toEqual(['slow@400', 'slow@700']);
    expect(vi.getTimerCount()).toBe(0);
  });

  it('a period is rounded to whole ticks, at least one', async () => {
    const t = ticker(250);
    const a = vi.fn(async () => undefined);
    const b = vi.fn(async () => undefined);
    t.every(20_000, a);
    t.every(10, b);
    await vi.advanceTimersByTimeAsync(40_000);
    t.stop();
    expect(a).toHaveBeenCalledTimes(2);
    expect(b).toHaveBeenCalledTimes(160);
  });

  it('a task still running when its turn comes is skipped, not run twice at once; one that throws runs again', async () => {
    const t = ticker(100);
    let running = 0;
    let most = 0;
    let calls = 0;
    t.every(100, async () => {
      calls++;
      running++;
      most = Math.max(most, running);
      await new Promise((r) => setTimeout(r, 250));
      running--;
      throw new Error('a failure the task did not catch');
    });
    await vi.advanceTimersByTimeAsync(1_000);
    t.stop();
    expect(most).toBe(1);
    // Ticks at 100…1000: started at 100, 400, 700, 1000 (each run spans the next two ticks).
    expect(calls).toBe(4);
  });

  it('stopping one task leaves the others running', async () => {
    const t = ticker(100);
    const kept = vi.fn(async () => undefined);
    const removed = vi.fn(async () => undefined);
    t.every(100, kept);
    const handle = t.every(100, removed);
    await vi.advanceTimersByTimeAsync(200);
    handle.stop();
    await vi.advanceTimersByTimeAsync(300);
    t.stop();
    expect(removed).toHaveBeenCalledTimes(2);
    expect(kept).toHaveBeenCalledTimes(5);
  });
});

describe('watchRecord', () => {
  function spec(over: Partial<WatchSpec> = {}) {
    const abort = new AbortController();
    const calls: string[] = [];
    const s: WatchSpec = {
      signal: abort.signal,
      pollMs: 100,
      heartbeatMs: 1_000,
      beat: async (now) => {
        calls.push('beat');
        return { confirmedAt: now };
      },
      look: async () => {
        calls.push('look');
        return {};
      },
      confirmWithinMs: 2_500,
      onLost: vi.fn(),
      onRetry: vi.fn(),
      ...over,
    };
    return { s, abort, calls };
  }

  it('looks every pollMs, and renews the claim in place of the look every heartbeatMs', async () => {
    const { s, calls } = spec();
    const w = watchRecord(s);
    await vi.advanceTimersByTimeAsync(2_000);
    w.stop();
    expect(calls).toHaveLength(20);
    expect(calls.map((c, i) => (c === 'beat' ? i + 1 : 0)).filter(Boolean)).toEqual([10, 20]);
    expect(w.lost()).toBe(false);
    expect(vi.getTimerCount()).toBe(0);
  });

  it("a look that finds the record no longer the job's: onLost once, with why; no more looks", async () => {
    let looks = 0;
    const { s, abort } = spec({
      look: async () => (++looks === 3 ? { lost: 'moved on' } : {}),
      onLost: vi.fn(() => abort.abort('lost')),
    });
    const w = watchRecord(s);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(s.onLost).toHaveBeenCalledExactlyOnceWith('moved on');
    expect(w.lost()).toBe(true);
    expect(looks).toBe(3);
    w.stop();
  });

  it('a store that does not answer: retried while the claim is recent enough, then given up as unconfirmed', async () => {
    const { s } = spec({
      heartbeatMs: 60_000,
      look: async () => {
        throw new Error('store down');
      },
    });
    const w = watchRecord(s);
    await vi.advanceTimersByTimeAsync(2_500);
    expect(s.onLost).not.toHaveBeenCalled();
    expect(s.onRetry).toHaveBeenCalledTimes(25);
    await vi.advanceTimersByTimeAsync(100);
    expect(s.onLost).toHaveBeenCalledExactlyOnceWith(UNCONFIRMED);
    expect(w.lost()).toBe(true);
    w.stop();
  });

  it('a renewal that confirms the claim moves the give-up time; a look that does not confirm leaves it', async () => {
    let failing = false;
    const { s } = spec({
      heartbeatMs: 1_000,
      confirmWithinMs: 1_500,
      beat: async (now): Promise<Look> => {
        if (failing) throw new Error('store down');
        return { confirmedAt: now };
      },
      look: async () => {
        if (failing) throw new Error('store down');
        return {};
      },
    });
    const w = watchRecord(s);
    await vi.advanceTimersByTimeAsync(1_000); // renewed at 1000
    failing = true;
    await vi.advanceTimersByTimeAsync(1_500); // up to 2500: 1500 since the renewal, not more
    expect(s.onLost).not.toHaveBeenCalled();
    await vi.advanceTimersByTimeAsync(100);
    expect(s.onLost).toHaveBeenCalledExactlyOnceWith(UNCONFIRMED);
    w.stop();
  });

  it('a job that stopped (its signal aborted) is not looked at; a look under way at stop cannot lose it', async () => {
    let release: (look: Look) => void = () => undefined;
    const { s, calls } = spec({
      look: () => {
        calls.push('look');
        return new Promise<Look>((r) => (release = r));
      },
    });
    const w = watchRecord(s);
    await vi.advanceTimersByTimeAsync(100);
    expect(calls).toEqual(['look']);
    w.stop();
    release({ lost: 'the job ended meanwhile' });
    await vi.advanceTimersByTimeAsync(0);
    expect(s.onLost).not.toHaveBeenCalled();
    expect(w.lost()).toBe(false);

    const again = spec();
    again.abort.abort('done');
    const w2 = watchRecord(again.s);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(again.calls).toEqual([]);
    w2.stop();
  });
});
