import { promises as dns } from 'node:dns';
import { Agent as HttpAgent, request as httpRequest, type ClientRequest, type IncomingMessage, type OutgoingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { LookupFunction } from 'node:net';
import { pipeline, type Readable, Transform, type TransformCallback } from 'node:stream';
import zlib from 'node:zlib';
import { OUTBOUND_CONNECT_TIMEOUT_MS, OUTBOUND_TIMEOUT_MS } from '../config/timing.ts';
import { instanceValue, onInstanceReset } from '../instance/state.ts';
import { checkUrl, currentAddressPolicy, isForbiddenAddress, OutboundRefused, type AddressPolicy } from './guard.ts';

/**
 * The one way the gateway calls a URL on a user's behalf (remote tools, MCP servers, webhooks): docs/contract.md,
 * "Outbound safety". The URL is checked before the call (`checkUrl`); every address a host name resolves to is checked
 * at connect time, inside the socket's own DNS lookup, so the address checked is the address connected to (no DNS
 * rebinding between the two). Redirects are never followed, every call has a total time-out, and bodies are read
 * through `readCapped`.
 *
 * Why a hand-written fetch over `node:http`/`node:https`: the check must sit in the socket's DNS lookup, and Node's
 * global fetch takes no lookup hook (its undici Agent, which would, is internal and not importable). The npm `undici`
 * package could take one, but it is 526 KB minified in every bundle that calls out (Prompt, VesselExecutor,
 * SessionTurn, WebhookSender). `node:http`'s Agent takes `lookup` directly and costs the bundles nothing. What follows
 * is the part of fetch the callers rely on: a `Request`'s normalization of method, headers and body (the global
 * Request class does it, so fetch's rules hold), redirects returned as they are, the time-outs, a web `Response`
 * whose body is decoded as fetch decodes it, and fetch's kinds of failure.
 */

/** 100 KiB. */
export const DEFAULT_MAX_BYTES = 100 * 1024;

export interface OutboundOptions {
  /** The whole call, body included (default 30 s): a TimeoutError when it passes. */
  timeoutMs?: number;
  /** Resolving and connecting, TLS handshake included (default 5 s): a TimeoutError when it passes. */
  connectTimeoutMs?: number;
  /** The caller's own abort. */
  signal?: AbortSignal;
}

export interface ResolvedAddress {
  address: string;
  family: number;
}

/** Host name → every address it resolves to. The default is the system resolver (`dns.lookup`, as sockets use). */
export type OutboundResolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

const systemResolver: OutboundResolver = (hostname) => dns.lookup(hostname, { all: true, order: 'verbatim' });
let resolver: OutboundResolver = systemResolver;

/**
 * Replaces the resolver behind the connect-time check (tests: a name that resolves to a private address without real
 * DNS). Without an argument, or after resetInstanceState(), it is the system resolver again.
 */
export function setOutboundResolver(replacement?: OutboundResolver): void {
  resolver = replacement ?? systemResolver;
}
onInstanceReset(() => setOutboundResolver());

/**
 * The socket's DNS lookup. A name is refused as a whole when any of its addresses is forbidden (a name that mixes
 * public and private answers is a rebinding attempt, not a server). The socket fails with the refusal itself, which
 * `outboundFetch` rejects with as it is. (A literal IP address is never looked up: `checkUrl` has judged it.)
 */
function guardedLookup(policy: AddressPolicy): LookupFunction {
  return (hostname, options, callback) => {
    const answer = async (): Promise<readonly ResolvedAddress[]> => {
      const all = await resolver(hostname);
      const forbidden = all.find((a) => isForbiddenAddress(a.address, policy));
      if (forbidden) throw new OutboundRefused('address', `${hostname} resolves to ${forbidden.address}, which is not allowed`);
      const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
      const usable = family === 0 ? all : all.filter((a) => a.family === family);
      if (usable.length === 0) {
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname });
      }
      return usable;
    };
    answer().then(
      (usable) => {
        if (options.all)
          callback(
            null,
            usable.map((a) => ({ address: a.address, family: a.family })),
          );
        else callback(null, usable[0]!.address, usable[0]!.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, ''),
    );
  };
}

/** How long an idle kept-alive connection is kept (undici's default; a server's shorter `Keep-Alive: timeout` wins). */
const IDLE_SOCKET_MS = 4_000;

