import { BUSY_RETRY_AFTER_SECONDS } from '../config/timing.ts';
import { messageOf } from './describe.ts';
import { statusOf, type Refusal, type TokenRefusalCode } from './refusal.ts';

/**
 * Refusals in the conjure envelope (`/usage`, `/prompt`, `/incubate`, `/ws`): `{error: <code>, message?, …figures}`
 * with the bodies the interface lists (docs/api.md, "Errors"). The code is the refusal's kind, except where the
 * interface names another. Token failures speak one vocabulary on every conjure route (`tokenError`).
 */
export function conjureRefusal(refusal: Refusal): Response {
  const { status, body, headers } = conjureRefusalParts(refusal);
  return conjureResponse(status, body, headers);
}

/**
 * A refusal's status, body and headers in the conjure envelope: rendered as a Response above, as /ws's `error` frame
 * below, and as the refused `$connect` of /ws (lambdas/sessions/socket.ts), which has no Response to give.
 */
export function conjureRefusalParts(refusal: Refusal): { status: number; body: Record<string, unknown>; headers: Record<string, string> } {
  const status = statusOf(refusal);
  const parts = (body: Record<string, unknown>, headers: Record<string, string> = {}) => ({ status, body, headers });
  switch (refusal.kind) {
    case 'token':
      return parts({ error: tokenError(refusal.code), message: refusal.message });
    case 'budget_exhausted':
    case 'budget_held':
      return parts(
        { error: 'user_budget_exhausted', message: refusal.message, ai: refusal.budget.ai, compute: refusal.budget.compute },
        refusal.kind === 'budget_held'
          ? { 'retry-after': String(BUSY_RETRY_AFTER_SECONDS) }
          : refusal.retryAfterSeconds === undefined
            ? {}
            : { 'retry-after': String(refusal.retryAfterSeconds) },
      );
    case 'developer_budget_exhausted': {
      const { used, available, planSeconds, poolSeconds } = refusal;
      return parts({ error: refusal.kind, used, available, planSeconds, poolSeconds });
    }
    case 'concurrent_limit_reached': {
      const { active, max, sessions } = refusal;
      return parts({ error: refusal.kind, active, max, sessions }, { 'retry-after': String(BUSY_RETRY_AFTER_SECONDS) });
    }
    case 'upstream':
      return parts({ error: 'upstream_error', message: messageOf(refusal) });
    case 'method_not_allowed':
      return parts({ error: refusal.kind, message: refusal.message }, refusal.allow.length ? { allow: refusal.allow.join(', ') } : {});
    case 'vessel_not_cancelable':
      return parts({ error: refusal.kind, status: refusal.status, message: refusal.message });
    default:
      return parts({ error: refusal.kind, message: refusal.message });
  }
}

/**
 * The 401 code of the conjure routes (docs/api.md, "401 messages"): `token_expired` — the interface's /incubate body —
 * for an expired token, `token_revoked` for a revoked one or a blocked user's (auth/revocations.ts), `invalid_token`
 * for every other failure (missing, malformed, forged, unknown issuer), with the message saying which. The
 * interface's /prompt 401 is "a message that the token expired": that is `message`.
 */
export function tokenError(code: TokenRefusalCode): 'token_expired' | 'token_revoked' | 'invalid_token' {
  return code === 'token_expired' || code === 'token_revoked' ? code : 'invalid_token';
}

/** A /ws `error` frame (docs/ws.md, "Errors"). */
export type RefusalFrame = { type: 'error'; error: string } & Record<string, unknown>;

/**
 * A refusal as a /ws `error` frame: the body /prompt would answer with, plus `type: "error"`. `status`: the frame
 * also carries the HTTP status it stands for, as the refusals of a turn's admission do (docs/ws.md, "Admission
 * refusals"); a refused frame does not.
 */
export function conjureRefusalFrame(refusal: Refusal, opts: { status?: boolean } = {}): RefusalFrame {
  const { status, body } = conjureRefusalParts(refusal);
  return opts.status ? { type: 'error', error: String(body.error), ...body, status } : { type: 'error', error: String(body.error), ...body };
}

/** A conjure JSON answer with a status; also the 500 of the gateway's own failures. */
export function conjureResponse(status: number, body: Record<string, unknown>, headers: Record<string, string> = {}): Response {
  return Response.json(body, { status, headers });
}

/**
 * What an app speaking the conjure envelope gives `httpApp` (conjure REST, /prompt): refusals, its 500, and the error
 * code its access-log line names.
 */
export const CONJURE_ENVELOPE = {
  renderRefusal: conjureRefusal,
  internalError: () => conjureResponse(500, { error: 'internal_error', message: 'The gateway failed to handle this request' }),
  errorTypeOf: (body: unknown) => {
    const error = (body as { error?: unknown })?.error;
    return typeof error === 'string' ? error.slice(0, 80) : undefined;
  },
};
