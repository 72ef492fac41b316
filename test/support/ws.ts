import WebSocket from 'ws';

/** A frame the gateway sent, with when it arrived (ms since the client connected). */
export type Frame = Record<string, unknown> & { type: string; at: number };

export interface WsClient {
  socket: WebSocket;
  /** Every frame received so far, in order. */
  frames: Frame[];
  send(frame: unknown): void;
  /** The next frame (after those already taken by `next`) that matches, waiting up to `timeoutMs`. */
  next(match?: (f: Frame) => boolean, timeoutMs?: number): Promise<Frame>;
  /** Frames up to and including the next `result` or `error`. */
  untilResult(timeoutMs?: number): Promise<Frame[]>;
  close(): Promise<void>;
  closed: Promise<{ code: number; reason: string }>;
}

/**
 * A real `ws` client of the gateway's /ws: connects with the token (header, or `?token=` with `viaQuery`) and
 * records every JSON frame. Rejects with the HTTP status when the upgrade is refused.
 */
export async function connectWs(url: string, token: string | undefined, opts: { viaQuery?: boolean } = {}): Promise<WsClient> {
  const target = token && opts.viaQuery ? `${url}?token=${encodeURIComponent(token)}` : url;
  const socket = new WebSocket(target, token && !opts.viaQuery ? { headers: { authorization: `Bearer ${token}` } } : {});
  const started = Date.now();
  const frames: Frame[] = [];
  let cursor = 0;
  const waiters = new Set<() => void>();
  socket.on('message', (data) => {
    frames.push({ ...(JSON.parse(String(data)) as Record<string, unknown> & { type: string }), at: Date.now() - started });
    for (const w of [...waiters]) w();
  });
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('unexpected-response', (_req, res) => {
      let body = '';
      res
        .on('data', (c: Buffer) => (body += c))
        .on('end', () => reject(Object.assign(new Error(`upgrade refused: ${res.statusCode} ${body}`), { status: res.statusCode, body })));
    });
    socket.once('error', reject);
  });
  const next = (match: (f: Frame) => boolean = () => true, timeoutMs = 15_000) =>
    new Promise<Frame>((resolve, reject) => {
      const look = () => {
        for (let i = cursor; i < frames.length; i++) {
          if (match(frames[i]!)) {
            cursor = i + 1;
            waiters.delete(look);
            clearTimeout(timer);
            resolve(frames[i]!);
            return;
          }
        }
      };
      const timer = setTimeout(() => {
        waiters.delete(look);
        reject(new Error(`no matching frame within ${timeoutMs} ms; frames so far: ${JSON.stringify(frames.slice(cursor))}`));
      }, timeoutMs);
      waiters.add(look);
      look();
    });
  return {
    socket,
    frames,
    send: (frame) => socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame)),
    next,
    async untilResult(timeoutMs) {
      const from = cursor;
      await next((f) => f.type === 'result' || f.type === 'error', timeoutMs);
      return frames.slice(from, cursor);
    },
    async close() {
      if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close(1000);
      await closed;
    },
    closed,
  };
}
