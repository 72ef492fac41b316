import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Context } from 'aws-lambda';
import { WebSocketServer, type RawData, type WebSocket } from 'ws';
import { MAX_FRAME_BYTES, MAX_MESSAGE_BYTES, type WebSocketLambdaEvent } from '../../lambdas/http/websocket.ts';
import { normalizePath } from '../../lambdas/http/path.ts';
import { lambdaContext, readBody, splitTarget } from './events.ts';

/**
 * An API Gateway WebSocket API on the local server: upgrades at WEBSOCKET_PATH become the $connect, $default
 * (MESSAGE) and $disconnect events API Gateway delivers to the one function whose manifest trigger is `websocket`,
 * and a stand-in of the API Gateway Management API (PostToConnection, DeleteConnection, GetConnection) lets that
 * function reach its clients through the real SDK (apiGatewayConnectionSender, WEBSOCKET_CALLBACK_URL).
 *
 * API Gateway's quotas hold here as in AWS (docs/ws.md, "Limits"), so what they would break breaks in tests too:
 *
 *   - a client message over 32 KB (MAX_FRAME_BYTES) closes the connection with 1009. API Gateway's quota is per
 *     frame (32 KB), with 128 KB per message of several frames; `ws` bounds whole messages only, so this checks the
 *     message against 32 KB: the same for clients that send a message as one frame (browsers, `ws`, most libraries),
 *     stricter for a message fragmented into frames of 32 KB or less, which AWS accepts up to 128 KB;
 *   - a connection with no data frame either way for 10 minutes is closed with 1001 "Going away", and any connection
 *     after 2 hours (IDLE_TIMEOUT_MS, MAX_CONNECTION_MS; tests shorten them: LocalWebSocketOptions, or the
 *     environment's LOCAL_WEBSOCKET_IDLE_MS and LOCAL_WEBSOCKET_MAX_CONNECTION_MS, read at each connection);
 *   - PostToConnection refuses data over 128 KB (MAX_MESSAGE_BYTES) with 413 PayloadTooLargeException.
 */

/** Where the local server accepts WebSocket upgrades. */
export const WEBSOCKET_PATH = '/ws';
/** The stage of the local WebSocket API: the events' `stage`, and the management endpoint's path. */
export const WEBSOCKET_STAGE = 'local';
/** API Gateway's quotas on a frame (32 KB: a bigger one closes the connection with 1009) and on a message (128 KB). */
export { MAX_FRAME_BYTES, MAX_MESSAGE_BYTES };
/** API Gateway's idle connection timeout: 10 minutes without a data frame either way closes the connection. */
export const IDLE_TIMEOUT_MS = 10 * 60 * 1000;
/** API Gateway's maximum connection duration: 2 hours. */
export const MAX_CONNECTION_MS = 2 * 60 * 60 * 1000;
/** The close API Gateway makes when it ends a connection itself (idle, or at its 2 hours). */
const GOING_AWAY = { code: 1001, reason: 'Going away' } as const;
/** How long stop() waits for clients to answer the 1001 close before it cuts their sockets. */
const CLOSE_GRACE_MS = 1000;
/** How long stop() then waits for the invocations in flight ($disconnect above all). */
const PENDING_GRACE_MS = 3000;

type WebSocketHandler = (event: WebSocketLambdaEvent, context: Context) => Promise<unknown>;

export interface WebSocketFunction {
  readonly handler: unknown;
  readonly functionName: string;
  readonly timeoutMs: number;
}

/** Shorter timings for tests; each defaults to the environment's (LOCAL_WEBSOCKET_…), then to AWS's. */
export interface LocalWebSocketOptions {
  /** A connection with no data frame either way for this long is closed with 1001 (IDLE_TIMEOUT_MS). */
  idleTimeoutMs?: number;
  /** A connection is closed with 1001 this long after it opened (MAX_CONNECTION_MS). */
  maxConnectionMs?: number;
}

/** A positive whole number of milliseconds from the environment, if it names one (else a clear error). */
function envMs(name: string): number | undefined {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return undefined;
  const ms = Number(raw);
  if (!Number.isSafeInteger(ms) || ms <= 0) throw new RangeError(`${name} must be a positive whole number of milliseconds, got ${JSON.stringify(raw)}`);
  return ms;
}

