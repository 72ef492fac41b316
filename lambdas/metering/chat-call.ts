import type { Caller } from '../auth/claims.ts';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { finishBeforeReturn, deferUntilReturn } from '../instance/unfinished.ts';
import { accessRecord, addCost, timePhase } from '../observability/access-log.ts';
import { emit } from '../observability/metrics.ts';
import { charge, type ModelPricing, type TokenUsage } from '../pricing/prices.ts';
import type { ChatPassthroughResult } from '../providers/types.ts';
import type { Refusing } from '../refusals/refusal.ts';
import {
  chargeOf,
  meteredStream,
  remainingOf,
  refusedForBudget,
  reportedCost,
  requirePricing,
  resolveModel,
  timedSettle,
  untrustedUsage,
  type CallCharge,
  type MeteredStream,
  type StreamMetering,
} from './call.ts';
import { ChatChunkMeter, chatStreamFailure, producedByCompletion, trustedChatUsage } from './chat-chunks.ts';
import { estimateInput } from './estimate.ts';
import { MIN_OUTPUT_TOKENS, reserveWorstCase, type WorstCase } from './reservation.ts';
import { settleCharge } from './settlements.ts';

/**
 * The metered model call for OpenAI's Chat Completions passed through (`POST /v1/chat/completions` with an OpenAI or
 * OpenRouter model; docs/openai.md). The same call as metering/call.ts — the same model resolution, price lookup,
 * reservation loop (`reserveWorstCase`), metered stream and settlement, imported from there — with the two parts that
 * depend on the wire format: the worst case of a Chat Completions body, and its usage (metering/chat-chunks.ts).
 */

export interface ChatCallInput {
  caller: Caller;
  /** The client's Chat Completions body (checked by openai-ingress/passthrough.ts); every field is forwarded. */
  body: Record<string, unknown> & { model: string };
  /** The output limit asked for (per choice): the client's, or the route's default when it set none. */
  maxTokens: number;
  /** `n`: choices asked for, each up to `maxTokens`. */
  choices: number;
  /** The request runs a web search (`web_search_options`): one search fee where the model's price has one. */
  webSearch: boolean;
  signal?: AbortSignal;
  now?: Date;
}

export type ChatCall =
  | (Refusing & { clampedMaxTokens?: number; charge?: CallCharge; openai?: { param: string | null; code: string | null } })
  | { ok: true; kind: 'completion'; text: string; clampedMaxTokens?: number; charge: CallCharge; settle: () => Promise<unknown> }
  | { ok: true; kind: 'stream'; stream: MeteredStream<ChatChunkMeter>; clampedMaxTokens?: number };

/**
 * The worst case of a Chat Completions request: the input bound (metering/estimate.ts reads OpenAI's messages,
 * content parts, tools and response format) at the dearest input rate it can be billed at, once — OpenAI bills the
 * prompt once however many choices — and the output limit at the output rate once per choice, plus a web search's
 * fee. OpenAI bills no cache writes; a cache write is counted only where a `cache_control` breakpoint asks for one
 * (OpenRouter passes them to Anthropic models).
 */
export function chatWorstCaseOf(pricing: ModelPricing, body: Record<string, unknown>, choices: number, webSearch: boolean): WorstCase {
  const { tokens: inputTokens, cacheControl } = estimateInput(body);
  const rates = pricing.rates(inputTokens);
  const dearest = cacheControl ? Math.max(rates.input, rates.cacheWrite, rates.cacheWrite1h, rates.cacheRead) : Math.max(rates.input, rates.cacheRead);
  return { inputTokens, inputPico: inputTokens * dearest, outputRate: rates.output * choices, feesPico: webSearch ? (pricing.fees.webSearch ?? 0) : 0 };
}

