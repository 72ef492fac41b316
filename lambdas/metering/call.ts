import type Anthropic from '@anthropic-ai/sdk';
import { countActivity } from '../activity/record.ts';
import { clock } from '../config/clock.ts';
import { unknownIssuer } from '../auth/authenticate.ts';
import type { Caller } from '../auth/claims.ts';
import type { Reservation } from '../budgets/ledger.ts';
import { env } from '../config/env.ts';
import { INPUT_REPORT_WAIT_MS } from '../config/timing.ts';
import { deferUntilReturn, finishBeforeReturn, holdResponse } from '../instance/unfinished.ts';
import { accessRecord, addCost, timePhase, type AccessRecord } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { charge, type ModelPricing, type TokenUsage } from '../pricing/prices.ts';
import { anthropicError } from '../providers/errors.ts';
import { PROVIDERS } from '../providers/index.ts';
import { PROVIDER_LABELS, type MessagesRequest, type Provider, type ProviderRequest } from '../providers/types.ts';
import type { Project } from '../registry/model.ts';
import { cachedDeploymentPricing } from '../registry/deployment-pricing.ts';
import { cachedProject } from '../registry/project-cache.ts';
import type { Refusable, Refusing } from '../refusals/refusal.ts';
import { routeModel, type Route } from '../routing/route.ts';
import { isTimeout, readWithin } from '../streaming/idle-timeout.ts';
import { encodeSse } from '../streaming/sse.ts';
import { MessageAccumulator } from './accumulator.ts';
import { reserveCall } from './reservation.ts';
import { pricingFor } from './model-access.ts';
import { settleCharge } from './settlements.ts';
import { producedByMessage, trustedAnthropicUsage } from './usage.ts';

/**
 * The metered model call (docs/architecture.md, "The metered model call"): given a caller and a validated
 * Anthropic-format request, it routes the model, resolves the provider's credential and the price, reserves the
 * worst case (docs/contract.md, "Hard cap"), calls the provider, meters the answer — JSON or stream — and settles.
 * It knows nothing of HTTP: the proxy, the agent runtime, vessels and sessions all call it and render its result
 * or refusal themselves, so every model call is reserved and settled the same way, for every provider.
 */

export interface ModelCallInput {
  caller: Caller;
  /** The request in Anthropic's format, validated for what the gateway needs (proxy/schema.ts MessagesBody). */
  body: MessagesRequest;
  /** The exact text the client sent, forwarded unchanged when the gateway did not change the body. */
  rawBody?: string;
  /** The client's Anthropic version and beta headers (forwarded to Anthropic, ignored by translated providers). */
  anthropicHeaders?: ProviderRequest['headers'];
  /**
   * Aborts the call: a JSON call stops and is charged its input bound (the provider may have billed it); a stream
   * stops after reading on to the provider's input report (at most INPUT_REPORT_WAIT_MS) and is charged what was
   * produced. A caller that merely stops reading a stream cancels its body instead, with the same effect.
   */
  signal?: AbortSignal;
  /** The most this call may cost (what is left of an agent run's budget): `max_tokens` is lowered to fit it. */
  capMicros?: number;
  now?: Date;
}

/** What a call cost. */
export interface CallCharge {
  microdollars: number;
  /** The tokens charged (absent when the upstream's own reported cost was used). */
  tokens?: TokenUsage;
  /**
   * What is left of the window's AI budget once this call is settled: budget − used − reserved, from the counters the
   * ledger returned (the reservation's, for a JSON answer, whose charge is settled only after it is delivered); absent
   * when the ledger could not say.
   */
  remaining?: number;
}