interface Connection {
  readonly id: string;
  readonly socket: WebSocket;
  readonly connectedAt: number;
  lastActiveAt: number;
  readonly sourceIp: string;
  readonly userAgent?: string;
  readonly domainName: string;
  /** The close this side started (DeleteConnection, stop): reported in $disconnect rather than the client's echo. */
  closedBy?: { code: number; reason: string };
  /** Closes it after the idle timeout; restarted by every data frame either way. */
  idle?: NodeJS.Timeout;
  /** Closes it at the maximum connection duration. */
  lifetime?: NodeJS.Timeout;
}

/** 11 random bytes in base64, the shape of API Gateway's connection and request ids (`L0SM9cOFvHcCIhw=`). */
function apiGatewayId(): string {
  return randomBytes(11).toString('base64');
}

/** `22/Nov/2026:14:00:00 +0000`, API Gateway's requestTime. */
function requestTime(at: number): string {
  const d = new Date(at);
  const month = d.toLocaleString('en-US', { month: 'short', timeZone: 'UTC' });
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${pad(d.getUTCDate())}/${month}/${d.getUTCFullYear()}:${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())} +0000`;
}

/** The close code `ws` sent for a receiver error (kept under its `status-code` symbol); 1006 when it has none. */
function closeCodeOf(err: Error): number {
  const key = Object.getOwnPropertySymbols(err).find((sym) => sym.description === 'status-code');
  const code = key ? (err as unknown as Record<symbol, unknown>)[key] : undefined;
  return typeof code === 'number' ? code : 1006;
}

/** Raw answer on a socket that is still plain HTTP (a refused upgrade), then the socket is closed. */
function answerUpgrade(socket: Duplex, status: number, body: string, contentType = 'application/json'): void {
  if (socket.destroyed) return;
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? 'Unknown'}\r\ncontent-type: ${contentType}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
  setTimeout(() => socket.destroy(), 100).unref();
}

/** Whether the request is a WebSocket handshake `ws` would accept (checked before $connect, as API Gateway does). */
function isHandshake(req: IncomingMessage): boolean {
  return (
    req.method === 'GET' &&
    req.headers.upgrade?.toLowerCase() === 'websocket' &&
    /^[+/0-9A-Za-z]{22}==$/.test(req.headers['sec-websocket-key'] ?? '') &&
    ['8', '13'].includes(req.headers['sec-websocket-version'] ?? '')
  );
}

function headerMaps(req: IncomingMessage): { headers: Record<string, string>; multiValueHeaders: Record<string, string[]> } {
  // API Gateway keeps the client's spelling of header names; Node keeps it in rawHeaders.
  const headers: Record<string, string> = Object.create(null) as Record<string, string>;
  const multiValueHeaders: Record<string, string[]> = Object.create(null) as Record<string, string[]>;
  for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
    const name = req.rawHeaders[i]!;
    const value = req.rawHeaders[i + 1]!;
    headers[name] = value;
    multiValueHeaders[name] ??= [];
    multiValueHeaders[name].push(value);
  }
  return { headers, multiValueHeaders };
}

function statusOf(result: unknown): { statusCode: number; body: string; headers: Record<string, string> } {
  if (typeof result === 'object' && result !== null) {
    const r = result as { statusCode?: unknown; body?: unknown; headers?: unknown; isBase64Encoded?: unknown };
    const statusCode = typeof r.statusCode === 'number' ? r.statusCode : 200;
    let body = typeof r.body === 'string' ? r.body : '';
    if (r.isBase64Encoded === true) body = Buffer.from(body, 'base64').toString('utf8');
    const headers = typeof r.headers === 'object' && r.headers !== null ? (r.headers as Record<string, string>) : {};
    return { statusCode, body, headers };
  }
  // A function that returns nothing (or a string) accepts the connection, as a 200 would.
  return { statusCode: 200, body: typeof result === 'string' ? result : '', headers: {} };
}

export class LocalWebSockets {
  constructor(private readonly options: LocalWebSocketOptions = {}) {}

  private readonly wss = new WebSocketServer({
    noServer: true,
    // Whole messages: see the module's comment for how this stands to API Gateway's per-frame quota.
    maxPayload: MAX_FRAME_BYTES,
    // The subprotocol the $connect function chose (its Sec-WebSocket-Protocol response header), as API Gateway answers.
    handleProtocols: (_protocols, req) => this.protocols.get(req) ?? false,
  });
  private readonly protocols = new WeakMap<IncomingMessage, string>();
  private readonly connections = new Map<string, Connection>();
  private readonly pending = new Set<Promise<unknown>>();
  private started = 0;
  private fn?: WebSocketFunction;
  private management?: Server;
  private stopping?: Promise<void>;
  /** `http://127.0.0.1:PORT/local`: the callback URL the events carry (WEBSOCKET_CALLBACK_URL). */
  managementEndpoint = '';

  /** Starts the management API stand-in on 127.0.0.1 (a free port) and returns its endpoint. */
  async listen(): Promise<string> {
    const server = createServer((req, res) => {
      void this.manage(req, res).catch((err: unknown) => {
        console.error(`local management API failed: ${(err as Error)?.stack ?? String(err)}`);
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json', 'x-amzn-errortype': 'InternalServerError' });
        res.end(JSON.stringify({ message: 'Internal server error' }));
      });
    });
    this.management = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    this.managementEndpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}/${WEBSOCKET_STAGE}`;
    return this.managementEndpoint;
  }

  /** The function invoked for the events (loaded after listen(), once the environment names the endpoint). */
  serve(fn: WebSocketFunction): void {
    this.fn = fn;
  }

  /** The local server's 'upgrade' listener: /ws becomes a connection (if $connect accepts it), anything else 404. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const path = normalizePath(splitTarget(req.url).path);
    if (path !== WEBSOCKET_PATH || !this.fn) {
      answerUpgrade(socket, 404, JSON.stringify({ message: 'Not Found' }));
      return;
    }
    if (this.stopping) {
      answerUpgrade(socket, 503, JSON.stringify({ message: 'The local runtime is stopping' }));
      return;
    }
    if (!isHandshake(req)) {
      answerUpgrade(socket, 400, JSON.stringify({ message: 'Bad Request: not a WebSocket handshake' }));
      return;
    }
    this.track(this.connect(this.fn, req, socket, head));
  }

  private async connect(fn: WebSocketFunction, req: IncomingMessage, socket: Duplex, head: Buffer): Promise<void> {
    let timings: { idleMs: number; lifetimeMs: number };
    try {
      timings = this.timings();
    } catch (err) {
      console.error(`local WebSocket API: ${(err as Error).message}`);
      answerUpgrade(socket, 500, JSON.stringify({ message: (err as Error).message }));
      return;
    }
    const now = Date.now();
    const id = apiGatewayId();
    const { query } = splitTarget(req.url);
    const params = new URLSearchParams(query);
    const single: Record<string, string> = Object.create(null) as Record<string, string>;
    const multi: Record<string, string[]> = Object.create(null) as Record<string, string[]>;
    for (const [k, v] of params) {
      single[k] = v;
      multi[k] ??= [];
      multi[k].push(v);
    }
    const sourceIp = req.socket.remoteAddress ?? '127.0.0.1';
    const domainName = req.headers.host ?? 'localhost';
    const event: WebSocketLambdaEvent = {
      ...headerMaps(req),
      ...(query ? { queryStringParameters: single, multiValueQueryStringParameters: multi } : {}),
      requestContext: {
        ...this.context(id, now, domainName, now),
        routeKey: '$connect',
        eventType: 'CONNECT',
        identity: { sourceIp, ...(req.headers['user-agent'] ? { userAgent: req.headers['user-agent'] } : {}) },
      },
      isBase64Encoded: false,
    };
    let answer: ReturnType<typeof statusOf>;
    try {
      answer = statusOf(await this.invoke(fn, event));
    } catch (err) {
      console.error(`${fn.functionName} ($connect) failed: ${(err as Error)?.stack ?? String(err)}`);
      answerUpgrade(socket, 500, JSON.stringify({ message: 'Internal server error' }));
      return;
    }
    if (answer.statusCode < 200 || answer.statusCode > 299) {
      const type = Object.entries(answer.headers).find(([k]) => k.toLowerCase() === 'content-type')?.[1];
      answerUpgrade(socket, answer.statusCode, answer.body, type ?? 'application/json');
      return;
    }
    if (socket.destroyed || this.stopping) {
      // The client gave up during $connect (or the runtime is stopping): there is no connection to disconnect.
      socket.destroy();
      return;
    }
    const protocol = Object.entries(answer.headers).find(([k]) => k.toLowerCase() === 'sec-websocket-protocol')?.[1];
    if (protocol) this.protocols.set(req, protocol);
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      const conn: Connection = {
        id,
        socket: ws,
        connectedAt: now,
        lastActiveAt: now,
        sourceIp,
        ...(req.headers['user-agent'] ? { userAgent: req.headers['user-agent'] } : {}),
        domainName,
      };
      this.connections.set(id, conn);
      this.startTimers(conn, timings);
      ws.on('message', (data, isBinary) => {
        conn.idle?.refresh();
        this.track(this.message(fn, conn, data, isBinary));
      });
      // A frame over maxPayload: `ws` closes with 1009 and reports it here; the close that follows is the disconnect.
      ws.on('error', (err) => {
        // `ws` has sent the close frame (1009 for a frame over maxPayload, 1002/1007 for a protocol error) and stops
        // reading, so the client's echo never arrives: the disconnect reports the code sent, not 1006.
        conn.closedBy ??= { code: closeCodeOf(err), reason: err.message };
        console.error(`${fn.functionName}: WebSocket ${id} closed on error: ${err.message}`);
      });
      ws.once('close', (code, reason) => {
        clearTimeout(conn.idle);
        clearTimeout(conn.lifetime);
        this.connections.delete(id);
        this.track(this.disconnect(fn, conn, conn.closedBy?.code ?? code, conn.closedBy?.reason ?? reason.toString('utf8')));
      });
    });
  }

  /** The idle timeout and maximum duration of a new connection: the options', else the environment's, else AWS's. */
  private timings(): { idleMs: number; lifetimeMs: number } {
    return {
      idleMs: this.options.idleTimeoutMs ?? envMs('LOCAL_WEBSOCKET_IDLE_MS') ?? IDLE_TIMEOUT_MS,
      lifetimeMs: this.options.maxConnectionMs ?? envMs('LOCAL_WEBSOCKET_MAX_CONNECTION_MS') ?? MAX_CONNECTION_MS,
    };
  }

  /** API Gateway's idle timeout and maximum duration, both closing with 1001 "Going away". */
  private startTimers(conn: Connection, { idleMs, lifetimeMs }: { idleMs: number; lifetimeMs: number }): void {
    conn.idle = setTimeout(() => this.close(conn, GOING_AWAY.code, GOING_AWAY.reason), idleMs).unref();
    conn.lifetime = setTimeout(() => this.close(conn, GOING_AWAY.code, GOING_AWAY.reason), lifetimeMs).unref();
  }

  private async message(fn: WebSocketFunction, conn: Connection, data: RawData, isBinary: boolean): Promise<void> {
    const now = Date.now();
    conn.lastActiveAt = now;
    const bytes = Array.isArray(data) ? Buffer.concat(data) : Buffer.from(data as Buffer);
    const event: WebSocketLambdaEvent = {
      requestContext: {
        ...this.context(conn.id, conn.connectedAt, conn.domainName, now),
        routeKey: '$default',
        eventType: 'MESSAGE',
        messageId: apiGatewayId(),
        identity: { sourceIp: conn.sourceIp, ...(conn.userAgent ? { userAgent: conn.userAgent } : {}) },
      },
      body: isBinary ? bytes.toString('base64') : bytes.toString('utf8'),
      isBase64Encoded: isBinary,
    };
    try {
      await this.invoke(fn, event);
    } catch (err) {
      // API Gateway only notes a failed message integration; the connection stays open.
      console.error(`${fn.functionName} ($default) failed: ${(err as Error)?.stack ?? String(err)}`);
    }
  }

  private async disconnect(fn: WebSocketFunction, conn: Connection, code: number, reason: string): Promise<void> {
    const now = Date.now();
    const event: WebSocketLambdaEvent = {
      headers: { Host: conn.domainName, 'X-Forwarded-For': conn.sourceIp },
      multiValueHeaders: { Host: [conn.domainName], 'X-Forwarded-For': [conn.sourceIp] },
      requestContext: {
        ...this.context(conn.id, conn.connectedAt, conn.domainName, now),
        routeKey: '$disconnect',
        eventType: 'DISCONNECT',
        disconnectStatusCode: code,
        disconnectReason: reason,
        identity: { sourceIp: conn.sourceIp, ...(conn.userAgent ? { userAgent: conn.userAgent } : {}) },
      },
      isBase64Encoded: false,
    };
    try {
      await this.invoke(fn, event);
    } catch (err) {
      console.error(`${fn.functionName} ($disconnect) failed: ${(err as Error)?.stack ?? String(err)}`);
    }
  }

  private context(connectionId: string, connectedAt: number, domainName: string, now: number) {
    return {
      connectionId,
      connectedAt,
      requestId: apiGatewayId(),
      extendedRequestId: apiGatewayId(),
      apiId: 'local',
      domainName,
      stage: WEBSOCKET_STAGE,
      requestTime: requestTime(now),
      requestTimeEpoch: now,
      messageDirection: 'IN' as const,
    };
  }

  /** The one place the function is called ($connect, $default and $disconnect all come through here). */
  private invoke(fn: WebSocketFunction, event: WebSocketLambdaEvent): Promise<unknown> {
    return (fn.handler as WebSocketHandler)(event, lambdaContext(fn.functionName, fn.timeoutMs));
  }

  /**
   * The events handed to the function ($connect, $default, $disconnect), read only: how many since the start, and how
   * many are being handled now. For tests that prove nothing more happens (test/support/drained.ts).
   */
  activity(): { started: number; running: number } {
    return { started: this.started, running: this.pending.size };
  }

  private track(work: Promise<unknown>): void {
    this.started++;
    this.pending.add(work);
    void work.finally(() => this.pending.delete(work));
  }

  /** The Management API's REST shape under the stage: POST, DELETE and GET `/local/@connections/{id}`. */
  private async manage(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const { path } = splitTarget(req.url);
    const match = new RegExp(`^/${WEBSOCKET_STAGE}/@connections/([^/]+)$`).exec(path);
    const reply = (status: number, body?: unknown, errorType?: string) => {
      res.writeHead(status, {
        'content-type': 'application/json',
        'x-amzn-requestid': randomUUID(),
        ...(errorType ? { 'x-amzn-errortype': errorType } : {}),
      });
      res.end(body === undefined ? '' : JSON.stringify(body));
    };
    if (!match) return reply(404, { message: `No route for ${req.method} ${path}` }, 'NotFoundException');
    let id: string;
    try {
      id = decodeURIComponent(match[1]!);
    } catch {
      return reply(400, { message: 'Invalid connection id' }, 'BadRequestException');
    }
    // Read the body before answering, whatever the answer (a POST to a gone connection still sends its data).
    const read = await readBody(req, MAX_MESSAGE_BYTES);
    if (!read) return;
    const conn = this.connections.get(id);
    const open = conn && conn.socket.readyState === conn.socket.OPEN && !conn.closedBy;
    const gone = () => reply(410, { message: `Connection ${id} is gone` }, 'GoneException');
    switch (req.method) {
      case 'POST': {
        // The rest of the upload is not read: the connection closes after the answer.
        if (read.truncated) res.shouldKeepAlive = false;
        if (read.truncated) return reply(413, { message: `Message too long: at most ${MAX_MESSAGE_BYTES} bytes` }, 'PayloadTooLargeException');
        if (!open) return gone();
        let text: string | undefined;
        try {
          text = new TextDecoder('utf-8', { fatal: true }).decode(read.body);
        } catch {
          text = undefined; // not UTF-8: a binary frame
        }
        const sent = await new Promise<boolean>((resolve) => {
          if (text !== undefined) conn.socket.send(text, (err) => resolve(!err));
          else conn.socket.send(read.body, { binary: true }, (err) => resolve(!err));
        });
        if (sent) conn.idle?.refresh();
        return sent ? reply(200) : gone();
      }
      case 'DELETE':
        if (!open) return gone();
        this.close(conn, 1000, '');
        return reply(204);
      case 'GET':
        if (!open) return gone();
        return reply(200, {
          connectedAt: new Date(conn.connectedAt).toISOString(),
          identity: { sourceIp: conn.sourceIp, userAgent: conn.userAgent ?? '' },
          lastActiveAt: new Date(conn.lastActiveAt).toISOString(),
        });
      default:
        return reply(405, { message: `Method ${req.method} not allowed` }, 'MethodNotAllowedException');
    }
  }

  private close(conn: Connection, code: number, reason: string): void {
    conn.closedBy ??= { code, reason };
    conn.socket.close(code, reason);
  }

  /**
   * Closes every connection with 1001 (each gets its $disconnect), waits a moment for the clients' answers and for
   * the invocations in flight, then stops the management stand-in. Never waits on a client that does not answer.
   */
  stop(): Promise<void> {
    this.stopping ??= (async () => {
      const sockets = [...this.connections.values()];
      for (const conn of sockets) this.close(conn, 1001, 'Going away');
      const deadline = Date.now() + CLOSE_GRACE_MS;
      while (this.connections.size > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
      for (const conn of this.connections.values()) conn.socket.terminate();
      // The $disconnect invocations (and messages in flight) finish while DynamoDB and the queues are still up.
      const settled = Date.now() + PENDING_GRACE_MS;
      while ((this.pending.size > 0 || this.connections.size > 0) && Date.now() < settled) await new Promise((r) => setTimeout(r, 20));
      await new Promise<void>((resolve) => this.wss.close(() => resolve()));
      const server = this.management;
      if (server) {
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
      }
    })();
    return this.stopping;
  }
}
