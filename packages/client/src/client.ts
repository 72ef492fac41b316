import { GatewayError } from './errors.js';
import { type GatewaySession, openSession, type SessionInit, type WebSocketConstructor } from './session.js';
import { SseParser } from './sse.js';
import type {
  IncubateBatchRequest,
  IncubateBatchResponse,
  IncubateRequest,
  PromptMessage,
  PromptOptions,
  PromptResponse,
  PromptResult,
  QueuedVessel,
  Usage,
  VesselRecord,
  VesselTiming,
} from './types.js';

/**
 * The end user's side: a small typed client of the gateway's `/prompt`, `/incubate`, `/usage` and `/ws`, on `fetch`
 * and `WebSocket` only, for browsers, apps, edge functions and Node ≥ 18. It carries the user's token (minted by your
 * backend with `mintUserToken`), sends every body as `application/json` (the gateway answers 415 otherwise) and turns
 * each refusal into a `GatewayError`.
 */

export type TokenSource = string | (() => string | Promise<string>);

export interface GatewayClientOptions {
  /** The conjure URL (stack output `ConjureUrl`; locally `http://127.0.0.1:8787`): `/usage`, `/incubate`, and `/prompt` unless `promptUrl`. */
  baseUrl: string;
  /** The prompt URL (stack output `PromptUrl`) when `/prompt` is not served at `baseUrl` (a deployed stack). */
  promptUrl?: string;
  /** The channeling URL (stack output `ChannelingUrl`), for `anthropicOptions()`; default `baseUrl`. */
  channelingUrl?: string;
  /** The sessions URL (stack output `SessionsWebSocketUrl`, `wss://…/<stage>`); default `baseUrl` as ws(s)://…/ws, as `npm start` serves it. */
  wsUrl?: string;
  /** The user's token, or a function that answers one (called before each request, so it can refresh it). */
  token: TokenSource;
  /** Default the global `fetch`. */
  fetch?: (input: string, init?: RequestInit) => Promise<Response>;
  /** Default the global `WebSocket` (browsers, Deno, Bun, Node ≥ 22). On Node < 22 pass the `ws` package's. */
  WebSocket?: WebSocketConstructor;
}

export interface RequestOptions {
  signal?: AbortSignal;
}

export interface WaitForVesselOptions extends RequestOptions {
  /** Between two polls; default 1,000 ms. */
  intervalMs?: number;
  /** Give up after this long (an `Error`); default never. */
  timeoutMs?: number;
  /** Called with each record read. */
  onPoll?: (record: VesselRecord) => void;
}

export interface GatewayClient {
  /** `POST /prompt`: one agent run, answered as JSON once it has ended. */
  prompt(message: string, options?: PromptOptions, init?: RequestOptions): Promise<PromptResponse>;
  /** `POST /prompt` with SSE: the run's messages as they happen — `for await (const m of client.promptStream(…))`. */
  promptStream(message: string, options?: PromptOptions, init?: RequestOptions): PromptStream;
  /** `POST /incubate`: queue a background run (a vessel). */
  incubate(request: IncubateRequest, init?: RequestOptions): Promise<QueuedVessel>;
  /** `POST /incubate/batch`: up to 100 vessels sharing options, callback and timing; each item succeeds or fails alone. */
  incubateBatch(request: IncubateBatchRequest, init?: RequestOptions): Promise<IncubateBatchResponse>;
  /** `GET /incubate/vessel/{id}`: the vessel's record. */
  vessel(vesselId: string, init?: RequestOptions): Promise<VesselRecord>;
  /** Polls the vessel until it has ended (`isCompleted`), and answers its final record. */
  waitForVessel(vesselId: string, opts?: WaitForVesselOptions): Promise<VesselRecord>;
  /** `POST /incubate/vessel/{id}/cancel`: the record (`CANCELED`, or `EXECUTING` with `cancelRequested` while it stops). */
  cancel(vesselId: string, init?: RequestOptions): Promise<VesselRecord>;
  /** `GET /usage`: the user's current budget window. */
  usage(init?: RequestOptions): Promise<Usage>;
  /** Opens a `/ws` session: authenticates with the first frame, starts (or resumes) the session. */
  session(init?: SessionInit): Promise<GatewaySession>;
  /** Options for the Anthropic SDK (`new Anthropic(await client.anthropicOptions())`): the channeling URL and the token. */
  anthropicOptions(): Promise<{ baseURL: string; apiKey: string; dangerouslyAllowBrowser: true }>;
}