export type ModelCall =
  /** `charge`: what a call that failed after its reservation was still charged (an aborted call's input bound). */
  | (Refusing & { clampedMaxTokens?: number; charge?: CallCharge })
  /**
   * `charge` is known before it is settled; `settle` writes it (once, however often it is called). It is work the
   * invocation finishes before it returns (instance/unfinished.ts): a caller that does not start it — the proxy
   * starts it once the answer has been delivered — has it started by the handler's end.
   */
  | { ok: true; kind: 'message'; message: Anthropic.Message; clampedMaxTokens?: number; charge: CallCharge; settle: () => Promise<unknown> }
  | { ok: true; kind: 'stream'; stream: MeteredStream; clampedMaxTokens?: number };

export interface MeteredStream<M extends StreamMeter = MessageAccumulator> {
  /** The provider's SSE bytes as it produces them; read it to its end, or cancel it to stop the call. */
  body: ReadableStream<Uint8Array>;
  /**
   * Decodes `body` as it is read: for Anthropic's format (MessageAccumulator) usage, the accumulated message, and an
   * event feed (`onEvent`); for Chat Completions passed through, its meter (metering/chat-chunks.ts).
   */
  accumulator: M;
  /** Resolves once the stream has ended or been cancelled and its charge is settled. */
  settled: Promise<CallCharge>;
}

/**
 * What the metered stream needs of the reader that decodes a provider's stream as it passes, whatever its format:
 * MessageAccumulator (Anthropic SSE) or ChatChunkMeter (Chat Completions chunks, metering/chat-chunks.ts).
 */
export interface StreamMeter {
  push(chunk: Uint8Array): void;
  end(): void;
  /** Whether the provider has reported the input side (a disconnect before it reads on, briefly, to that report). */
  readonly inputReported: boolean;
}

/** The model and provider of a call, as its logs and its settlement name them. */
export interface CallContext {
  model: string;
  provider: string;
}

/** What a settlement says of the call beyond its cost (its activity record, lambdas/activity/record.ts). */
export type SettledAs = Parameters<typeof settleCharge>[3];

export interface ResolvedModel {
  route: Route;
  provider: Provider;
  project: Project;
  apiKey: string;
}

/**
 * The provider for a model name and the credential it is called with. A project key that seems missing, or a price
 * that seems unknown, is read once more (rate-limited per project) before refusing: the owner may have just set it.
 */
export async function resolveModel(caller: Caller, model: string): Promise<Refusable<{ resolved: ResolvedModel }>> {
  const route = routeModel(model);
  const provider = PROVIDERS[route.provider];
  let project = await cachedProject(caller.projectId);
  if (!project) return { ok: false, refusal: unknownIssuer() };
  let apiKey = await provider.credential(project);
  if (!apiKey && provider.usesProjectKey) {
    project = (await cachedProject(caller.projectId, { refresh: true })) ?? project;
    apiKey = await provider.credential(project);
  }
  if (!apiKey) {
    const label = PROVIDER_LABELS[route.provider];
    return {
      ok: false,
      refusal: {
        kind: 'missing_provider_key',
        model,
        provider: route.provider,
        projectId: project.projectId,
        message: `Model "${model}" routes to ${label}, but project ${project.projectId} has no ${label} API key (${route.provider}); the project owner sets it with "gateway project set-provider-key --provider ${route.provider}"`,
      },
    };
  }
  return { ok: true, resolved: { route, provider, project, apiKey } };
}

/**
 * The model's price: the project's own, the deployment's (`gateway pricing set`), else the catalog's
 * (metering/model-access.ts), both records as cached. One that seems missing is looked up once more in both records
 * read again (each rate-limited) before refusing: the owner or the operator may have just set it.
 */
export async function requirePricing(resolved: ResolvedModel, model: string): Promise<Refusable<{ pricing: ModelPricing }>> {
  const priced = async (refresh: boolean) => {
    const [project, deployment] = await Promise.all([
      refresh ? cachedProject(resolved.project.projectId, { refresh }) : resolved.project,
      cachedDeploymentPricing({ refresh }),
    ]);
    return pricingFor(project ?? resolved.project, deployment, model, resolved.route);
  };
  const pricing = (await priced(false)) ?? (await priced(true));
  if (pricing) return { ok: true, pricing };
  return {
    ok: false,
    refusal: {
      kind: 'unpriced_model',
      model,
      message: `Model "${model}" has no known price, so it cannot be metered; the project owner can set one with "gateway project set-pricing --model ${model}", the operator one for every project with "gateway pricing set --model ${model}"`,
    },
  };
}

