import type { Caller } from '../auth/claims.ts';
import { settle, type Reservation } from '../budgets/ledger.ts';
import { env } from '../config/env.ts';
import { parseJsonBody, readBodyText } from '../http/body.ts';
import { ClientError } from '../http/errors.ts';
import { accessRecord, type AccessRecord } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { metrics, MetricUnit } from '../observability/metrics.ts';
import { charge, type ModelPricing } from '../pricing/prices.ts';
import { pricingFor } from './model-access.ts';
import { anthropicApiKey } from '../providers/anthropic/credentials.ts';
import { anthropicError } from '../providers/errors.ts';
import { PROVIDERS } from '../providers/index.ts';
import { PROVIDER_LABELS, type MessagesRequest, type Provider, type ProviderRequest, type ProviderResult } from '../providers/types.ts';
import { providerKeyFor } from '../registry/registry.ts';
import { cachedProject } from '../registry/project-cache.ts';
import type { Project } from '../registry/model.ts';
import { routeModel, type Route } from '../routing/route.ts';
import { readWithin } from '../streaming/idle-timeout.ts';
import { encodeSse } from '../streaming/sse.ts';
import { authenticate } from './caller.ts';
import { envelopeResponse } from './errors.ts';
import { admit } from './admission.ts';
import { producedByMessage, trustedAnthropicUsage } from '../metering/usage.ts';
import { CountTokensBody, describeIssue, MessagesBody } from './schema.ts';
import { StreamMeter } from './stream-meter.ts';

/** Headers on a non-streamed answer: what this request cost and what is left of the window's AI budget. */
export const COST_HEADER = 'x-gateway-cost-microdollars';
export const REMAINING_HEADER = 'x-gateway-budget-remaining-microdollars';

interface Prepared {
  caller: Caller;
  body: MessagesRequest;
  rawBody: string;
  route: Route;
  provider: Provider;
  project: Project;
  apiKey: string;
}

/**
 * Auth, validation, routing and the provider credential: everything before money is involved. Refusals are thrown
 * as ClientErrors and rendered by the app. Cheap checks come first: the token (no store read for a malformed one),
 * then the body's size and depth, then the schema.
 */
async function prepare(req: Request, schema: typeof MessagesBody | typeof CountTokensBody): Promise<Prepared> {
  const caller = await authenticate(req);
  const rawBody = await readBodyText(req);
  const parsed = schema.safeParse(parseJsonBody(rawBody));
  if (!parsed.success) throw new ClientError(400, 'invalid_request', describeIssue(parsed.error));
  const body = parsed.data as unknown as MessagesRequest;
  accessRecord().model = body.model;

  const route = routeModel(body.model);
  const provider = PROVIDERS[route.provider];
  if (!provider) {
    throw new ClientError(400, 'invalid_request', `Model "${body.model}" routes to ${PROVIDER_LABELS[route.provider]}, which this gateway does not serve yet`);
  }
  let project = await cachedProject(caller.projectId);
  if (!project) throw new ClientError(401, 'authentication', 'Token issuer is not a known project');
  let apiKey: string | undefined;
  if (route.provider === 'anthropic') apiKey = await anthropicApiKey();
  else {
    apiKey = await providerKeyFor(project, route.provider);
    if (!apiKey) {
      // The owner may have just set it: read the record once more before refusing (rate-limited per project).
      project = (await cachedProject(caller.projectId, { refresh: true })) ?? project;
      apiKey = await providerKeyFor(project, route.provider);
    }
    if (!apiKey) {
      throw new ClientError(
        400,
        'invalid_request',
        `Model "${body.model}" routes to ${PROVIDER_LABELS[route.provider]}, but project ${project.projectId} has no ${PROVIDER_LABELS[route.provider]} API key (${route.provider}); the project owner sets it with "gateway project set-provider-key --provider ${route.provider}"`,
      );
    }
  }
  return { caller, body, rawBody, route, provider, project, apiKey };
}

function providerRequest(p: Prepared, req: Request, signal: AbortSignal): ProviderRequest {
  const { ANTHROPIC_BASE_URL, OPENAI_BASE_URL, OPENROUTER_BASE_URL, UPSTREAM_TIMEOUT_MS } = env();
  const baseUrl = { anthropic: ANTHROPIC_BASE_URL, openai: OPENAI_BASE_URL, openrouter: OPENROUTER_BASE_URL }[p.route.provider];
  return {
    body: p.body,
    rawBody: p.rawBody,
    upstreamModel: p.route.upstreamModel,
    baseUrl,
    apiKey: p.apiKey,
    headers: {
      anthropicVersion: req.headers.get('anthropic-version') ?? undefined,
      anthropicBeta: req.headers.get('anthropic-beta') ?? undefined,
    },
    signal,
    timeoutMs: UPSTREAM_TIMEOUT_MS,
  };
}

