import { SessionError } from './errors.js';
import type { PromptResult, SessionRunOptions, ToolResultMessage } from './types.js';
import { utf8 } from './crypto.js';

/**
 * A `/ws` session (the gateway's docs/ws.md): the connection is opened WITHOUT the token in its URL, which would land
 * in access logs, and a browser's WebSocket can set no header; the token goes in the first frame,
 * `{"type":"auth","token"}`, and `session.start` waits for the gateway's `authenticated`. Then each `send()` is a
 * turn: its text streams to `onText`, each client tool the model calls runs in `onToolUse` and its return value goes
 * back as the `tool_result`, and the turn's `result` resolves the promise. Frames over 32 KB travel as `part` frames
 * both ways, and frames are paced under the gateway's per-second limit.
 */

/** What the package needs of a WebSocket: the browser's, Node ≥ 22's, Deno's, Bun's, or the `ws` package's. */
export interface WebSocketLike {
  readonly readyState: number;
  binaryType: string;
  send(data: string): void;
  close(code?: number, reason?: string): void;
  // biome-ignore lint/suspicious/noExplicitAny: each implementation types its events its own way
  addEventListener(type: string, listener: (event: any) => void): void;
}
export type WebSocketConstructor = new (url: string) => WebSocketLike;

/** A client tool call: run it and return its result. */
export interface ClientToolCall {
  /** The `tool_use` id (the package answers it for you). */
  id: string;
  name: string;
  // biome-ignore lint/suspicious/noExplicitAny: the model's input for your tool's input_schema; check it as you would any input
  input: Record<string, any>;
}

/** A content block of a tool result (`{"type":"text","text"}`, images, documents…: the Messages API's). */
export type ToolContentBlock = { type: string; [key: string]: unknown };

/**
 * What `onToolUse` may return: a string, content blocks, or `{content, isError}`. Anything else is sent as its JSON
 * text. A throw is sent as an error result (`is_error: true`) with the error's message, which the model reads.
 */
export type ToolOutput = string | ToolContentBlock[] | { content: string | ToolContentBlock[]; isError?: boolean } | unknown;

/** A turn's `result` frame: `/prompt`'s result for this turn (subtype `interrupted` after `interrupt()`), and the session's id. */
export interface TurnResult extends PromptResult {
  sessionId: string;
}

/** Every frame the gateway sends (after `part` frames are joined). */
export type ServerFrame =
  | { type: 'authenticated'; userId: string; expiresAt: number }
  | { type: 'session'; sessionId: string; resumed: boolean; state: SessionState; messages: number }
  | { type: 'assistant'; subtype: 'text'; text: string }
  | { type: 'tool_use'; subtype: 'client' | 'http' | 'mcp'; id: string; name: string; input: Record<string, unknown> }
  | ToolResultMessage
  | TurnResult
  | { type: 'error'; error: string; message: string; [key: string]: unknown };

export type SessionState = 'idle' | 'running' | 'awaiting_tools';

export interface SessionInit {
  /** Resume this session (of the same project and user) instead of starting a new one. */
  sessionId?: string;
  /** The session's options (`/prompt`'s; a tool without `url` or `type` is a client tool). On resume, they replace the stored ones when given. */
  options?: SessionRunOptions;
  /** Runs a client tool the model calls; its return value is sent as the `tool_result`. */
  onToolUse?: (call: ClientToolCall) => ToolOutput | Promise<ToolOutput>;
  /** Each chunk of the model's text, as it streams (every turn). */
  onText?: (text: string) => void;
  /** Every frame, for what the rest does not cover (server tools' `tool_use`/`tool_result`, …). */
  onEvent?: (frame: ServerFrame) => void;
  /** An `error` frame that no `send()` is waiting for. */
  onError?: (error: SessionError) => void;
  /** Give up connecting after this long; default 20,000 ms (the gateway waits 10 s for the auth frame). */
  connectTimeoutMs?: number;
  /** Frames sent per second at most; default 8 (the gateway drops frames past its `SESSION_FRAMES_PER_SECOND`, 10). */
  framesPerSecond?: number;
}

export interface SessionClose {
  code: number;
  reason: string;
  /** The last `error` frame before the close (`idle_timeout`, `token_expired`…): the gateway's close code says nothing. */
  error?: SessionError;
}