function providerRequest(resolved: ResolvedModel, input: ModelCallInput, body: MessagesRequest, rawBody: string, signal: AbortSignal): ProviderRequest {
  return {
    body,
    rawBody,
    upstreamModel: resolved.route.upstreamModel,
    baseUrl: resolved.provider.baseUrl(),
    apiKey: resolved.apiKey,
    headers: input.anthropicHeaders ?? {},
    signal,
    timeoutMs: env().UPSTREAM_TIMEOUT_MS,
  };
}

/**
 * The steps of a call before its reservation, whatever its wire format: the model routed to its provider and
 * credential, and priced (each timed as the request's phase).
 */
export async function routeAndPrice(caller: Caller, model: string): Promise<Refusable<{ resolved: ResolvedModel; pricing: ModelPricing }>> {
  const log = accessRecord();
  let phaseStart = performance.now();
  const routed = await resolveModel(caller, model);
  timePhase(log, 'project', phaseStart);
  if (!routed.ok) return routed;
  phaseStart = performance.now();
  const priced = await requirePricing(routed.resolved, model);
  timePhase(log, 'pricing', phaseStart);
  if (!priced.ok) return priced;
  return { ok: true, resolved: routed.resolved, pricing: priced.pricing };
}

/** A call whose worst case is held: what its sending, metering and settlement share, whatever its wire format. */
export interface HeldCall {
  caller: Caller;
  pricing: ModelPricing;
  reservation: Reservation;
  /** The window's AI used + reserved right after the reservation. */
  committedAi: number;
  /** The input bound: charged for input the provider never reported. */
  inputBound: number;
  context: CallContext;
  log: AccessRecord;
}

/**
 * Sends a held call. Everything between the reservation and the provider's answer is in `send`: whatever throws on
 * the way — the body's serialisation (a tool schema too deep for JSON.stringify), building the provider's request, its
 * translation, the send itself — means nothing was (or can have been) billed, so the hold is released at once, not
 * left to the sweep, which would charge its worst case (docs/contract.md, "Hard cap").
 */
export async function sendHeld<R>(held: HeldCall, send: () => Promise<R>): Promise<R> {
  const started = clock.now();
  let result: R;
  try {
    result = await send();
  } catch (err) {
    await finishBeforeReturn(settleCharge(held.reservation, 0, held.context, { error: true }));
    throw err;
  }
  held.log.upstreamMs = clock.now() - started;
  emit('UpstreamLatency', held.log.upstreamMs);
  return result;
}

/**
 * A provider's refusal or failure, settled now: nothing is charged, unless the caller aborted the call — the provider
 * may have billed the input it had read, so its bound is charged, and said as tokens, so a stopped run's result
 * reports what it was charged for.
 */
export async function failedCall(held: HeldCall, aborted: boolean): Promise<CallCharge> {
  const tokens: TokenUsage | undefined = aborted ? { input_tokens: held.inputBound, output_tokens: 0 } : undefined;
  const micros = tokens ? charge(held.pricing, tokens).microdollars : 0;
  const outcome = await finishBeforeReturn(settleCharge(held.reservation, micros, held.context, { error: true, ...(tokens ? { tokens } : {}) }));
  addCost(held.log, micros);
  return chargeOf(held.caller, micros, tokens, outcome);
}

/**
 * A whole answer's charge — the upstream's reported cost where it is the bill, else its tokens × price — known now
 * and settled after delivery (`settle`); what will remain follows from the reservation's counters.
 */