/**
 * The keep-alive Agents of this instance, one for http: and one for https:, both under the instance's address policy
 * (the connect time-out is per call, so it needs no Agent of its own). Kept as an instance value so
 * resetInstanceState() (after ALLOW_LOOPBACK_URLS changes) builds them again with the new policy; the old ones close
 * their idle connections at once and each busy one when its exchange ends.
 */
const agents = instanceValue(
  () => {
    const policy = currentAddressPolicy();
    const options = { keepAlive: true, timeout: IDLE_SOCKET_MS, lookup: guardedLookup(policy) };
    return { policy, http: new HttpAgent(options), https: new HttpsAgent(options) };
  },
  ({ http, https }) => {
    for (const agent of [http, https]) {
      (agent as HttpAgent & { keepAlive: boolean }).keepAlive = false; // a busy socket closes when freed
      for (const sockets of Object.values(agent.freeSockets)) for (const socket of sockets ?? []) socket.destroy();
    }
  },
);

/** A signal that aborts with a TimeoutError after `ms` (the timer does not keep the process alive). */
function timeoutSignal(ms: number): AbortSignal {
  const controller = new AbortController();
  setTimeout(() => controller.abort(new DOMException(`outbound call took longer than ${ms} ms`, 'TimeoutError')), ms).unref();
  return controller.signal;
}

/** A network failure, as fetch reports one. */
const fetchFailed = (cause: unknown) => new TypeError('fetch failed', { cause });

/**
 * `fetch` under the outbound rules. Rejects with OutboundRefused (before the call, or at connect time for a name),
 * with a TimeoutError (connect or total time-out) or the caller's abort reason, or with a TypeError "fetch failed"
 * (its `cause` the socket's error) for other network failures, as fetch does. A 3xx comes back as the response,
 * unfollowed. The total time-out also covers reading the body.
 */
export async function outboundFetch(url: string | URL, init: RequestInit = {}, opts: OutboundOptions = {}): Promise<Response> {
  const connectTimeoutMs = opts.connectTimeoutMs ?? OUTBOUND_CONNECT_TIMEOUT_MS;
  const pool = agents();
  const target = checkUrl(url, pool.policy);
  const signals = [timeoutSignal(opts.timeoutMs ?? OUTBOUND_TIMEOUT_MS), opts.signal, init.signal];
  const signal = AbortSignal.any(signals.filter((s): s is AbortSignal => s != null));
  signal.throwIfAborted();
  // fetch's own normalization of the method, the headers (Headers, record or pairs) and the body (string, bytes,
  // URLSearchParams, Blob, FormData, stream), and its TypeErrors for what it refuses (a body on a GET…). A body of
  // known length is sent with its content-length; a stream is sent as it comes, chunked.
  const request = new Request(target, { method: init.method, headers: init.headers, body: init.body, duplex: 'half' } as RequestInit);
  const streamed = request.body !== null && isStream(init.body);
  const bytes = request.body !== null && !streamed ? new Uint8Array(await request.arrayBuffer()) : null;
  signal.throwIfAborted();
  const headers = requestHeaders(request, target, bytes, streamed);
  return exchange({
    target,
    method: request.method,
    headers,
    body: streamed ? request.body : bytes,
    agent: target.protocol === 'https:' ? pool.https : pool.http,
    signal,
    connectTimeoutMs,
  });
}

function isStream(body: unknown): boolean {
  return body instanceof ReadableStream || (typeof body === 'object' && body !== null && Symbol.asyncIterator in body);
}

/** Request headers fetch refuses to send (undici: "invalid … header"): they are the connection's own business. */
const REFUSED_HEADERS = new Set(['transfer-encoding', 'keep-alive', 'upgrade', 'expect']);

/**
 * The request's headers, with what fetch adds when they are missing — and only what a receiver may rely on:
 * `accept: *∕*` (some servers negotiate on it), `user-agent: node` (as Node's own fetch sends; some servers and WAFs
 * refuse a request without one; the callers mostly set their own), `accept-encoding` as undici's fetch sends it (the
 * body is decoded below, as fetch does) and the body's `content-length` (also `0` for a POST or PUT without a body).
 * The browser-only `accept-language: *` and `sec-fetch-mode: cors` are not sent. Host comes from the URL, as in fetch.
 */
