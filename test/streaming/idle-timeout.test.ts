import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { readWithin, withIdleTimeout } from '../../lambdas/streaming/idle-timeout.ts';

/**
 * readWithin / withIdleTimeout: an upstream stream that goes quiet for longer than the idle gap fails with a
 * TimeoutError; one that keeps talking passes through untouched, however long it runs in total. Fake timers drive
 * the clock (the source's pauses and the idle timer alike); one test checks the same with the real clock.
 */

const enc = new TextEncoder();
const dec = new TextDecoder();
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** A source that sends each chunk after its pause, then closes, hangs (sends nothing more) or fails. */
function scriptedSource(script: Array<[pauseMs: number, text: string]>, then: 'close' | 'hang' | Error = 'close') {
  const cancelled: unknown[] = [];
  let step = 0;
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const next = script[step++];
      if (next) {
        await sleep(next[0]);
        controller.enqueue(enc.encode(next[1]));
      } else if (then === 'close') controller.close();
      else if (then === 'hang') await new Promise(() => undefined);
      else controller.error(then);
    },
    cancel(reason) {
      cancelled.push(reason);
    },
  });
  return { stream, cancelled };
}

/** Reads the stream to its end: the text of every chunk, and how it ended. */
async function drain(stream: ReadableStream<Uint8Array>): Promise<{ chunks: string[]; error?: unknown }> {
  const chunks: string[] = [];
  const reader = stream.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { chunks };
      chunks.push(dec.decode(value));
    }
  } catch (error) {
    return { chunks, error };
  }
}

function expectTimeout(err: unknown, ms: number): void {
  expect(err).toBeInstanceOf(DOMException);
  expect(err).toMatchObject({ name: 'TimeoutError', message: `No data from upstream for ${ms} ms` });
}

describe('with fake timers', () => {
  beforeEach(() => {
    vi.useFakeTimers();
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  describe('readWithin', () => {
    it('gives the value of a read that settles in time, and leaves no timer behind', async () => {
      const result = readWithin(
        sleep(49).then(() => 'chunk'),
        50,
      );
      await vi.advanceTimersByTimeAsync(49);
      await expect(result).resolves.toBe('chunk');
      expect(vi.getTimerCount()).toBe(0);
    });

    it('fails with a TimeoutError once the gap passes, and leaves no timer behind', async () => {
      const result = readWithin(new Promise(() => undefined), 50);
      const settled = result.catch((err: unknown) => err);
      await vi.advanceTimersByTimeAsync(49);
      expect(vi.getTimerCount()).toBe(1);
      await vi.advanceTimersByTimeAsync(1);
      expectTimeout(await settled, 50);
      expect(vi.getTimerCount()).toBe(0);
    });

    it('passes on the read’s own failure unchanged', async () => {
      const boom = new Error('socket hang up');
      await expect(readWithin(Promise.reject(boom), 50)).rejects.toBe(boom);
      expect(vi.getTimerCount()).toBe(0);
    });

    it('a read that fails after the timeout is ignored, not an unhandled rejection', async () => {
      const late = sleep(80).then(() => {
        throw new Error('too late');
      });
      const settled = readWithin(late, 50).catch((err: unknown) => err);
      await vi.advanceTimersByTimeAsync(100);
      expectTimeout(await settled, 50);
    });
  });

  describe('withIdleTimeout', () => {
    it('passes every chunk through in order and closes with the source', async () => {
      const source = scriptedSource([
        [10, 'a'],
        [0, 'b'],
        [49, 'c'],
      ]);
      const read = drain(withIdleTimeout(source.stream, 50));
      await vi.advanceTimersByTimeAsync(200);
      expect(await read).toEqual({ chunks: ['a', 'b', 'c'] });
      expect(source.cancelled).toEqual([]);
      expect(vi.getTimerCount()).toBe(0);
    });

    it('times each gap, not the whole stream: ten 40 ms gaps under a 50 ms limit pass', async () => {
      const script = Array.from({ length: 10 }, (_, i): [number, string] => [40, String(i)]);
      const source = scriptedSource(script);
      const read = drain(withIdleTimeout(source.stream, 50));
      await vi.advanceTimersByTimeAsync(500);
      expect((await read).chunks).toEqual(script.map(([, text]) => text));
    });

    it('a gap longer than the limit fails the stream with a TimeoutError after the chunks that came, and cancels the source', async () => {
      const source = scriptedSource(
        [
          [10, 'a'],
          [10, 'b'],
          [60, 'never delivered'],
        ],
        'close',
      );
      const read = drain(withIdleTimeout(source.stream, 50));
      await vi.advanceTimersByTimeAsync(20);
      await vi.advanceTimersByTimeAsync(49);
      expect(source.cancelled).toEqual([]);
      await vi.advanceTimersByTimeAsync(1);
      const { chunks, error } = await read;
      expect(chunks).toEqual(['a', 'b']);
      expectTimeout(error, 50);
      // The source is cancelled with the same TimeoutError (which aborts the upstream fetch).
      expect(source.cancelled).toEqual([error]);
    });

    it('a source that never sends anything times out too', async () => {
      const source = scriptedSource([], 'hang');
      const read = drain(withIdleTimeout(source.stream, 50));
      await vi.advanceTimersByTimeAsync(50);
      const { chunks, error } = await read;
      expect(chunks).toEqual([]);
      expectTimeout(error, 50);
      expect(source.cancelled).toHaveLength(1);
    });

    it('a source that fails passes its own error on, not a TimeoutError', async () => {
      const boom = new Error('upstream reset');
      const source = scriptedSource([[5, 'a']], boom);
      const read = drain(withIdleTimeout(source.stream, 50));
      await vi.advanceTimersByTimeAsync(10);
      expect(await read).toEqual({ chunks: ['a'], error: boom });
    });

    it('an empty source just closes', async () => {
      const read = drain(withIdleTimeout(scriptedSource([]).stream, 50));
      await vi.advanceTimersByTimeAsync(0);
      expect(await read).toEqual({ chunks: [] });
    });

    it('cancelling the result cancels the source with the same reason, and no timeout follows', async () => {
      const source = scriptedSource([[5, 'a']], 'hang');
      const reader = withIdleTimeout(source.stream, 50).getReader();
      const first = reader.read();
      await vi.advanceTimersByTimeAsync(5);
      expect(dec.decode((await first).value)).toBe('a');
      const reason = new Error('Client disconnected');
      await reader.cancel(reason);
      expect(source.cancelled).toEqual([reason]);
      await vi.advanceTimersByTimeAsync(500);
      expect(source.cancelled).toEqual([reason]);
    });
  });
});

describe('with the real clock', () => {
  it('a 50 ms idle limit fails a silent source in about 50 ms, and lets a talking one through', async () => {
    const silent = scriptedSource([[5, 'a']], 'hang');
    const started = performance.now();
    const { chunks, error } = await drain(withIdleTimeout(silent.stream, 50));
    const elapsed = performance.now() - started;
    expect(chunks).toEqual(['a']);
    expectTimeout(error, 50);
    expect(elapsed).toBeGreaterThanOrEqual(50);
    expect(elapsed).toBeLessThan(5_000);

    const talking = scriptedSource([
      [5, 'x'],
      [5, 'y'],
    ]);
    expect(await drain(withIdleTimeout(talking.stream, 1_000))).toEqual({ chunks: ['x', 'y'] });
  });
});