export function answeredCall(held: HeldCall, tokens: TokenUsage, reportedMicros: number | undefined): { charge: CallCharge; settle: () => Promise<unknown> } {
  const reported = reportedCost(reportedMicros, held.context);
  const micros = reported ?? charge(held.pricing, tokens).microdollars;
  addCost(held.log, micros);
  const settle = deferUntilReturn(() => timedSettle(held.log, held.reservation, micros, held.context, { tokens }));
  const remaining = remainingOf(held.caller, held.committedAi - held.reservation.held.ai + micros);
  return { charge: { microdollars: micros, remaining, ...(reported === undefined ? { tokens } : {}) }, settle };
}

/**
 * A stream's charge once it has ended, from what its meter read: the reported cost where it is the bill, else the
 * tokens × price (the tokens are counted in the activity either way).
 */
export function streamedCharge(
  held: HeldCall,
  read: { tokens: TokenUsage; reportedMicros: number | undefined; untrusted: boolean; error: boolean },
): ReturnType<StreamMetering<StreamMeter>['charged']> {
  if (read.untrusted) untrustedUsage(held.context, 'stream');
  const reported = reportedCost(read.reportedMicros, held.context);
  if (reported !== undefined) return { micros: reported, counted: read.tokens, error: read.error };
  return { micros: charge(held.pricing, read.tokens).microdollars, tokens: read.tokens, counted: read.tokens, error: read.error };
}

/** One metered model call; see the module comment. Failures of the gateway itself (not refusals) are thrown. */
export async function meteredCall(input: ModelCallInput): Promise<ModelCall> {
  const { caller, body } = input;
  const log = accessRecord();
  const admitted = await routeAndPrice(caller, body.model);
  if (!admitted.ok) return admitted;
  const { resolved, pricing } = admitted;
  const phaseStart = performance.now();
  const reservedCall = await reserveCall(caller, pricing, body, input.now, input.capMicros, input.signal);
  timePhase(log, 'reservation', phaseStart);
  if (!reservedCall.ok) return refusedForBudget(caller, body.model, reservedCall);
  const { reserved } = reservedCall;
  const { reservation, clampedMaxTokens } = reserved;
  const context = { model: body.model, provider: resolved.route.provider };
  const held: HeldCall = { caller, pricing, reservation, committedAi: reserved.committedAi, inputBound: reserved.worstCase.inputTokens, context, log };
  // A caller that stops listening does not stop the provider's bill, so the call is not abandoned on its own: a JSON
  // answer is awaited and charged as counted, a stream is read until the provider has reported its input.
  const upstream = new AbortController();
  const result = await sendHeld(held, () => {
    // The forwarded body changes only when the gateway bounded it; otherwise the client's bytes go up unchanged.
    const rawBody = reserved.body === body && input.rawBody !== undefined ? input.rawBody : JSON.stringify(reserved.body);
    const signal = input.signal ? AbortSignal.any([upstream.signal, input.signal]) : upstream.signal;
    return resolved.provider.send(providerRequest(resolved, input, reserved.body, rawBody, signal));
  });

  if (result.kind === 'error') {
    const callCharge = await failedCall(held, input.signal?.aborted === true);
    return { ok: false, refusal: { kind: 'upstream', status: result.status, body: result.body }, clampedMaxTokens, charge: callCharge };
  }

  if (result.kind === 'message') {
    const trusted = trustedAnthropicUsage(result.message.usage);
    if (!trusted) untrustedUsage(context, 'message');
    const tokens = trusted ?? {
      input_tokens: held.inputBound,
      // The provider cannot have produced more than it was allowed: the estimate stays inside the reservation.
      output_tokens: Math.min(producedByMessage(result.message.content), reserved.body.max_tokens),
    };
    const { charge: callCharge, settle } = answeredCall(held, tokens, result.reportedCostMicros);
    return { ok: true, kind: 'message', message: result.message, clampedMaxTokens, charge: callCharge, settle };
  }

  const charged = (accumulator: MessageAccumulator) =>
    streamedCharge(held, {
      tokens: accumulator.tokens(held.inputBound, reserved.body.max_tokens),
      reportedMicros: result.reportedCostMicros?.(),
      untrusted: accumulator.usageUntrusted,
      error: accumulator.errorSeen,
    });
  return {
    ok: true,
    kind: 'stream',
    stream: meteredStream(result.body, {
      meter: new MessageAccumulator(),
      failure: (message) => encodeSse('error', anthropicError('api_error', message)),
      charged,
      held,
      upstream,
      signal: input.signal,
    }),
    clampedMaxTokens,
  };
}

