import type { AnthropicErrorBody, ProviderId } from '../providers/types.ts';
import { messageOf } from './describe.ts';

/**
 * Every way the gateway says no, as data (docs/architecture.md, "Refusals"). The domain decides a refusal and
 * returns or throws it; each surface renders it once, in its own envelope: `anthropic.ts` for the proxy
 * (`{type:"error", error:{type, message}}`), `conjure.ts` for the conjure endpoints (`{error: code, …}`), `openai.ts` for
 * the OpenAI-compatible route (`{error:{message, type, param, code}}`). Nothing
 * below a renderer builds a Response for a refusal.
 */
export type Refusal =
  /** The request itself is wrong (body, parameter, path): 400, nothing was charged. */
  /** `param`: the field at fault, when one is (the OpenAI envelope names it). */
  | { kind: 'invalid_request'; message: string; param?: string }
  | { kind: 'request_too_large'; message: string }
  | { kind: 'not_found'; message: string }
  /** `allow`: the methods the path does support (RFC 9110 requires them on a 405). */
  | { kind: 'method_not_allowed'; message: string; allow: string[] }
  /** The token is missing, malformed, forged, expired, revoked (or its user blocked), or names no project: 401. */
  | { kind: 'token'; code: TokenRefusalCode; message: string }
  /**
   * The request comes from a page whose `Origin` the token's project (or the token's own `origins` claim) does not
   * allow (DESIGN §10, "Origins per project"): 403, before any work.
   */
  | { kind: 'origin_not_allowed'; origin: string; message: string }
  /** A body-carrying conjure route was sent something other than JSON (DESIGN §10): 415, before the token is read. */
  | { kind: 'unsupported_media_type'; message: string }
  /**
   * The user's budget cannot admit the request: spent, or too low for even its smallest form. Only the window's
   * reset frees room (`retryAfterSeconds` until it; none for a lifetime window).
   */
  | { kind: 'budget_exhausted'; message: string; retryAfterSeconds?: number; budget: BudgetFigures }
  /** The budget would admit it once the user's requests in flight settle: worth retrying shortly. */
  | { kind: 'budget_held'; message: string; budget: BudgetFigures }
  /** A caller's own cost cap (an agent run's `maxBudgetUsd`) cannot pay for the smallest form of the call. */
  | { kind: 'cost_cap_reached'; capMicros: number; message: string }
  /** The model has no price, so it cannot be metered. */
  | { kind: 'unpriced_model'; model: string; message: string }
  /** The model routes to a provider whose key the project has not set. */
  | { kind: 'missing_provider_key'; model: string; provider: ProviderId; projectId: string; message: string }
  /** The developer's monthly compute plan is spent (the interface's 402). */
  | { kind: 'developer_budget_exhausted'; used: number; available: number; planSeconds: number; poolSeconds: number }
  /** The developer holds every concurrent run the tier allows (the interface's 429). */
  | { kind: 'concurrent_limit_reached'; active: number; max: number; sessions: LiveSession[] }
  /** The provider refused or failed before any answer; the status and Anthropic-envelope body it maps to. */
  | { kind: 'upstream'; status: number; body: AnthropicErrorBody }
  /** An /incubate request without its idempotency key (docs/incubate.md, "Idempotency"). */
  | { kind: 'missing_idempotency_key'; message: string }
  /** The idempotency key was used before, with another body. */
  | { kind: 'idempotency_key_conflict'; message: string }
  /** No vessel with that id for this caller: absent, or someone else's (the two are not told apart). */
  | { kind: 'vessel_not_found'; message: string }
  /** Cancel of a vessel that has already ended; `status` is its final status. */
  | { kind: 'vessel_not_cancelable'; status: string; message: string }
  /** The run queue or the scheduler could not take the vessel; nothing was kept. */
  | { kind: 'trigger_failed'; message: string };

export type RefusalKind = Refusal['kind'];
export type TokenRefusalCode = 'token_missing' | 'token_malformed' | 'token_expired' | 'token_invalid' | 'token_revoked';

/** A meter's figures at the moment of a budget refusal (the interface's `{used, remaining, budget}`). */
export interface MeterFigures {
  used: number;
  remaining: number;
  budget: number;
}
export interface BudgetFigures {
  ai: MeterFigures;
  compute: MeterFigures;
}

export interface LiveSession {
  sessionId: string;
  userId: string;
  ageMs: number;
}

/**
 * What a step that may refuse returns: its value with `ok: true`, or `{ok: false, refusal}` — the one shape of a
 * refusal on its way up (docs/architecture.md, "Refusals"). The caller tests `ok` and can hand a refusal on as it is
 * (`if (!x.ok) return x`); nothing tests a value for being a refusal by its fields.
 */
export type Refusable<T extends object> = ({ ok: true } & T) | Refusing;
export interface Refusing {
  ok: false;
  refusal: Refusal;
}

/** A refusal on its way up through code that returns something else (the HTTP helpers, the router). */
export class Refused extends Error {
  constructor(readonly refusal: Refusal) {
    super(messageOf(refusal));
    this.name = 'Refused';
  }
}

/** The HTTP status of a refusal, the same on every surface. */
export function statusOf(refusal: Refusal): number {
  switch (refusal.kind) {
    case 'invalid_request':
    case 'missing_idempotency_key':
    case 'unpriced_model':
    case 'missing_provider_key':
      return 400;
    case 'token':
      return 401;
    case 'developer_budget_exhausted':
    case 'cost_cap_reached':
      return 402;
    case 'origin_not_allowed':
      return 403;
    case 'not_found':
    case 'vessel_not_found':
      return 404;
    case 'method_not_allowed':
      return 405;
    case 'idempotency_key_conflict':
    case 'vessel_not_cancelable':
      return 409;
    case 'request_too_large':
      return 413;
    case 'unsupported_media_type':
      return 415;
    case 'budget_exhausted':
    case 'budget_held':
    case 'concurrent_limit_reached':
      return 429;
    case 'trigger_failed':
      return 503;
    case 'upstream':
      return refusal.status;
  }
}

/**
 * The request itself was refused as invalid — by the gateway (its body, or a translation that cannot carry it) or by
 * the provider (HTTP 400, 413 or 422) — rather than for the budget, a limit or a failure: sending it again as it is
 * would be refused again.
 */
export function isInvalidRequest(refusal: Refusal): boolean {
  if (refusal.kind === 'invalid_request' || refusal.kind === 'request_too_large') return true;
  return refusal.kind === 'upstream' && (refusal.status === 400 || refusal.status === 413 || refusal.status === 422);
}