function requestHeaders(request: Request, target: URL, bytes: Uint8Array | null, streamed: boolean): OutgoingHttpHeaders {
  const out: Record<string, string> = {};
  for (const [name, value] of request.headers) {
    if (REFUSED_HEADERS.has(name)) throw fetchFailed(new Error(`invalid ${name} header`));
    if (name !== 'host') out[name] = value;
  }
  out.accept ??= '*/*';
  out['user-agent'] ??= 'node';
  if (out.range !== undefined) out['accept-encoding'] ??= 'identity';
  out['accept-encoding'] ??= target.protocol === 'https:' ? 'br, gzip, deflate' : 'gzip, deflate';
  if (streamed) {
    if (out['content-length'] === undefined) out['transfer-encoding'] = 'chunked';
    return out;
  }
  const length = bytes?.byteLength ?? 0;
  const given = out['content-length'];
  if (given !== undefined && (!/^\d+$/.test(given) || Number(given) !== length)) {
    throw fetchFailed(new Error(`content-length ${given} does not match the body's ${length} bytes`));
  }
  if (length > 0 || request.method === 'POST' || request.method === 'PUT') out['content-length'] = String(length);
  return out;
}

interface Exchange {
  target: URL;
  method: string;
  headers: OutgoingHttpHeaders;
  body: Uint8Array | ReadableStream<Uint8Array> | null;
  agent: HttpAgent;
  signal: AbortSignal;
  connectTimeoutMs: number;
}

/** One request on the wire: resolves with the response once its head has come, its body still streaming. */
function exchange({ target, method, headers, body, agent, signal, connectTimeoutMs }: Exchange): Promise<Response> {
  let answer: { resolve: (response: Response) => void; reject: (err: unknown) => void } | undefined;
  const promise = new Promise<Response>((resolve, reject) => {
    answer = { resolve, reject };
  });
  // Forgotten once used: the request's listeners live as long as its connection, and must not hold the promise (and
  // through it the Response, which `unread` needs collectable).
  const resolve = (response: Response) => {
    answer?.resolve(response);
    answer = undefined;
  };
  const reject = (err: unknown) => {
    answer?.reject(err);
    answer = undefined;
  };
  const https = target.protocol === 'https:';
  let req: ClientRequest;
  try {
    req = (https ? httpsRequest : httpRequest)({
      agent,
      host: target.hostname.startsWith('[') ? target.hostname.slice(1, -1) : target.hostname,
      port: target.port === '' ? undefined : Number(target.port),
      method,
      path: `${target.pathname}${target.search}`,
      headers,
    });
  } catch (err) {
    reject(fetchFailed(err));
    return promise;
  }
  // A stream body longer or shorter than a content-length the caller gave fails the call, as in fetch.
  (req as ClientRequest & { strictContentLength: boolean }).strictContentLength = true;
  let res: IncomingMessage | undefined;
  let connectTimedOut: DOMException | undefined;

  const onAbort = () => {
    req.destroy(signal.reason);
    res?.destroy(signal.reason);
  };
  signal.addEventListener('abort', onAbort, { once: true });
  const connectTimer = setTimeout(() => {
    connectTimedOut = new DOMException(`no connection within ${connectTimeoutMs} ms`, 'TimeoutError');
    req.destroy(connectTimedOut);
  }, connectTimeoutMs).unref();
  const finish = () => {
    clearTimeout(connectTimer);
    signal.removeEventListener('abort', onAbort);
  };
  req.once('socket', (socket) => {
    // A kept-alive socket is connected already; a new one is connected once resolved, connected (and through TLS).
    if (!socket.connecting) clearTimeout(connectTimer);
    else socket.once(https ? 'secureConnect' : 'connect', () => clearTimeout(connectTimer));
  });
  // After the response's head, a socket's error ends its body (Node destroys the response): nothing to do here.
  req.on('error', (err) => {
    if (res) return;
    finish();
    reject(signal.aborted ? signal.reason : (connectTimedOut ?? (err instanceof OutboundRefused ? err : fetchFailed(err))));
  });
  req.once('response', (incoming) => {
    clearTimeout(connectTimer);
    res = incoming;
    incoming.on('error', () => undefined); // reaches the body's reader (webBody), or nobody wants it
    incoming.once('end', finish);
    incoming.once('close', finish);
    const noBody = method === 'HEAD' || NULL_BODY_STATUS.has(incoming.statusCode ?? 0);
    if (noBody) incoming.resume(); // nothing to read: the connection goes back to the pool
    try {
      resolve(toResponse(incoming, noBody, target, signal));
    } catch (err) {
      incoming.destroy();
      finish();
      reject(fetchFailed(err));
    }
  });

  if (body instanceof ReadableStream) void sendStream(body, req);
  else req.end(body ?? undefined);
  return promise;
}