/** The price, reading the project once more before refusing: the owner may have just set it. */
async function requirePricing(p: Prepared): Promise<ModelPricing> {
  const pricing =
    pricingFor(p.project, p.body.model, p.route) ??
    pricingFor((await cachedProject(p.project.projectId, { refresh: true })) ?? p.project, p.body.model, p.route);
  if (pricing) return pricing;
  throw new ClientError(
    400,
    'invalid_request',
    `Model "${p.body.model}" has no known price, so it cannot be metered; the project owner can set one with "gateway project set-pricing --model ${p.body.model}"`,
  );
}

async function settleCharge(reservation: Reservation, microdollars: number, context: Record<string, unknown>) {
  try {
    const outcome = await settle(reservation, { ai: microdollars, compute: 0 });
    metrics.addMetric('SpendMicrodollars', MetricUnit.Count, microdollars);
    if (outcome.overrun) {
      // The provider billed more than the bound: the truth is charged, and the estimate error made visible.
      metrics.addMetric('OverrunMicrodollars', MetricUnit.Count, outcome.overrun);
      logger.warn('charged above the reservation', { ...context, reservationId: reservation.id, reserved: reservation.held.ai, charged: microdollars, overrun: outcome.overrun });
    }
    return outcome;
  } catch (err) {
    // The hold stays; it expires and the sweep charges its worst case. Never lose the answer over the ledger.
    metrics.addMetric('LedgerErrors', MetricUnit.Count, 1);
    logger.error('settle failed', { error: err as Error, reservationId: reservation.id, ...context });
    return undefined;
  }
}

/** Header naming the lowered `max_tokens` when a request was clamped to fit the budget (docs/contract.md). */
export const MAX_TOKENS_HEADER = 'x-gateway-max-tokens';

