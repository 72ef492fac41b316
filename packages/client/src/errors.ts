/**
 * The gateway's refusals as typed errors. An HTTP refusal is a `GatewayError`: its status, the body exactly as the
 * gateway answered it, a `code` (the body's `error`; for a 401 one of `token_expired`, `invalid_token`, `token_revoked`,
 * whichever shape the body had), the `request-id` to quote, and `retry-after` in seconds. A /ws `error` frame is a
 * `SessionError`.
 */

/** What a user's budget looked like when a run was refused (the gateway's 429 `user_budget_exhausted`). */
export interface MeterFigures {
  used: number;
  remaining: number;
  budget: number;
}

/** The bodies the gateway's conjure routes and /prompt answer with, by `error` code (docs/api.md, prompt.md, incubate.md). */
export interface ErrorBodies {
  /** 401: the token has expired. Older gateways answer `{"error":"Token expired"}`. */
  token_expired: { error: 'token_expired'; message?: string };
  /** 401: the token is missing, malformed, forged, or names no known project. */
  invalid_token: { error: 'invalid_token'; message?: string };
  /** 401: the token, or its user, was revoked or blocked by the project owner. */
  token_revoked: { error: 'token_revoked'; message?: string };
  /** 402: the developer's compute plan for the month is spent. */
  developer_budget_exhausted: { error: 'developer_budget_exhausted'; used: number; available: number; planSeconds: number; poolSeconds: number };
  /** 403: a page whose `Origin` the project, the token or the deployment does not allow. */
  origin_not_allowed: { error: 'origin_not_allowed'; message: string };
  /** 429: the developer's concurrent runs fill their tier; `sessions` lists this project's. `retry-after: 1`. */
  concurrent_limit_reached: {
    error: 'concurrent_limit_reached';
    active: number;
    max: number;
    sessions: { sessionId: string; userId: string; ageMs: number }[];
  };
  /** 429: the user's AI or compute budget is spent, or held by their runs in flight. */
  user_budget_exhausted: { error: 'user_budget_exhausted'; message: string; ai: MeterFigures; compute: MeterFigures };
  /** 400 */
  invalid_request: { error: 'invalid_request'; message: string };
  /** 400: `/incubate` without an `idempotencyKey`. */
  missing_idempotency_key: { error: 'missing_idempotency_key'; message: string };
  /** 404: a vessel this token may not see, or that does not exist. */
  vessel_not_found: { error: 'vessel_not_found'; message: string };
  /** 409: the key was used with another body, or by another user. */
  idempotency_key_conflict: { error: 'idempotency_key_conflict'; message: string };
  /** 409: cancel of a vessel that has ended. */
  vessel_not_cancelable: { error: 'vessel_not_cancelable'; status: string; message: string };
  /** 413 */
  request_too_large: { error: 'request_too_large'; message: string };
  /** 415: a body not sent as `application/json` (this client always sends it). */
  unsupported_media_type: { error: 'unsupported_media_type'; message: string };
  /** 500 */
  internal_error: { error: 'internal_error'; message: string };
  /** 503: the gateway could not queue the vessel; nothing was kept, retry with the same key. */
  trigger_failed: { error: 'trigger_failed'; message: string };
}

export type KnownErrorCode = keyof ErrorBodies;
/** A body the types above do not describe (another code, or not the conjure envelope at all). */
export type OtherErrorBody = { error?: unknown; message?: unknown; [key: string]: unknown } | string | null;
export type ErrorBody<C extends string> = C extends KnownErrorCode ? ErrorBodies[C] : OtherErrorBody;

const TOKEN_CODES = new Set(['token_expired', 'invalid_token', 'token_revoked']);

export class GatewayError<C extends string = string> extends Error {
  override readonly name = 'GatewayError';
  /** The HTTP status. */
  readonly status: number;
  /** The body's `error` code (`http_<status>` when the body has none); a 401 is always one of the three token codes. */
  readonly code: C;
  /** The body exactly as the gateway sent it: parsed JSON, or the text when it was not JSON. */
  readonly body: ErrorBody<C>;
  /** The `request-id` header: quote it when you report a problem. */
  readonly requestId: string | undefined;
  /** `retry-after`, in seconds, when the gateway sent one (429s). */
  readonly retryAfter: number | undefined;
  readonly headers: Headers;