export interface GatewaySession {
  /** Keep it to resume the session later, on a new connection. */
  readonly sessionId: string;
  readonly resumed: boolean;
  /** The session's state when it was opened. */
  readonly state: SessionState;
  /** Messages in the stored conversation when it was opened. */
  readonly messages: number;
  /** The token's `sub`. */
  readonly userId: string;
  /** The token's `exp` (Unix seconds): the gateway closes the connection then (`token_expired`). */
  readonly expiresAt: number;
  /** A resumed session whose turn was still running or waiting for client tools: that turn's result. */
  readonly pendingTurn: Promise<TurnResult> | undefined;
  /**
   * Starts a turn; resolves with its `result` (whatever its subtype: check `is_error`). Rejects with a `SessionError`
   * for an `error` frame while the turn is pending (an admission refusal, `turn_lost`, …) or when the connection ends.
   */
  send(message: string, opts?: { onText?: (text: string) => void }): Promise<TurnResult>;
  /** Stops the running turn (or the one waiting for client tools); its `send()` resolves with subtype `interrupted`. */
  interrupt(): void;
  /** Closes the connection (the session is kept: resume it by its id). */
  close(): Promise<SessionClose>;
  readonly closed: Promise<SessionClose>;
}

export interface OpenSessionOptions extends SessionInit {
  url: string;
  token: () => Promise<string>;
  WebSocket?: WebSocketConstructor;
}

/** API Gateway's limit on a WebSocket frame; a bigger message goes as `part` frames (docs/ws.md, "Large messages"). */
const FRAME_BYTES = 32_768;
/** The most a message sent in parts may hold, joined. */
const PARTS_BYTES = 262_144;
/** 10,000 UTF-16 code units of JSON text always fit a part frame within 32 KB (docs/ws.md). */
const SLICE = 10_000;
const OPEN = 1;

export async function openSession(opts: OpenSessionOptions): Promise<GatewaySession> {
  const Ctor = opts.WebSocket ?? (globalThis as { WebSocket?: WebSocketConstructor }).WebSocket;
  if (!Ctor) {
    throw new TypeError('No WebSocket here (Node < 22): pass one to createGatewayClient, e.g. `import WebSocket from "ws"` then `{ WebSocket }`');
  }
  const token = await opts.token();
  const connection = new Connection(new Ctor(opts.url), opts);
  return connection.open(token);
}

interface Turn {
  resolve(result: TurnResult): void;
  reject(error: SessionError): void;
  onText?: (text: string) => void;
}

class Connection {
  private phase: 'connecting' | 'authenticating' | 'starting' | 'open' | 'closed' = 'connecting';
  private turn: Turn | undefined;
  private lastError: SessionError | undefined;
  private readonly outbox: Outbox;
  private readonly incoming = new Map<string, { slices: (string | undefined)[]; got: number }>();
  private partIds = 0;
  private opened!: { resolve(session: GatewaySession): void; reject(error: SessionError): void };
  private token = '';
  private user = { userId: '', expiresAt: 0 };
  private readonly closedPromise: Promise<SessionClose>;
  private markClosed!: (close: SessionClose) => void;

  constructor(
    private readonly socket: WebSocketLike,
    private readonly opts: OpenSessionOptions,
  ) {
    this.outbox = new Outbox(socket, opts.framesPerSecond ?? 8);
    this.closedPromise = new Promise((resolve) => {
      this.markClosed = resolve;
    });
    socket.binaryType = 'arraybuffer';
    socket.addEventListener('open', () => this.onOpen());
    socket.addEventListener('message', (event: { data: unknown }) => this.onMessage(event.data));
    socket.addEventListener('error', () => {
      if (this.phase === 'connecting') this.fail(new SessionError('connection_failed', `Could not connect to ${this.opts.url}`));
    });
    socket.addEventListener('close', (event: { code?: number; reason?: string }) => this.onClose(event.code ?? 1006, event.reason ?? ''));
  }