export function createGatewayClient(opts: GatewayClientOptions): GatewayClient {
  if (!opts || typeof opts.baseUrl !== 'string' || !/^https?:\/\//.test(opts.baseUrl)) throw new TypeError('baseUrl must be an http(s) URL');
  if (opts.token === undefined || opts.token === null || opts.token === '') throw new TypeError('token is required');
  const base = trimSlash(opts.baseUrl);
  const promptBase = trimSlash(opts.promptUrl ?? opts.baseUrl);
  const wsUrl = opts.wsUrl ?? `${base.replace(/^http/, 'ws')}/ws`;
  const userFetch = opts.fetch;
  // Called as a plain function: a browser's fetch refuses to run with another object as `this`.
  const doFetch = (input: string, init?: RequestInit) => (userFetch ? userFetch(input, init) : globalThis.fetch(input, init));
  const token = async () => {
    const value = typeof opts.token === 'function' ? await opts.token() : opts.token;
    if (typeof value !== 'string' || value === '') throw new TypeError('token: the token source gave no token');
    return value;
  };

  /** One request; a refusal becomes a GatewayError. */
  async function send(method: 'GET' | 'POST', url: string, init: { body?: unknown; bearer?: boolean; accept?: string; signal?: AbortSignal }) {
    const headers: Record<string, string> = { accept: init.accept ?? 'application/json' };
    if (method === 'POST') headers['content-type'] = 'application/json';
    if (init.bearer) headers.authorization = `Bearer ${await token()}`;
    const res = await doFetch(url, {
      method,
      headers,
      ...(init.body !== undefined ? { body: JSON.stringify(init.body) } : {}),
      ...(init.signal ? { signal: init.signal } : {}),
    });
    if (!res.ok) throw await GatewayError.fromResponse(res);
    return res;
  }

  async function json<T>(res: Response): Promise<T> {
    const text = await res.text();
    let body: unknown;
    try {
      body = JSON.parse(text);
    } catch {
      throw GatewayError.fromBody(res.status, text, res.headers);
    }
    return body as T;
  }

  const promptBody = async (message: string, options: PromptOptions | undefined) => ({ message, options: { ...options, token: await token() } });
  const vesselUrl = (id: string) => {
    if (typeof id !== 'string' || id === '') throw new TypeError('vesselId is required');
    return `${base}/incubate/vessel/${encodeURIComponent(id)}`;
  };

  const client: GatewayClient = {
    async prompt(message, options, init = {}) {
      const res = await send('POST', `${promptBase}/prompt`, { body: await promptBody(message, options), signal: init.signal });
      const body = await json<Omit<PromptResponse, 'requestId'> & { error?: string; message?: string }>(res);
      // A run that failed inside the gateway after the answer started: 200 with {"error":"internal_error",…}.
      if (!body.result) throw GatewayError.fromBody(body.error ? 500 : res.status, body, res.headers);
      return { ...body, requestId: res.headers.get('request-id') ?? undefined };
    },

    promptStream(message, options, init = {}) {
      return new PromptStream(async () =>
        send('POST', `${promptBase}/prompt`, { body: await promptBody(message, options), accept: 'text/event-stream', signal: init.signal }),
      );
    },

    async incubate(request, init = {}) {
      const { message, idempotencyKey, options, callback } = request;
      const body = { message, idempotencyKey, options: { ...options, token: await token() }, ...timing(request), ...(callback ? { callback } : {}) };
      const res = await send('POST', `${base}/incubate`, { body, signal: init.signal });
      const queued = await json<Omit<QueuedVessel, 'replayed' | 'requestId'>>(res);
      return {
        ...queued,
        replayed: res.status === 200 || res.headers.get('idempotent-replayed') === 'true',
        requestId: res.headers.get('request-id') ?? undefined,
      };
    },

    async incubateBatch(request, init = {}) {
      const { items, options, callback } = request;
      const body = { items, options: { ...options, token: await token() }, ...timing(request), ...(callback ? { callback } : {}) };
      const res = await send('POST', `${base}/incubate/batch`, { body, signal: init.signal });
      return { ...(await json<Omit<IncubateBatchResponse, 'requestId'>>(res)), requestId: res.headers.get('request-id') ?? undefined };
    },

    async vessel(vesselId, init = {}) {
      return json<VesselRecord>(await send('GET', vesselUrl(vesselId), { bearer: true, signal: init.signal }));
    },

    async waitForVessel(vesselId, { intervalMs = 1000, timeoutMs, signal, onPoll } = {}) {
      const deadline = timeoutMs === undefined ? Number.POSITIVE_INFINITY : Date.now() + timeoutMs;
      for (;;) {
        const record = await client.vessel(vesselId, { signal });
        onPoll?.(record);
        if (record.isCompleted) return record;
        if (Date.now() + intervalMs > deadline) throw new Error(`Vessel ${vesselId} had not ended after ${timeoutMs} ms (status ${record.status})`);
        await sleep(intervalMs, signal);
      }
    },

    async cancel(vesselId, init = {}) {
      return json<VesselRecord>(await send('POST', `${vesselUrl(vesselId)}/cancel`, { bearer: true, signal: init.signal }));
    },

    async usage(init = {}) {
      return json<Usage>(await send('GET', `${base}/usage`, { bearer: true, signal: init.signal }));
    },

    session(init = {}) {
      return openSession({ url: wsUrl, token, WebSocket: opts.WebSocket, ...init });
    },

    async anthropicOptions() {
      // The token is the user's own, made to be held by the page: the SDK's browser guard does not apply.
      return { baseURL: trimSlash(opts.channelingUrl ?? opts.baseUrl), apiKey: await token(), dangerouslyAllowBrowser: true };
    },
  };
  return client;
}

/**
 * `/prompt`'s Server-Sent Events as an async iterable of the interface's message objects (`assistant` text chunks, tool
 * events, the `result`); it ends at the gateway's `done` event. Iterate it once. Breaking out of the loop, or the
 * request's `signal`, closes the stream, and the gateway stops the run (what it used so far is charged).
 */
export class PromptStream implements AsyncIterable<PromptMessage> {
  /** The run's session id: from the `x-session-id` header once the answer has started. */
  sessionId: string | undefined;
  /** The answer's `request-id`. */
  requestId: string | undefined;
  /** The `result` message, once it has arrived. */
  result: PromptResult | undefined;
  private used = false;

  constructor(private readonly open: () => Promise<Response>) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<PromptMessage, void, undefined> {
    if (this.used) throw new Error('A PromptStream can be iterated once');
    this.used = true;
    const res = await this.open();
    this.sessionId = res.headers.get('x-session-id') ?? undefined;
    this.requestId = res.headers.get('request-id') ?? undefined;
    if (!res.body) throw GatewayError.fromBody(res.status, 'The answer has no body', res.headers);
    const reader = res.body.getReader();
    const parser = new SseParser();
    let done = false;
    try {
      while (!done) {
        const chunk = await reader.read();
        const events = chunk.done ? parser.end() : parser.push(chunk.value);
        for (const event of events) {
          if (event.event === 'done') {
            const { sessionId } = JSON.parse(event.data) as { sessionId?: string };
            if (sessionId) this.sessionId = sessionId;
            done = true;
            break;
          }
          if (event.event !== 'message') continue;
          const message = JSON.parse(event.data) as PromptMessage | { type: 'error'; error: string; message?: string };
          // The gateway failed during the run: `{"type":"error","error":"internal_error",…}`, then the stream ends.
          if (message.type === 'error') throw GatewayError.fromBody(500, { error: message.error, message: message.message }, res.headers);
          if (message.type === 'result') this.result = message;
          yield message;
        }
        if (chunk.done && !done) {
          throw GatewayError.fromBody(res.status, { error: 'stream_interrupted', message: 'The stream ended before the run did' }, res.headers);
        }
      }
    } finally {
      // An early exit (break, throw, abort) closes the connection, and the gateway stops the run. After `done` there is
      // nothing more to read.
      await reader.cancel().catch(() => {});
    }
  }

  /** Reads the rest of the stream; answers the run's `result`. */
  async finalResult(): Promise<PromptResult> {
    if (!this.used) for await (const _ of this) void _;
    if (!this.result) throw new Error('The stream has been iterated without its result');
    return this.result;
  }
}

function timing(request: VesselTiming): { ttl?: number; executeAt?: string } {
  return {
    ...(request.ttl !== undefined ? { ttl: request.ttl } : {}),
    ...(request.executeAt !== undefined ? { executeAt: request.executeAt instanceof Date ? request.executeAt.toISOString() : request.executeAt } : {}),
  };
}

function trimSlash(url: string): string {
  return url.replace(/\/+$/, '');
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      reject(abortReason(signal!));
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new DOMException('This operation was aborted', 'AbortError');
}