/** One metered Chat Completions call passed through; see the module comment. Failures of the gateway itself are thrown. */
export async function meteredChatCompletion(input: ChatCallInput): Promise<ChatCall> {
  const { caller, body } = input;
  const log = accessRecord();
  let phaseStart = performance.now();
  const routed = await resolveModel(caller, body.model);
  timePhase(log, 'project', phaseStart);
  if (!routed.ok) return routed;
  const { resolved } = routed;
  const send = resolved.provider.chatCompletions;
  if (!send) throw new Error(`provider ${resolved.provider.id} does not pass Chat Completions through`);
  phaseStart = performance.now();
  const priced = await requirePricing(resolved, body.model);
  timePhase(log, 'pricing', phaseStart);
  if (!priced.ok) return priced;
  const { pricing } = priced;
  phaseStart = performance.now();
  const worstCase = chatWorstCaseOf(pricing, body, input.choices, input.webSearch);
  const floor = Math.min(MIN_OUTPUT_TOKENS, input.maxTokens);
  const held = await reserveWorstCase(caller, { worstCase, maxTokens: input.maxTokens, floor }, input.now, undefined, input.signal);
  timePhase(log, 'reservation', phaseStart);
  if (!held.ok) return refusedForBudget(caller, body.model, held);
  const { reservation, committedAi, clampedMaxTokens } = held.reserved;
  const maxTokens = clampedMaxTokens ?? input.maxTokens;
  const maxOutput = maxTokens * input.choices;
  const context = { model: body.model, provider: resolved.route.provider };
  const fees: Partial<TokenUsage> = input.webSearch ? { web_search_requests: 1 } : {};
  const upstream = new AbortController();
  let started = clock.now();
  let result: ChatPassthroughResult;
  // As in metering/call.ts: whatever throws between the reservation and the answer releases the hold at once.
  try {
    const signal = input.signal ? AbortSignal.any([upstream.signal, input.signal]) : upstream.signal;
    started = clock.now();
    result = await send({
      body,
      upstreamModel: resolved.route.upstreamModel,
      maxTokens,
      baseUrl: resolved.provider.baseUrl(),
      apiKey: resolved.apiKey,
      signal,
      timeoutMs: env().UPSTREAM_TIMEOUT_MS,
    });
  } catch (err) {
    await finishBeforeReturn(settleCharge(reservation, 0, context, { error: true }));
    throw err;
  }
  log.upstreamMs = clock.now() - started;
  emit('UpstreamLatency', log.upstreamMs);

  if (result.kind === 'error') {
    // Aborted by the caller: the upstream may have billed the input it read, so its bound is charged.
    const tokens: TokenUsage | undefined = input.signal?.aborted ? { input_tokens: worstCase.inputTokens, output_tokens: 0 } : undefined;
    const micros = tokens ? charge(pricing, tokens).microdollars : 0;
    const outcome = await finishBeforeReturn(settleCharge(reservation, micros, context, { error: true, ...(tokens ? { tokens } : {}) }));
    addCost(log, micros);
    return {
      ok: false,
      refusal: { kind: 'upstream', status: result.status, body: result.body },
      clampedMaxTokens,
      charge: chargeOf(caller, micros, tokens, outcome),
      ...(result.openai ? { openai: result.openai } : {}),
    };
  }

  if (result.kind === 'completion') {
    const trusted = trustedChatUsage(result.completion.usage);
    if (!trusted) untrustedUsage(context, 'message');
    const tokens: TokenUsage = {
      ...(trusted ?? { input_tokens: worstCase.inputTokens, output_tokens: Math.min(producedByCompletion(result.completion.choices), maxOutput) }),
      ...fees,
    };
    const reported = reportedCost(result.reportedCostMicros, context);
    const micros = reported ?? charge(pricing, tokens).microdollars;
    addCost(log, micros);
    const settle = deferUntilReturn(() => timedSettle(log, reservation, micros, context, { tokens }));
    const remaining = remainingOf(caller, committedAi - reservation.held.ai + micros);
    const callCharge: CallCharge = { microdollars: micros, remaining, ...(reported === undefined ? { tokens } : {}) };
    return { ok: true, kind: 'completion', text: result.text, clampedMaxTokens, charge: callCharge, settle };
  }

  const cost = result.reportedCostMicros;
  const charged = (meter: ChatChunkMeter): ReturnType<StreamMetering<ChatChunkMeter>['charged']> => {
    if (meter.usageUntrusted) untrustedUsage(context, 'stream');
    const reported = reportedCost(meter.rawUsage === undefined ? undefined : cost?.(meter.rawUsage), context);
    const tokens = { ...meter.tokens(worstCase.inputTokens, maxOutput), ...fees };
    const error = meter.error !== undefined;
    if (reported !== undefined) return { micros: reported, counted: tokens, error };
    return { micros: charge(pricing, tokens).microdollars, tokens, counted: tokens, error };
  };
  return {
    ok: true,
    kind: 'stream',
    stream: meteredStream(result.body, {
      meter: new ChatChunkMeter(),
      failure: chatStreamFailure,
      caller,
      charged,
      reservation,
      upstream,
      signal: input.signal,
      context,
    }),
    clampedMaxTokens,
  };
}
