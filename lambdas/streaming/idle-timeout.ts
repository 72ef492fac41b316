/** Waits for `read`, failing with a TimeoutError if it takes longer than `ms` (one idle gap of a stream). */
export async function readWithin<T>(read: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const idle = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new DOMException(`No data from upstream for ${ms} ms`, 'TimeoutError')), ms);
  });
  try {
    return await Promise.race([read, idle]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Passes a byte stream through, failing it with a TimeoutError when no chunk arrives for `ms`. Cancelling the result
 * cancels the source (which aborts the upstream fetch).
 */
export function withIdleTimeout(source: ReadableStream<Uint8Array>, ms: number): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await readWithin(reader.read(), ms);
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (err) {
        reader.cancel(err).catch(() => undefined);
        controller.error(err);
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

/**
 * Whether a failure is a time-out rather than a broken connection: `readWithin`, `AbortSignal.timeout` and the
 * providers' own deadlines all raise (or abort with) a DOMException named TimeoutError.
 */
export function isTimeout(err: unknown): boolean {
  return (err as { name?: unknown } | null | undefined)?.name === 'TimeoutError';
}