export async function handleMessages(req: Request): Promise<Response> {
  const prepared = await prepare(req, MessagesBody);
  const { caller, body } = prepared;
  const pricing = await requirePricing(prepared);
  const admission = await admit(caller, pricing, body);
  const { reservation } = admission;
  // The forwarded body changes only when the gateway bounded it; otherwise the client's bytes go up unchanged.
  const forwarded: Prepared =
    admission.body === body ? prepared : { ...prepared, body: admission.body, rawBody: JSON.stringify(admission.body) };
  const clampHeaders: Record<string, string> = admission.clampedMaxTokens === undefined ? {} : { [MAX_TOKENS_HEADER]: String(admission.clampedMaxTokens) };
  // A client that leaves before the answer does not stop the provider's bill, so the call is not abandoned: a JSON
  // answer is awaited and charged as counted, a stream is read until the provider has reported its input (see
  // meteredStream). Only a mid-stream departure stops the upstream.
  const abort = new AbortController();
  const started = Date.now();
  let result: ProviderResult;
  try {
    result = await prepared.provider.send(providerRequest(forwarded, req, abort.signal));
  } catch (err) {
    await settleCharge(reservation, 0, { model: body.model });
    throw err;
  }
  const log = accessRecord();
  log.upstreamMs = Date.now() - started;
  metrics.addMetric('UpstreamLatency', MetricUnit.Milliseconds, log.upstreamMs);
  const context = { model: body.model, provider: prepared.route.provider };

  if (result.kind === 'error') {
    await settleCharge(reservation, 0, context);
    return envelopeResponse(result.status, result.body, clampHeaders);
  }

  if (result.kind === 'message') {
    const trusted = trustedAnthropicUsage(result.message.usage);
    if (!trusted) untrustedUsage(context, 'message');
    const tokens = trusted ?? {
      input_tokens: admission.worstCase.inputTokens,
      // The provider cannot have produced more than it was allowed: the estimate stays inside the reservation.
      output_tokens: Math.min(producedByMessage(result.message.content), admission.body.max_tokens),
    };
    const micros = reportedCost(result.reportedCostMicros, context) ?? charge(pricing, tokens).microdollars;
    const outcome = await settleCharge(reservation, micros, context);
    log.costMicrodollars = micros;
    const headers: Record<string, string> = { ...clampHeaders, [COST_HEADER]: String(micros) };
    if (outcome?.used) headers[REMAINING_HEADER] = String(Math.max(0, caller.budget.ai - outcome.used.ai - (outcome.reserved?.ai ?? 0)));
    return Response.json(result.message, { headers });
  }

  const charged = (meter: StreamMeter) => {
    if (meter.usageUntrusted) untrustedUsage(context, 'stream');
    return (
      reportedCost(result.reportedCostMicros?.(), context) ??
      charge(pricing, meter.tokens(admission.worstCase.inputTokens, admission.body.max_tokens)).microdollars
    );
  };
  return new Response(meteredStream(result, charged, reservation, abort, context, log), {
    headers: { ...clampHeaders, 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' },
  });
}

/** An answer whose usage could not be trusted is charged from the gateway's own count: say so, once per answer. */
function untrustedUsage(context: Record<string, unknown>, kind: 'message' | 'stream'): void {
  metrics.addMetric('UsageEstimated', MetricUnit.Count, 1);
  logger.warn('upstream usage missing or implausible; charged from the gateway count', { ...context, kind });
}

/** A cost the upstream reported itself (OpenRouter), used only when it is a plausible whole number of microdollars. */
function reportedCost(micros: number | undefined, context: Record<string, unknown>): number | undefined {
  if (micros === undefined) return undefined;
  if (Number.isSafeInteger(micros) && micros >= 0 && micros <= MAX_PLAUSIBLE_COST_MICROS) return micros;
  untrustedUsage(context, 'message');
  return undefined;
}

/** No single request can cost more than this ($10,000): a larger reported cost is a broken upstream. */
const MAX_PLAUSIBLE_COST_MICROS = 10_000_000_000;


/**
 * Settlements of streams still being written to the ledger. An invocation must not end with any: Lambda may freeze
 * the instance as soon as it returns, and the charge would then wait for the sweep. A cancelled stream's `cancel()`
 * awaits its settlement and the response pipe waits for `cancel()`; the channeling handler also awaits this set
 * after the pipe, so the guarantee does not rest on how the body happens to be piped.
 */
const settling = new Set<Promise<unknown>>();

export async function settlementsInFlight(): Promise<void> {
  await Promise.allSettled([...settling]);
}

/** How many stream settlements are still being written. */
export function unsettledStreams(): number {
  return settling.size;
}

/** How long a stream whose client left may still be read to learn the input count the provider reports. */
const INPUT_REPORT_WAIT_MS = 5_000;

/**
 * Passes the provider's SSE bytes through as they arrive while the meter reads the usage. The charge is settled
 * before the stream closes (so a Lambda never freezes with it pending); a broken upstream becomes an `event: error`;
 * a client that goes away aborts the upstream and is charged for what was produced — after reading on, briefly, to
 * the provider's `message_start` if it left before that, so the input is charged as the provider counted it rather
 * than at the gateway's bound.
 */
function meteredStream(
  result: Extract<ProviderResult, { kind: 'stream' }>,
  charged: (meter: StreamMeter) => number,
  reservation: Reservation,
  abort: AbortController,
  context: Record<string, unknown>,
  log: AccessRecord,
): ReadableStream<Uint8Array> {
  const reader = result.body.getReader();
  const meter = new StreamMeter();
  let settled: Promise<unknown> | undefined;
  // Registered in `settling` at once (before `before` runs), so the handler's wait for settlements already sees it.
  const finish = (before?: () => Promise<void>) => {
    if (!settled) {
      const pending = (async () => {
        await before?.().catch(() => undefined);
        meter.end();
        const micros = charged(meter);
        log.costMicrodollars = micros;
        return settleCharge(reservation, micros, context);
      })().finally(() => settling.delete(pending));
      settling.add(pending);
      settled = pending;
    }
    return settled;
  };
  const readToInputReport = async () => {
    const deadline = Date.now() + INPUT_REPORT_WAIT_MS;
    while (!meter.inputReported && Date.now() < deadline) {
      const { done, value } = await readWithin(reader.read(), Math.max(1, deadline - Date.now()));
      if (done) return;
      meter.push(value);
    }
  };
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            await finish();
            controller.close();
            return;
          }
          meter.push(value);
          controller.enqueue(value);
        } catch (err) {
          if (abort.signal.aborted) return;
          const timedOut = (err as { name?: string })?.name === 'TimeoutError';
          logger.warn('upstream stream failed', { ...context, error: (err as Error)?.message });
          metrics.addMetric('Errors', MetricUnit.Count, 1);
          controller.enqueue(
            encodeSse(
              'error',
              anthropicError('api_error', timedOut ? 'The upstream stopped sending data (time-out)' : 'The upstream connection failed mid-stream'),
            ),
          );
          await finish();
          controller.close();
        }
      },
      async cancel() {
        const charged = finish(readToInputReport);
        await charged;
        abort.abort();
        await reader.cancel().catch(() => undefined);
      },
    },
    { highWaterMark: 0 },
  );
}

export async function handleCountTokens(req: Request): Promise<Response> {
  const prepared = await prepare(req, CountTokensBody);
  const result = await prepared.provider.countTokens(providerRequest(prepared, req, new AbortController().signal));
  if (result.kind === 'error') return envelopeResponse(result.status, result.body);
  return Response.json(
    { input_tokens: result.input_tokens },
    { headers: result.estimated ? { 'x-gateway-token-count': 'estimate' } : {} },
  );
}