  open(token: string): Promise<GatewaySession> {
    this.token = token;
    const timeoutMs = this.opts.connectTimeoutMs ?? 20_000;
    return new Promise<GatewaySession>((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new SessionError('timeout', `No session within ${timeoutMs} ms of connecting to ${this.opts.url}`)), timeoutMs);
      this.opened = {
        resolve: (session) => {
          clearTimeout(timer);
          resolve(session);
        },
        reject: (error) => {
          clearTimeout(timer);
          reject(error);
        },
      };
    });
  }

  /** Connecting failed: reject and close (the gateway closes itself after a failed auth; not after session.start's errors). */
  private fail(error: SessionError): void {
    if (this.phase === 'open' || this.phase === 'closed') return;
    this.phase = 'closed';
    this.opened.reject(error);
    this.closeSocket();
  }

  private onOpen(): void {
    if (this.phase !== 'connecting') return;
    this.phase = 'authenticating';
    this.sendFrame({ type: 'auth', token: this.token });
  }

  private onMessage(data: unknown): void {
    let text: string;
    if (typeof data === 'string') text = data;
    else if (data instanceof ArrayBuffer) text = new TextDecoder().decode(data);
    else if (ArrayBuffer.isView(data)) text = new TextDecoder().decode(data);
    else return;
    let frame: { type?: unknown; [key: string]: unknown };
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    if (frame?.type === 'part') this.onPart(frame);
    else this.onFrame(frame as ServerFrame);
  }

  /** The gateway's frames over 32 KB come as parts of an id of its own, in order; other frames may come between them. */
  private onPart(part: Record<string, unknown>): void {
    const { id, index, count, data } = part;
    if (typeof id !== 'string' || typeof index !== 'number' || typeof count !== 'number' || typeof data !== 'string') return;
    let message = this.incoming.get(id);
    if (!message) {
      message = { slices: new Array<string | undefined>(count), got: 0 };
      this.incoming.set(id, message);
    }
    if (message.slices[index] === undefined) {
      message.slices[index] = data;
      message.got++;
    }
    if (message.got === count) {
      this.incoming.delete(id);
      this.onMessage(message.slices.join(''));
    }
  }

  private onFrame(frame: ServerFrame): void {
    this.opts.onEvent?.(frame);
    switch (frame.type) {
      case 'authenticated':
        if (this.phase !== 'authenticating') return;
        this.user = { userId: frame.userId, expiresAt: frame.expiresAt };
        this.phase = 'starting';
        this.sendFrame({
          type: 'session.start',
          ...(this.opts.options ? { options: this.opts.options } : {}),
          ...(this.opts.sessionId ? { sessionId: this.opts.sessionId } : {}),
        });
        return;
      case 'session':
        if (this.phase !== 'starting') return;
        this.phase = 'open';
        this.opened.resolve(this.api(frame));
        return;
      case 'assistant':
        this.opts.onText?.(frame.text);
        this.turn?.onText?.(frame.text);
        return;
      case 'tool_use':
        if (frame.subtype === 'client') void this.runTool(frame);
        return;
      case 'result': {
        const turn = this.turn;
        this.turn = undefined;
        turn?.resolve(frame as TurnResult);
        return;
      }
      case 'error': {
        const error = new SessionError(frame.error, typeof frame.message === 'string' ? frame.message : frame.error, frame);
        this.lastError = error;
        if (this.phase !== 'open') {
          this.fail(error);
          return;
        }
        const turn = this.turn;
        this.turn = undefined;
        if (turn) turn.reject(error);
        else this.opts.onError?.(error);
        return;
      }
    }
  }

  private async runTool(call: { id: string; name: string; input: Record<string, unknown> }): Promise<void> {
    let frame: Record<string, unknown>;
    try {
      if (!this.opts.onToolUse) throw new Error(`This client runs no tools (no onToolUse): cannot run ${call.name}`);
      const output = await this.opts.onToolUse({ id: call.id, name: call.name, input: call.input ?? {} });
      frame = { type: 'tool_result', tool_use_id: call.id, ...toolContent(output) };
    } catch (err) {
      frame = { type: 'tool_result', tool_use_id: call.id, content: err instanceof Error ? err.message : String(err), is_error: true };
    }
    if (this.phase !== 'open') return;
    try {
      this.sendFrame(frame);
    } catch (err) {
      // Too large to send even in parts: say so instead, so that the turn can go on.
      this.sendFrame({ type: 'tool_result', tool_use_id: call.id, content: (err as Error).message, is_error: true });
    }
  }

  private api(frame: { sessionId: string; resumed: boolean; state: SessionState; messages: number }): GatewaySession {
    const pendingTurn = frame.state === 'idle' ? undefined : this.waitForTurn();
    // A resumed turn nobody awaits must not be an unhandled rejection.
    pendingTurn?.catch(() => {});
    return {
      sessionId: frame.sessionId,
      resumed: frame.resumed,
      state: frame.state,
      messages: frame.messages,
      userId: this.user.userId,
      expiresAt: this.user.expiresAt,
      pendingTurn,
      send: (message, sendOpts = {}) => {
        if (this.phase !== 'open') return Promise.reject(this.lastError ?? new SessionError('connection_closed', 'The connection is closed'));
        if (this.turn) {
          return Promise.reject(new SessionError('turn_in_progress', 'A turn is running on this session: wait for its result, or interrupt it'));
        }
        const result = this.waitForTurn(sendOpts.onText);
        try {
          this.sendFrame({ type: 'user', message });
        } catch (err) {
          this.turn = undefined;
          return Promise.reject(err);
        }
        return result;
      },
      interrupt: () => {
        if (this.phase === 'open') this.sendFrame({ type: 'interrupt' });
      },
      close: () => {
        this.closeSocket();
        return this.closedPromise;
      },
      closed: this.closedPromise,
    };
  }

  private waitForTurn(onText?: (text: string) => void): Promise<TurnResult> {
    return new Promise<TurnResult>((resolve, reject) => {
      this.turn = { resolve, reject, onText };
    });
  }

  /** Sends a frame, as `part` frames when its JSON text is over 32 KB. */
  private sendFrame(frame: Record<string, unknown>): void {
    const text = JSON.stringify(frame);
    const bytes = utf8(text).length;
    if (bytes <= FRAME_BYTES) {
      this.outbox.push(text, 8);
      return;
    }
    if (bytes > PARTS_BYTES) {
      throw new SessionError(
        'message_too_large',
        `The ${String(frame.type)} frame is ${bytes} bytes of JSON; the gateway takes at most ${PARTS_BYTES} in parts`,
      );
    }
    const id = `c${++this.partIds}`;
    const count = Math.ceil(text.length / SLICE);
    for (let index = 0; index < count; index++) {
      // A part costs an eighth of a frame of the gateway's rate limit.
      this.outbox.push(JSON.stringify({ type: 'part', id, index, count, data: text.slice(index * SLICE, (index + 1) * SLICE) }), 1);
    }
  }

  private closeSocket(): void {
    this.outbox.clear();
    if (this.socket.readyState <= OPEN) this.socket.close(1000);
  }

  private onClose(code: number, reason: string): void {
    const wasOpen = this.phase === 'open';
    this.outbox.clear();
    if (!wasOpen && this.phase !== 'closed') {
      this.phase = 'closed';
      this.opened.reject(this.lastError ?? new SessionError('connection_closed', `The connection closed (${code}) before the session started`));
    }
    this.phase = 'closed';
    const turn = this.turn;
    this.turn = undefined;
    turn?.reject(this.lastError ?? new SessionError('connection_closed', `The connection closed (${code}) during the turn`));
    this.markClosed({ code, reason, ...(this.lastError ? { error: this.lastError } : {}) });
  }
}

