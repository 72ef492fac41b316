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
  const queue = frameQueue<Frame>(15_000);
  socket.on('message', (data) => queue.push({ ...(JSON.parse(String(data)) as Record<string, unknown> & { type: string }), at: Date.now() - started }));
  const closed = new Promise<{ code: number; reason: string }>((resolve) => socket.on('close', (code, reason) => resolve({ code, reason: String(reason) })));
  await opened(socket);
  const { frames, next } = queue;
  return {
    socket,
    frames,
    send: (frame) => socket.send(typeof frame === 'string' ? frame : JSON.stringify(frame)),
    next,
    async untilResult(timeoutMs) {
      const from = queue.taken();
      await next((f) => f.type === 'result' || f.type === 'error', timeoutMs);
      return frames.slice(from, queue.taken());
    },
    async close() {
      if (socket.readyState === WebSocket.OPEN || socket.readyState === WebSocket.CONNECTING) socket.close(1000);
      await closed;
    },
    closed,
  };
}

/**
 * Frames in arrival order and `next`: the next frame, after those already taken, that matches — waiting up to
 * `timeoutMs` (by default `defaultTimeoutMs`) for it to arrive. What connectWs and the part-protocol client share.
 */
export function frameQueue<F>(defaultTimeoutMs: number): {
  frames: F[];
  push(frame: F): void;
  next(match?: (f: F) => boolean, timeoutMs?: number): Promise<F>;
  /** How many frames `next` has gone past. */
  taken(): number;
} {
  const frames: F[] = [];
  let cursor = 0;
  const waiters = new Set<() => void>();
  const next = (match: (f: F) => boolean = () => true, timeoutMs = defaultTimeoutMs) =>
    new Promise<F>((resolve, reject) => {
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
        reject(new Error(`no matching frame within ${timeoutMs} ms; frames so far: ${JSON.stringify(frames.slice(cursor)).slice(0, 2000)}`));
      }, timeoutMs);
      waiters.add(look);
      look();
    });
  return {
    frames,
    push(frame) {
      frames.push(frame);
      for (const w of [...waiters]) w();
    },
    next,
    taken: () => cursor,
  };
}

/** Resolves once `socket` is open; rejects with the status and body when the upgrade is refused. */
export function opened(socket: WebSocket): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    socket.once('open', () => resolve());
    socket.once('unexpected-response', (_req, res) => {
      let body = '';
      res
        .on('data', (c: Buffer) => (body += c))
        .on('end', () => reject(Object.assign(new Error(`upgrade refused: ${res.statusCode} ${body}`), { status: res.statusCode, body })));
    });
    socket.once('error', reject);
  });
}