/** Writes a stream body as it comes, waiting for the socket when it is full; stops reading when the request ends. */
async function sendStream(body: ReadableStream<Uint8Array>, req: ClientRequest): Promise<void> {
  const reader = body.getReader();
  const stop = () => void reader.cancel().catch(() => undefined);
  req.once('close', stop);
  try {
    req.flushHeaders(); // the receiver sees the request at once, whenever the body's first bytes come
    for (;;) {
      const { done, value } = await reader.read();
      if (done || req.destroyed) break;
      if (!(value instanceof Uint8Array)) throw new TypeError('a request body stream must yield Uint8Array chunks');
      if (!req.write(value)) await drained(req);
    }
    if (!req.destroyed) req.end();
  } catch (err) {
    req.destroy(err instanceof Error ? err : new Error(String(err)));
  } finally {
    req.off('close', stop);
  }
}

function drained(req: ClientRequest): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      req.off('drain', done);
      req.off('close', done);
      resolve();
    };
    req.on('drain', done);
    req.on('close', done);
  });
}

/** Statuses whose response has no body (the Response constructor refuses one). */
const NULL_BODY_STATUS = new Set([101, 103, 204, 205, 304]);

/**
 * A Response collected with its body never taken up (no reader, no pipe) closes its connection then, as undici's fetch
 * does, instead of holding it open until the total time-out. A body someone reads outlives its Response: left alone.
 */
const unread = new FinalizationRegistry<WeakRef<ReadableStream<Uint8Array>>>((ref) => {
  const body = ref.deref();
  if (body && !body.locked) body.cancel().catch(() => undefined);
});

function toResponse(res: IncomingMessage, noBody: boolean, target: URL, signal: AbortSignal): Response {
  const status = res.statusCode ?? 0;
  if (status < 200 || status > 599) throw new RangeError(`the server answered with status ${status}`);
  const headers = new Headers();
  const raw = res.rawHeaders;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    try {
      headers.append(raw[i]!, raw[i + 1]!); // every value of a repeated header (set-cookie…) kept
    } catch {
      // a header the Headers class cannot hold is left out
    }
  }
  let body: ReadableStream<Uint8Array> | null = null;
  if (!noBody) {
    const failure = (err: unknown) => (signal.aborted ? signal.reason : new TypeError('terminated', { cause: err }));
    body = webBody(decoded(res, headers.get('content-encoding')), () => res.destroy(), failure);
  }
  const statusText = /^[\t\x20-\x7e\x80-\xff]*$/.test(res.statusMessage ?? '') ? (res.statusMessage ?? '') : '';
  const response = new Response(body, { status, statusText, headers });
  const url = new URL(target);
  url.hash = '';
  Object.defineProperty(response, 'url', { value: url.href });
  if (body) unread.register(response, new WeakRef(body));
  return response;
}

/**
 * A Node stream as a web ReadableStream, pulled with back-pressure (64 KiB queued at most). Chunks are copied (a
 * reader may transfer them). Cancelling it calls `stop` (destroying the response, which closes the connection);
 * an error of the source errors it with `failure(err)`.
 */
function webBody(source: Readable, stop: () => void, failure: (err: unknown) => unknown): ReadableStream<Uint8Array> {
  let settled = false;
  source.pause();
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
        source.on('data', (chunk: Buffer) => {
          if (settled) return;
          controller.enqueue(new Uint8Array(chunk));
          if ((controller.desiredSize ?? 0) <= 0) source.pause();
        });
        source.once('end', () => {
          if (settled) return;
          settled = true;
          controller.close();
        });
        const fail = (err: unknown) => {
          if (settled) return;
          settled = true;
          controller.error(failure(err));
        };
        source.on('error', fail);
        source.once('close', () => fail(new Error('the connection closed before the body ended')));
      },
      pull() {
        source.resume();
      },
      cancel() {
        settled = true;
        stop();
      },
    },
    { highWaterMark: 64 * 1024, size: (chunk) => chunk.byteLength },
  );
}

/** At most this many content codings are undone (undici's limit, against a chain built to exhaust the decoder). */
const MAX_CODINGS = 5;

/**
 * The body with its content codings undone, as fetch does: gzip, deflate (zlib-wrapped or raw), br, and zstd where
 * Node has it, under undici's lenient flush settings. A coding it does not know (identity included, as in undici)
 * leaves the body as sent. The content-encoding and content-length headers stay as the server sent them.
 */
