import { ServerResponse } from 'node:http';

/**
 * The benchmark's simulated Anthropic upstream (bench/upstream-server.ts), which also notes when it wrote each text
 * delta of a stream. For the per-event measurement the benchmark needs each event's send time: with it, an event's
 * latency is "arrived at the client − written by the upstream", in the direct run and through the gateway alike.
 *
 * Every write of a `content_block_delta` event whose text is `wordN` is stamped (wall clock, sub-millisecond:
 * performance.timeOrigin + performance.now(), comparable across processes on one machine up to a constant offset
 * that cancels out in "gateway − direct"). When a response with at least BENCH_STAMP_MIN_EVENTS (the per-event run's
 * length) such writes finishes, one line `{"stamps":{"word1":<ms>,…}}` is printed. The cost for other responses is one
 * string comparison per write.
 */
const MIN_STAMPED = Number(process.env.BENCH_STAMP_MIN_EVENTS ?? 500);
const stamps = new WeakMap<ServerResponse, Record<string, number>>();

const write = ServerResponse.prototype.write;
ServerResponse.prototype.write = function stampedWrite(this: ServerResponse, chunk: unknown, ...rest: unknown[]) {
  if (typeof chunk === 'string' && chunk.startsWith('event: content_block_delta')) stamp(this, chunk);
  return (write as (...args: unknown[]) => boolean).call(this, chunk, ...rest);
} as typeof write;

function stamp(res: ServerResponse, event: string): void {
  const word = /"text":"(word\d+)/.exec(event)?.[1];
  if (!word) return;
  let times = stamps.get(res);
  if (!times) {
    const own: Record<string, number> = {};
    times = own;
    stamps.set(res, own);
    res.once('finish', () => {
      if (Object.keys(own).length >= MIN_STAMPED) process.stdout.write(`${JSON.stringify({ stamps: own })}\n`);
    });
  }
  // Stamped before the write: the time the upstream hands the event to its socket.
  times[word] = performance.timeOrigin + performance.now();
}

await import('./upstream-server.ts');