/**
 * A call refused at its reservation (the budget, or a run's cost cap): counted in the project's activity as a refusal,
 * written after the answer like a settlement (the refusal is on its way to the client already).
 */
export function refusedForBudget<R extends Refusing>(caller: Caller, model: string, refused: R): R {
  const count = { projectId: caller.projectId, userId: caller.userId, model, aiMicros: 0, computeSeconds: 0, requests: 0, errors: 0, refusals: 1 };
  deferUntilReturn(() => countActivity(count));
  return refused;
}

/** The settlement write, timed as the request's `settle` phase. */
export async function timedSettle(log: AccessRecord, reservation: Reservation, micros: number, context: CallContext, call: SettledAs = {}) {
  const started = performance.now();
  const outcome = await settleCharge(reservation, micros, context, call);
  timePhase(log, 'settle', started);
  return outcome;
}

export function chargeOf(caller: Caller, micros: number, tokens: TokenUsage | undefined, outcome: Awaited<ReturnType<typeof settleCharge>>): CallCharge {
  const out: CallCharge = { microdollars: micros };
  if (tokens) out.tokens = tokens;
  if (outcome?.used) out.remaining = remainingOf(caller, outcome.used.ai + (outcome.reserved?.ai ?? 0));
  return out;
}

/** What is left of the caller's AI budget when the window's used + reserved is `committedAi`. */
export function remainingOf(caller: Caller, committedAi: number): number {
  return Math.max(0, caller.budget.ai - committedAi);
}

/** An answer whose usage could not be trusted is charged from the gateway's own count: say so, once per answer. */
export function untrustedUsage(context: CallContext, kind: 'message' | 'stream'): void {
  emit('UsageEstimated', 1);
  logger.warn('upstream usage missing or implausible; charged from the gateway count', { ...context, kind });
}

/** No single request can cost more than this ($10,000): a larger reported cost is a broken upstream. */
const MAX_PLAUSIBLE_COST_MICROS = 10_000_000_000;

/** A cost the upstream reported itself (OpenRouter), used only when it is a plausible whole number of microdollars. */
export function reportedCost(micros: number | undefined, context: CallContext): number | undefined {
  if (micros === undefined) return undefined;
  if (Number.isSafeInteger(micros) && micros >= 0 && micros <= MAX_PLAUSIBLE_COST_MICROS) return micros;
  untrustedUsage(context, 'message');
  return undefined;
}

export interface StreamMetering<M extends StreamMeter> {
  /** Decodes the stream as it passes. */
  meter: M;
  /** The bytes that end the stream when the upstream fails in the middle of it, in the stream's own format. */
  failure: (message: string) => Uint8Array;
  /** The charge; `tokens` when it was priced from them, `counted` the tokens the activity records in any case. */
  charged: (meter: M) => { micros: number; tokens?: TokenUsage; counted?: TokenUsage; error?: boolean };
  held: HeldCall;
  /** Stops the upstream call. */
  upstream: AbortController;
  /** The caller's own abort (an interrupted agent turn). */
  signal?: AbortSignal;
}

