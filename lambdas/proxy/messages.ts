import { parseJsonBody, readBodyText } from '../http/body.ts';
import { afterResponse } from '../instance/unfinished.ts';
import { countTokens, meteredCall, type CallCharge } from '../metering/call.ts';
import { accessRecord, timePhase } from '../observability/access-log.ts';
import type { MessagesRequest, ProviderRequest } from '../providers/types.ts';
import { anthropicRefusal } from '../refusals/anthropic.ts';
import { describeIssue } from '../refusals/describe.ts';
import { Refused } from '../refusals/refusal.ts';
import { proxyCaller } from './caller.ts';
import { CountTokensBody, MessagesBody } from './schema.ts';

/**
 * POST /v1/messages and /v1/messages/count_tokens: the Request/Response mapping around the metered model call
 * (metering/call.ts), which decides everything else. Cheap checks come first: the token (no store read for a
 * malformed one), then the body's size and depth, then the schema.
 */

/** Headers on a non-streamed answer: what this request cost and what is left of the window's AI budget. */
export const COST_HEADER = 'x-gateway-cost-microdollars';
export const REMAINING_HEADER = 'x-gateway-budget-remaining-microdollars';
/** Header naming the lowered `max_tokens` when a request was clamped to fit the budget (docs/contract.md). */
export const MAX_TOKENS_HEADER = 'x-gateway-max-tokens';

/** The clamp header of a call whose limit was lowered to fit the budget (none otherwise), on every answer and refusal. */
export function clampHeaders(clampedMaxTokens: number | undefined): Record<string, string> {
  return clampedMaxTokens === undefined ? {} : { [MAX_TOKENS_HEADER]: String(clampedMaxTokens) };
}

/** A whole answer's headers: the clamp, what it cost, and what is left of the window's AI budget when known. */
export function chargeHeaders(clampedMaxTokens: number | undefined, charge: CallCharge): Record<string, string> {
  const headers: Record<string, string> = { ...clampHeaders(clampedMaxTokens), [COST_HEADER]: String(charge.microdollars) };
  if (charge.remaining !== undefined) headers[REMAINING_HEADER] = String(charge.remaining);
  return headers;
}

/** A stream's headers (its cost is known only at its end). */
export function streamHeaders(clampedMaxTokens: number | undefined): Record<string, string> {
  return { ...clampHeaders(clampedMaxTokens), 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' };
}

async function readRequest(req: Request, schema: typeof MessagesBody | typeof CountTokensBody) {
  const log = accessRecord();
  let phaseStart = performance.now();
  const caller = await proxyCaller(req);
  timePhase(log, 'token', phaseStart);
  phaseStart = performance.now();
  const rawBody = await readBodyText(req);
  const parsed = schema.safeParse(parseJsonBody(rawBody));
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  const body = parsed.data as unknown as MessagesRequest;
  timePhase(log, 'parse', phaseStart);
  log.model = body.model;
  return { caller, body, rawBody, anthropicHeaders: anthropicHeaders(req) };
}

/** The client's Anthropic version and beta flags, forwarded as they were sent. */
function anthropicHeaders(req: Request): ProviderRequest['headers'] {
  return { anthropicVersion: req.headers.get('anthropic-version') ?? undefined, anthropicBeta: req.headers.get('anthropic-beta') ?? undefined };
}

export async function handleMessages(req: Request): Promise<Response> {
  const call = await meteredCall(await readRequest(req, MessagesBody));
  if (!call.ok) return anthropicRefusal(call.refusal, clampHeaders(call.clampedMaxTokens));
  if (call.kind === 'message') {
    // The charge is written once the answer has been handed over; both headers are known before that.
    afterResponse(accessRecord(), call.settle);
    return Response.json(call.message, { headers: chargeHeaders(call.clampedMaxTokens, call.charge) });
  }
  return new Response(call.stream.body, { headers: streamHeaders(call.clampedMaxTokens) });
}

export async function handleCountTokens(req: Request): Promise<Response> {
  const counted = await countTokens(await readRequest(req, CountTokensBody));
  if (!counted.ok) return anthropicRefusal(counted.refusal);
  return Response.json({ input_tokens: counted.inputTokens }, { headers: counted.estimated ? { 'x-gateway-token-count': 'estimate' } : {} });
}