function decoded(res: IncomingMessage, contentEncoding: string | null): Readable {
  const codings = contentEncoding ? contentEncoding.toLowerCase().split(',') : [];
  if (codings.length > MAX_CODINGS) throw new Error(`too many content-encodings in response: ${codings.length}, maximum allowed is ${MAX_CODINGS}`);
  const makers: Array<() => Transform> = [];
  for (const coding of codings.reverse()) {
    const make = DECODERS[coding.trim()];
    if (!make) return res;
    makers.push(make);
  }
  if (makers.length === 0) return res;
  const decoders = makers.map((make) => make());
  pipeline([res, ...decoders], () => undefined); // an error destroys them all; the last one reports it to the body
  return decoders[decoders.length - 1]!;
}

const SYNC = { flush: zlib.constants.Z_SYNC_FLUSH, finishFlush: zlib.constants.Z_SYNC_FLUSH };
const DECODERS: Record<string, (() => Transform) | undefined> = {
  gzip: () => zlib.createGunzip(SYNC),
  'x-gzip': () => zlib.createGunzip(SYNC),
  deflate: () => new Inflate(),
  br: () => zlib.createBrotliDecompress({ flush: zlib.constants.BROTLI_OPERATION_FLUSH, finishFlush: zlib.constants.BROTLI_OPERATION_FLUSH }),
  ...(typeof zlib.createZstdDecompress === 'function' && {
    zstd: () => zlib.createZstdDecompress({ flush: zlib.constants.ZSTD_e_continue, finishFlush: zlib.constants.ZSTD_e_end }),
  }),
};

/** "deflate" as servers send it: zlib-wrapped (the standard) or raw, told apart by the first byte, as undici does. */
class Inflate extends Transform {
  private inner: Transform | undefined;

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (!this.inner) {
      if (chunk.length === 0) {
        callback();
        return;
      }
      this.inner = (chunk[0]! & 0x0f) === 0x08 ? zlib.createInflate(SYNC) : zlib.createInflateRaw(SYNC);
      this.inner.on('data', (data: Buffer) => this.push(data));
      this.inner.on('error', (err) => this.destroy(err));
    }
    this.inner.write(chunk, callback);
  }

  override _flush(callback: TransformCallback): void {
    if (!this.inner) {
      callback();
      return;
    }
    this.inner.once('end', () => callback());
    this.inner.end();
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    this.inner?.destroy();
    callback(err);
  }
}

/**
 * A `fetch` under the same rules, for libraries that take one (the MCP SDK transports' `fetch` option). Options apply
 * to every call it makes; the total time-out counts from each call's start.
 */
export function guardedFetchWith(opts: OutboundOptions = {}): typeof fetch {
  return async (input: RequestInfo | URL, init?: RequestInit) => {
    if (typeof input === 'string' || input instanceof URL) return outboundFetch(input, init, opts);
    // A Request (from any fetch implementation): its parts, overridden by init.
    const fromRequest: RequestInit & { duplex?: 'half' } = {
      method: input.method,
      headers: input.headers,
      signal: input.signal,
      ...(input.body ? { body: input.body, duplex: 'half' } : {}),
    };
    return outboundFetch(input.url, { ...fromRequest, ...init }, opts);
  };
}

/** A `fetch` with the same guard, for libraries that take one (the MCP SDK transports' `fetch` option). */
export const guardedFetch: typeof fetch = guardedFetchWith();

/**
 * Reads at most `maxBytes` of the body (default 100 KiB) as UTF-8 text. At the limit it stops, cancels the body (which
 * closes the connection: the rest is never read) and says `truncated`; a character cut by the limit is dropped.
 * `bytes` is how many body bytes were kept.
 */
export async function readCapped(res: Response, maxBytes: number = DEFAULT_MAX_BYTES): Promise<{ text: string; truncated: boolean; bytes: number }> {
  if (!res.body) return { text: '', truncated: false, bytes: 0 };
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let bytes = 0;
  let truncated = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const room = maxBytes - bytes;
      if (value.byteLength > room) {
        text += decoder.decode(value.subarray(0, room), { stream: true });
        bytes += room;
        truncated = true;
        break;
      }
      text += decoder.decode(value, { stream: true });
      bytes += value.byteLength;
    }
  } catch (err) {
    reader.cancel(err).catch(() => undefined);
    throw err;
  }
  if (truncated) {
    await reader.cancel(new Error(`body truncated at ${maxBytes} bytes`)).catch(() => undefined);
    return { text, truncated, bytes };
  }
  return { text: text + decoder.decode(), truncated, bytes };
}