/** Resolves on the next turn of the event loop: what was just written reaches the socket before work that follows. */
const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Passes the provider's SSE bytes through as they arrive while the accumulator reads them. The stream closes first
 * and the charge is settled after (the client does not wait for the ledger write; the settlement is work the
 * invocation finishes before it returns, so a Lambda never freezes with it pending); a broken upstream ends it with the format's error (`failure`);
 * a reader that goes away (or a caller's abort) stops the upstream and is charged for what was produced — after
 * reading on, briefly, to the provider's `message_start` if it left before that, so the input is charged as the
 * provider counted it rather than at the gateway's bound.
 */
export function meteredStream<M extends StreamMeter>(source: ReadableStream<Uint8Array>, m: StreamMetering<M>): MeteredStream<M> {
  const reader = source.getReader();
  const accumulator = m.meter;
  const log = accessRecord();
  const opened = performance.now();
  let settled: Promise<CallCharge> | undefined;
  let resolveSettled!: (charge: CallCharge) => void;
  const settledOnce = new Promise<CallCharge>((resolve) => (resolveSettled = resolve));
  // Tracked at once (before `before` runs), so a handler's wait for settlements already sees it, and the request's
  // access line waits for it to carry the charge.
  const finish = (before?: () => Promise<void>) => {
    if (settled) return settled;
    settled = finishBeforeReturn(
      (async () => {
        await before?.().catch(() => undefined);
        accumulator.end();
        const { micros, tokens, counted, error } = m.charged(accumulator);
        addCost(log, micros);
        const as: SettledAs = { ...(counted ? { tokens: counted } : {}), ...(error ? { error } : {}) };
        const charge = chargeOf(m.held.caller, micros, tokens, await timedSettle(log, m.held.reservation, micros, m.held.context, as));
        resolveSettled(charge);
        return charge;
      })(),
    );
    holdResponse(log, settled);
    return settled;
  };
  const readToInputReport = async () => {
    const deadline = clock.now() + INPUT_REPORT_WAIT_MS;
    while (!accumulator.inputReported && clock.now() < deadline) {
      const { done, value } = await readWithin(reader.read(), Math.max(1, deadline - clock.now()));
      if (done) return;
      accumulator.push(value);
    }
  };
  const stop = async () => {
    await finish(readToInputReport);
    m.upstream.abort();
    await reader.cancel().catch(() => undefined);
  };
  if (m.signal) {
    if (m.signal.aborted) void stop();
    else m.signal.addEventListener('abort', () => void stop(), { once: true });
  }
  const body = new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        try {
          const { done, value } = await reader.read();
          if (done) {
            void finish(nextTurn);
            controller.close();
            return;
          }
          if (log.phases?.firstByte === undefined) timePhase(log, 'firstByte', opened);
          accumulator.push(value);
          controller.enqueue(value);
        } catch (err) {
          if (m.upstream.signal.aborted) {
            // Stopped on purpose: the charge is (being) settled by `stop`.
            await settled;
            closeQuietly(controller);
            return;
          }
          logger.warn('upstream stream failed', { ...m.held.context, error: (err as Error)?.message });
          emit('Errors', 1);
          controller.enqueue(m.failure(isTimeout(err) ? 'The upstream stopped sending data (time-out)' : 'The upstream connection failed mid-stream'));
          void finish(nextTurn);
          controller.close();
        }
      },
      async cancel() {
        await stop();
      },
    },
    { highWaterMark: 0 },
  );
  return { body, accumulator, settled: settledOnce };
}

function closeQuietly(controller: ReadableStreamDefaultController<Uint8Array>): void {
  try {
    controller.close();
  } catch {
    // already cancelled by its reader
  }
}

/** count_tokens through the model's provider: no money is involved, but the routing and credential are the same. */
export async function countTokens(input: Omit<ModelCallInput, 'signal' | 'now'>): Promise<Refusable<{ inputTokens: number; estimated: boolean }>> {
  const routed = await resolveModel(input.caller, input.body.model);
  if (!routed.ok) return routed;
  const { resolved } = routed;
  const result = await resolved.provider.countTokens(
    providerRequest(resolved, input, input.body, input.rawBody ?? JSON.stringify(input.body), new AbortController().signal),
  );
  if (result.kind === 'error') return { ok: false, refusal: { kind: 'upstream', status: result.status, body: result.body } };
  return { ok: true, inputTokens: result.input_tokens, estimated: result.estimated };
}
