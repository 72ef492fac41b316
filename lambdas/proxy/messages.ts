import { parseJsonBody, readBodyText } from '../http/body.ts';
import { afterResponse } from '../instance/unfinished.ts';
import { countTokens, meteredCall } from '../metering/call.ts';
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
  const clamp: Record<string, string> = call.clampedMaxTokens === undefined ? {} : { [MAX_TOKENS_HEADER]: String(call.clampedMaxTokens) };
  if (!call.ok) return anthropicRefusal(call.refusal, clamp);
  if (call.kind === 'message') {
    // The charge is written once the answer has been handed over; both headers are known before that.
    afterResponse(accessRecord(), call.settle);
    const headers: Record<string, string> = { ...clamp, [COST_HEADER]: String(call.charge.microdollars) };
    if (call.charge.remaining !== undefined) headers[REMAINING_HEADER] = String(call.charge.remaining);
    return Response.json(call.message, { headers });
  }
  return new Response(call.stream.body, {
    headers: { ...clamp, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' },
  });
}

export async function handleCountTokens(req: Request): Promise<Response> {
  const counted = await countTokens(await readRequest(req, CountTokensBody));
  if (!counted.ok) return anthropicRefusal(counted.refusal);
  return Response.json({ input_tokens: counted.inputTokens }, { headers: counted.estimated ? { 'x-gateway-token-count': 'estimate' } : {} });
}