  constructor(init: { status: number; code: C; message: string; body: ErrorBody<C>; headers?: Headers }) {
    super(init.message);
    this.status = init.status;
    this.code = init.code;
    this.body = init.body;
    this.headers = init.headers ?? new Headers();
    this.requestId = this.headers.get('request-id') ?? undefined;
    this.retryAfter = parseRetryAfter(this.headers.get('retry-after'));
  }

  /** Narrows the error to one code, and its body to that code's shape: `if (err.is('user_budget_exhausted')) err.body.ai.remaining`. */
  is<K extends KnownErrorCode>(code: K): this is GatewayError<K> {
    return (this.code as string) === code;
  }

  /** The error of a refused response: reads its body. */
  static async fromResponse(res: Response): Promise<GatewayError> {
    const text = await res.text().catch(() => '');
    let body: unknown = text;
    try {
      body = JSON.parse(text);
    } catch {
      // not JSON: keep the text
    }
    return GatewayError.fromBody(res.status, body, res.headers);
  }

  static fromBody(status: number, body: unknown, headers?: Headers): GatewayError {
    const { code, message } = describe(status, body);
    return new GatewayError({ status, code, message, body: body as OtherErrorBody, headers });
  }
}

/** The code and message of a refusal, whichever of the gateway's envelopes its body is in. */
function describe(status: number, body: unknown): { code: string; message: string } {
  const object = body && typeof body === 'object' && !Array.isArray(body) ? (body as Record<string, unknown>) : undefined;
  let error = object?.error;
  let message = typeof object?.message === 'string' ? object.message : undefined;
  // The channeling URL's Anthropic envelope: {"type":"error","error":{"type","message"}}.
  if (error && typeof error === 'object') {
    const inner = error as Record<string, unknown>;
    message = typeof inner.message === 'string' ? inner.message : message;
    error = inner.type;
  }
  if (status === 401) {
    if (typeof error === 'string' && TOKEN_CODES.has(error)) return { code: error, message: message ?? error };
    // The older shape, {"error":"<what is wrong>"} (e.g. "Token expired", "Missing token"), or the proxy's message.
    const text = typeof error === 'string' && !/^[a-z_]+$/.test(error) ? error : (message ?? 'The token was refused');
    const code = /expired/i.test(text) ? 'token_expired' : /revoked|blocked/i.test(text) ? 'token_revoked' : 'invalid_token';
    return { code, message: text };
  }
  const code = typeof error === 'string' && error !== '' ? error : `http_${status}`;
  if (message === undefined) {
    message = typeof body === 'string' && body !== '' ? body.slice(0, 500) : code === `http_${status}` ? `HTTP ${status}` : code;
  }
  return { code, message };
}

/** `retry-after` in seconds: a number of seconds, or an HTTP date. */
function parseRetryAfter(value: string | null): number | undefined {
  if (value === null || value.trim() === '') return undefined;
  if (/^\d+$/.test(value.trim())) return Number(value.trim());
  const at = Date.parse(value);
  return Number.isNaN(at) ? undefined : Math.max(0, Math.ceil((at - Date.now()) / 1000));
}

/** A /ws `error` frame (the gateway's docs/ws.md, "Errors"), or the connection failing. */
export class SessionError extends Error {
  override readonly name = 'SessionError';
  constructor(
    /** The frame's `error` (`unauthorized`, `token_expired`, `origin_not_allowed`, `turn_in_progress`, …), or `connection_closed`, `connection_failed`, `timeout`. */
    readonly code: string,
    message: string,
    /** The `error` frame itself, with its extra fields (`pending`, the admission refusals' figures and `status`…). */
    readonly frame?: Record<string, unknown>,
  ) {
    super(message);
  }

  /** The HTTP status an admission refusal stands for (402, 429), when the frame names one. */
  get status(): number | undefined {
    return typeof this.frame?.status === 'number' ? this.frame.status : undefined;
  }
}
