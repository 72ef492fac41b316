/**
 * Passes a byte stream through, failing it with a TimeoutError when no chunk arrives for `ms`. Cancelling the result
 * cancels the source (which aborts the upstream fetch).
 */
export function withIdleTimeout(source: ReadableStream<Uint8Array>, ms: number): ReadableStream<Uint8Array> {
  const reader = source.getReader();
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      let timer: NodeJS.Timeout | undefined;
      const timeout = new Promise<never>((_, reject) => {
        timer = setTimeout(() => reject(new DOMException(`No data from upstream for ${ms} ms`, 'TimeoutError')), ms);
      });
      try {
        const { done, value } = await Promise.race([reader.read(), timeout]);
        if (done) controller.close();
        else controller.enqueue(value);
      } catch (err) {
        reader.cancel(err).catch(() => undefined);
        controller.error(err);
      } finally {
        clearTimeout(timer);
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}