/** A tool's output as a `tool_result`'s `content` (and `is_error`). */
function toolContent(output: ToolOutput): { content: string | ToolContentBlock[]; is_error?: true } {
  if (typeof output === 'string') return { content: output };
  if (Array.isArray(output)) return { content: output as ToolContentBlock[] };
  if (output && typeof output === 'object' && 'content' in output) {
    const { content, isError } = output as { content: string | ToolContentBlock[]; isError?: boolean };
    return { content, ...(isError ? { is_error: true as const } : {}) };
  }
  return { content: JSON.stringify(output ?? null) };
}

/**
 * Sends frames at most `framesPerSecond` a second, counted in eighths (a part costs one, a frame eight) over any
 * second, so that the gateway, which counts per second of its clock, never drops one (`rate_limited`). Below the limit a
 * frame goes at once; the default of 8 a second leaves the gateway's 10 a margin for frames it handles late.
 */
export class Outbox {
  private readonly queue: { text: string; cost: number }[] = [];
  private sent: { at: number; cost: number }[] = [];
  private timer: ReturnType<typeof setTimeout> | undefined;
  private readonly limit: number;

  constructor(
    private readonly socket: WebSocketLike,
    framesPerSecond: number,
  ) {
    this.limit = Math.max(1, framesPerSecond) * 8;
  }

  push(text: string, cost: number): void {
    this.queue.push({ text, cost });
    this.pump();
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.queue.length = 0;
  }

  private pump(): void {
    if (this.timer) return;
    while (this.queue.length > 0) {
      const now = Date.now();
      this.sent = this.sent.filter((s) => now - s.at < 1000);
      const used = this.sent.reduce((sum, s) => sum + s.cost, 0);
      const next = this.queue[0]!;
      const oldest = this.sent[0];
      if (oldest && used + next.cost > this.limit) {
        this.timer = setTimeout(
          () => {
            this.timer = undefined;
            this.pump();
          },
          1000 - (now - oldest.at) + 1,
        );
        return;
      }
      this.queue.shift();
      if (this.socket.readyState !== OPEN) continue;
      this.socket.send(next.text);
      this.sent.push({ at: now, cost: next.cost });
    }
  }
}
