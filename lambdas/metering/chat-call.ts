import type { Caller } from '../auth/claims.ts';
import { env } from '../config/env.ts';
import { accessRecord, timePhase } from '../observability/access-log.ts';
import type { ModelPricing, TokenUsage } from '../pricing/prices.ts';
import type { Refusing } from '../refusals/refusal.ts';
import {
  answeredCall,
  failedCall,
  meteredStream,
  refusedForBudget,
  routeAndPrice,
  sendHeld,
  streamedCharge,
  untrustedUsage,
  type CallCharge,
  type HeldCall,
  type MeteredStream,
} from './call.ts';
import { ChatChunkMeter, chatStreamFailure, producedByCompletion, trustedChatUsage } from './chat-chunks.ts';
import { estimateInput } from './estimate.ts';
import { MIN_OUTPUT_TOKENS, reserveWorstCase, type WorstCase } from './reservation.ts';

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
  const admitted = await routeAndPrice(caller, body.model);
  if (!admitted.ok) return admitted;
  const { resolved, pricing } = admitted;
  const send = resolved.provider.chatCompletions;
  if (!send) throw new Error(`provider ${resolved.provider.id} does not pass Chat Completions through`);
  const phaseStart = performance.now();
  const worstCase = chatWorstCaseOf(pricing, body, input.choices, input.webSearch);
  const floor = Math.min(MIN_OUTPUT_TOKENS, input.maxTokens);
  const reserved = await reserveWorstCase(caller, { worstCase, maxTokens: input.maxTokens, floor }, input.now, undefined, input.signal);
  timePhase(log, 'reservation', phaseStart);
  if (!reserved.ok) return refusedForBudget(caller, body.model, reserved);
  const { reservation, committedAi, clampedMaxTokens } = reserved.reserved;
  const maxTokens = clampedMaxTokens ?? input.maxTokens;
  const maxOutput = maxTokens * input.choices;
  const context = { model: body.model, provider: resolved.route.provider };
  const held: HeldCall = { caller, pricing, reservation, committedAi, inputBound: worstCase.inputTokens, context, log };
  const fees: Partial<TokenUsage> = input.webSearch ? { web_search_requests: 1 } : {};
  const upstream = new AbortController();
  const result = await sendHeld(held, () =>
    send({
      body,
      upstreamModel: resolved.route.upstreamModel,
      maxTokens,
      baseUrl: resolved.provider.baseUrl(),
      apiKey: resolved.apiKey,
      signal: input.signal ? AbortSignal.any([upstream.signal, input.signal]) : upstream.signal,
      timeoutMs: env().UPSTREAM_TIMEOUT_MS,
    }),
  );

  if (result.kind === 'error') {
    const callCharge = await failedCall(held, input.signal?.aborted === true);
    const refusal = { kind: 'upstream', status: result.status, body: result.body } as const;
    return { ok: false, refusal, clampedMaxTokens, charge: callCharge, ...(result.openai ? { openai: result.openai } : {}) };
  }

  if (result.kind === 'completion') {
    const trusted = trustedChatUsage(result.completion.usage);
    if (!trusted) untrustedUsage(context, 'message');
    const counted = trusted ?? { input_tokens: held.inputBound, output_tokens: Math.min(producedByCompletion(result.completion.choices), maxOutput) };
    const { charge: callCharge, settle } = answeredCall(held, { ...counted, ...fees }, result.reportedCostMicros);
    return { ok: true, kind: 'completion', text: result.text, clampedMaxTokens, charge: callCharge, settle };
  }

  const cost = result.reportedCostMicros;
  const charged = (meter: ChatChunkMeter) =>
    streamedCharge(held, {
      tokens: { ...meter.tokens(held.inputBound, maxOutput), ...fees },
      reportedMicros: meter.rawUsage === undefined ? undefined : cost?.(meter.rawUsage),
      untrusted: meter.usageUntrusted,
      error: meter.error !== undefined,
    });
  return {
    ok: true,
    kind: 'stream',
    stream: meteredStream(result.body, { meter: new ChatChunkMeter(), failure: chatStreamFailure, charged, held, upstream, signal: input.signal }),
    clampedMaxTokens,
  };
}
