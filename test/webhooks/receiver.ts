import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A webhook receiver for the webhook tests: a node:http server on 127.0.0.1 that records every request (raw body
 * bytes, headers, arrival time) and answers each one from a programmable queue.
 *
 *   const rx = await startReceiver();                    // answers 204 by default
 *   rx.answer({ status: 500 }, { status: 500 });         // the next two requests get 500, then the default again
 *   rx.answer({ status: 429, headers: { 'retry-after': '2' } });
 *   rx.answer({ hang: true });                           // never answers (the connection stays open until close())
 *   await incubate(..., callback: { url: rx.url, ... });
 *   const [req] = await rx.waitFor(1);                   // resolves once 1 request has arrived
 *   req.body (Buffer, exact bytes), req.text, req.headers, req.at (Date.now() at arrival = body fully read)
 *   await rx.close();
 *
 * The API (startReceiver, Receiver, ReceivedRequest, ReceiverAnswer) is stable; other test files import it.
 */

/** One recorded request. */
export interface ReceivedRequest {
  method: string;
  /** Path and query as sent, e.g. "/hook?x=1". */
  path: string;
  /** Node's parsed headers (lower-case names). */
  headers: IncomingHttpHeaders;
  /** The raw header list as it came over the wire: [name, value, name, value, …] in original case. */
  rawHeaders: string[];
  /** The exact body bytes. */
  body: Buffer;
  /** The body decoded as UTF-8. */
  text: string;
  /** Date.now() when the body had been read completely (before the answer is sent). */
  at: number;
}

/** How to answer one request. */
export interface ReceiverAnswer {
  /** HTTP status; default 204. */
  status?: number;
  /** Response headers, e.g. { location: 'http://…' } or { 'retry-after': '3' }. */
  headers?: Record<string, string>;
  /** Response body; default empty. */
  body?: string;
  /** Wait this long before answering. */
  delayMs?: number;
  /** Never answer: keep the request open until the client gives up or close() is called. */
  hang?: boolean;
}

export interface Receiver {
  /** `http://127.0.0.1:<port><path>` (path defaults to "/hook"). */
  url: string;
  port: number;
  /** Every request so far, in arrival order (a live array). */
  requests: ReceivedRequest[];
  /** Queues answers for the next requests, in order; when the queue is empty the default answer is used. */
  answer(...answers: ReceiverAnswer[]): void;
  /** Replaces the default answer (initially `{ status: 204 }`). */
  setDefault(answer: ReceiverAnswer): void;
  /** Resolves with `requests` once at least `count` requests have arrived; rejects after `timeoutMs` (default 30 s). */
  waitFor(count: number, timeoutMs?: number): Promise<ReceivedRequest[]>;
  /** Stops the server and drops open (hanging) connections. */
  close(): Promise<void>;
}

export async function startReceiver(opts: { path?: string; default?: ReceiverAnswer } = {}): Promise<Receiver> {
  const requests: ReceivedRequest[] = [];
  const queue: ReceiverAnswer[] = [];
  let fallback: ReceiverAnswer = opts.default ?? { status: 204 };
  const waiters = new Set<() => void>();
  const timers = new Set<NodeJS.Timeout>();

  const respond = (res: ServerResponse, a: ReceiverAnswer) => {
    if (a.hang) return;
    const send = () => {
      if (res.destroyed) return;
      res.writeHead(a.status ?? 204, a.headers ?? {});
      res.end(a.body ?? '');
    };
    if (a.delayMs) {
      const t = setTimeout(() => {
        timers.delete(t);
        send();
      }, a.delayMs);
      timers.add(t);
    } else send();
  };

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      requests.push({
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        rawHeaders: req.rawHeaders,
        body,
        text: body.toString('utf8'),
        at: Date.now(),
      });
      respond(res, queue.shift() ?? fallback);
      for (const w of [...waiters]) w();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;

  return {
    url: `http://127.0.0.1:${port}${opts.path ?? '/hook'}`,
    port,
    requests,
    answer: (...answers) => {
      queue.push(...answers);
    },
    setDefault: (a) => {
      fallback = a;
    },
    waitFor: (count, timeoutMs = 30_000) =>
      new Promise((resolve, reject) => {
        const check = () => {
          if (requests.length >= count) {
            waiters.delete(check);
            clearTimeout(timer);
            resolve(requests);
          }
        };
        const timer = setTimeout(() => {
          waiters.delete(check);
          reject(new Error(`receiver got ${requests.length} request(s), wanted ${count}, within ${timeoutMs} ms`));
        }, timeoutMs);
        waiters.add(check);
        check();
      }),
    close: async () => {
      for (const t of timers) clearTimeout(t);
      timers.clear();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The receivers a test file starts, closed together: `start` one in a test, `closeAll` in afterEach (or afterAll).
 */
export function receiverPool(): { start(opts?: Parameters<typeof startReceiver>[0]): Promise<Receiver>; closeAll(): Promise<void> } {
  const open: Receiver[] = [];
  return {
    async start(opts) {
      const rx = await startReceiver(opts);
      open.push(rx);
      return rx;
    },
    async closeAll() {
      await Promise.all(open.splice(0).map((r) => r.close()));
    },
  };
}
