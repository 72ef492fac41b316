import { setTimeout as delay } from 'node:timers/promises';
import { clock } from '../config/clock.ts';
import { budgetHoldWaitMs, HOLD_POLL_FIRST_MS, HOLD_POLL_MAX_MS } from '../config/timing.ts';
import type { Caller } from '../auth/claims.ts';
import { budgetFigures, reserve, secondsToReset, type Reservation, type WindowUsage } from '../budgets/ledger.ts';
import { windowEnd } from '../budgets/windows.ts';
import type { ModelPricing, Rates, Ratio } from '../pricing/prices.ts';
import type { MessagesRequest } from '../providers/types.ts';
import type { Refusable, Refusal } from '../refusals/refusal.ts';
import { estimateInput } from './estimate.ts';

/**
 * The reservation of one model call against what remains of the user's budget (docs/contract.md, "Hard cap"): the
 * per-call step, where plans/admission.ts is the per-run one (plan → lease). The request's worst case — its input
 * bound at the dearest input rate, `max_tokens` at the output rate, and the server-tool fees it can incur — is
 * reserved only if `used + reserved + worst ≤ budget`, in the ledger's single conditional write. When the input side
 * fits but the full `max_tokens` does not, `max_tokens` is lowered to the largest value that fits (never raised; a
 * request that fits is never touched); below the floor, the request is refused with 429.
 */

/** The smallest answer worth clamping to: below this a request is refused rather than cut to nothing useful. */
export const MIN_OUTPUT_TOKENS = 16;
/** Web searches a request may run when its web_search tool sets no `max_uses` (the gateway sets it upstream). */
export const DEFAULT_WEB_SEARCH_MAX_USES = 10;
const PICO_PER_MICRO = 1_000_000n;

/** Web fetches a request may run when its web_fetch tool sets no `max_uses`, where fetches carry a fee (set upstream). */
export const DEFAULT_WEB_FETCH_MAX_USES = 10;
/**
 * The advisor tool (`advisor_*`, https://platform.claude.com/docs/en/agents-and-tools/tool-use/advisor-tool) runs a
 * sub-inference on another model per use, reading the whole transcript. A tool without `max_uses` or `max_tokens`
 * gets these upstream (as a web search gets its `max_uses`), so that each use is bounded: at most this many uses,
 * each of at most this many output tokens ("Minimum 1024; Anthropic recommends starting with 2048"; an advice is
 * "typically 400 to 700 text tokens, 1,400 to 1,800 tokens total including thinking").
 */
export const DEFAULT_ADVISOR_MAX_USES = 3;
export const DEFAULT_ADVISOR_MAX_TOKENS = 4096;

export interface WorstCase {
  inputTokens: number;
  /**
   * Picodollars of the input side: every input token at the dearest input rate (cache writes cost more), once per
   * model that may read it (the requested model, each server-side fallback, a compaction pass), premiums included.
   */
  inputPico: number;
  /**
   * Picodollars per `max_tokens` token: the output rates of the models whose answer `max_tokens` bounds, plus the
   * input rate at which each advisor use re-reads that output, premiums included.
   */
  outputRate: number;
  /**
   * Picodollars that do not depend on `max_tokens`: the server-tool fees the request can incur, and the advisor's
   * and fallbacks' own bounded parts (premiums included).
   */
  feesPico: number;
}

export interface ReservedCall {
  reservation: Reservation;
  /** The window's AI used + reserved right after the reservation (its own hold included). */
  committedAi: number;
  /** The body to forward: the client's, or a copy with `max_tokens` lowered and/or web-search `max_uses` set. */
  body: MessagesRequest;
  /** Set when `max_tokens` was lowered to fit the budget. */
  clampedMaxTokens?: number;
  worstCase: WorstCase;
}

const toolType = (tool: unknown) => (typeof (tool as { type?: unknown })?.type === 'string' ? (tool as { type: string }).type : '');
const isWebSearch = (tool: unknown) => toolType(tool).startsWith('web_search_');
const isWebFetch = (tool: unknown) => toolType(tool).startsWith('web_fetch_');
const isAdvisor = (tool: unknown) => toolType(tool).startsWith('advisor_');
const isCount = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 0;

/**
 * Server tools with their uses bounded — the client's own `max_uses` (and an advisor's `max_tokens`), else the
 * gateway's default, set upstream: web search where searches carry a fee, web fetch where fetches do (not on
 * Anthropic: free), and the advisor always (its uses are billed at the advisor model's rates). `uses` counts the
 * web searches; the rest is read back from the bounded tools by `worstCaseOf`.
 */
function boundedTools(body: MessagesRequest, pricing: ModelPricing): { tools?: unknown[]; uses: number; changed: boolean } {
  if (!Array.isArray(body.tools)) return { tools: body.tools as unknown[] | undefined, uses: 0, changed: false };
  let uses = 0;
  let changed = false;
  const bound = (tool: object, field: string, fallback: number, valid: (n: unknown) => boolean) => {
    if (valid((tool as Record<string, unknown>)[field])) return tool;
    changed = true;
    return { ...tool, [field]: fallback };
  };
  const tools = (body.tools as unknown[]).map((tool) => {
    if (isWebSearch(tool) && pricing.fees.webSearch !== undefined) {
      const bounded = bound(tool as object, 'max_uses', DEFAULT_WEB_SEARCH_MAX_USES, isCount);
      uses += (bounded as { max_uses: number }).max_uses;
      return bounded;
    }
    if (isWebFetch(tool) && (pricing.fees.webFetch ?? 0) > 0) return bound(tool as object, 'max_uses', DEFAULT_WEB_FETCH_MAX_USES, isCount);
    if (isAdvisor(tool)) {
      const withUses = bound(tool as object, 'max_uses', DEFAULT_ADVISOR_MAX_USES, isCount);
      return bound(withUses, 'max_tokens', DEFAULT_ADVISOR_MAX_TOKENS, (n) => isCount(n) && n > 0);
    }
    return tool;
  });
  return { tools, uses, changed };
}

/** x × ratio, rounded up (a bound). */
const times = (x: number, r: Ratio | undefined) => (r ? Math.ceil((x * r.num) / r.den) : x);

/**
 * The request's worst case (docs/contract.md, "Hard cap"; every billed dimension of metering/usage.ts and
 * pricing/prices.ts `charge`):
 * - the input bound at the dearest input rate, and `max_tokens` at the output rate, of the requested model;
 * - fast mode (`speed: "fast"`): each model's token rates × its fast-mode premium;
 * - server-side `fallbacks`: each fallback model may read the input again and answer up to its own `max_tokens`
 *   (else the request's), at its rates — `"default"` counts as one more pass at the requested model's rates;
 * - the advisor: per use (`max_uses`), the transcript so far (input bound + `max_tokens`) at the advisor's dearest
 *   input rate and its `max_tokens` at its output rate (not at the executor's fast premium);
 * - compaction (`context_management.edits` of type `compact_*`): one more pass over the input bound, and a summary
 *   bounded like the answer;
 * - web searches (`webSearches`) and web fetches (`max_uses` of the body's tools) at their fees;
 * - US-only inference: token parts × 1.1 unless the request names another `inference_geo` (unset, the workspace's
 *   default applies, which may be "us").
 * A model without a known price (an advisor's or a fallback's) counts at the requested model's rates.
 */
export function worstCaseOf(pricing: ModelPricing, body: MessagesRequest, webSearches: number): WorstCase {
  const { tokens: inputTokens, cacheControl } = estimateInput(body);
  // Cache writes (dearer than input) happen only at a `cache_control` breakpoint: without one, every input token is
  // billed as input or, at most, as a cache read (never dearer than input).
  const dearest = (rates: Rates, writes = cacheControl) =>
    writes ? Math.max(rates.input, rates.cacheWrite, rates.cacheWrite1h, rates.cacheRead) : Math.max(rates.input, rates.cacheRead);
  const fastRequested = (body as { speed?: unknown }).speed === 'fast';
  const priceOf = (model: unknown) => (typeof model === 'string' ? (pricing.other(model) ?? pricing) : pricing);
  const rates = pricing.rates(inputTokens);
  const fast = fastRequested ? pricing.premiums.fast : 1;
  let inputPico = inputTokens * dearest(rates) * fast;
  let outputRate = rates.output * fast;
  let fixedPico = 0;

  const fallbacks = (body as { fallbacks?: unknown }).fallbacks;
  if (fallbacks === 'default') {
    inputPico += inputTokens * dearest(rates) * fast;
    outputRate += rates.output * fast;
  } else if (Array.isArray(fallbacks)) {
    for (const entry of fallbacks as { model?: unknown; max_tokens?: unknown; speed?: unknown }[]) {
      const hop = priceOf(entry?.model);
      const hopRates = hop.rates(inputTokens);
      const hopFast = entry?.speed === 'fast' || (entry?.speed === undefined && fastRequested) ? hop.premiums.fast : 1;
      inputPico += inputTokens * dearest(hopRates) * hopFast;
      if (isCount(entry?.max_tokens)) fixedPico += entry.max_tokens * hopRates.output * hopFast;
      else outputRate += hopRates.output * hopFast;
    }
  }

  const edits = (body as { context_management?: { edits?: unknown } }).context_management?.edits;
  if (Array.isArray(edits) && edits.some((edit) => toolType(edit).startsWith('compact_'))) {
    inputPico += inputTokens * dearest(rates) * fast;
    outputRate += rates.output * fast;
  }

  let webFetches = 0;
  for (const tool of Array.isArray(body.tools) ? (body.tools as unknown as Record<string, unknown>[]) : []) {
    if (isWebFetch(tool)) webFetches += isCount(tool.max_uses) ? tool.max_uses : DEFAULT_WEB_FETCH_MAX_USES;
    if (!isAdvisor(tool)) continue;
    const uses = isCount(tool.max_uses) ? tool.max_uses : DEFAULT_ADVISOR_MAX_USES;
    const maxOut = isCount(tool.max_tokens) && tool.max_tokens > 0 ? tool.max_tokens : DEFAULT_ADVISOR_MAX_TOKENS;
    const advisor = priceOf(tool.model);
    // The advisor's prompt is the transcript so far; with `caching` it writes its own cache.
    const advisorRates = advisor.rates(inputTokens + body.max_tokens);
    const advisorInput = dearest(advisorRates, true);
    fixedPico += uses * (inputTokens * advisorInput + maxOut * advisorRates.output);
    outputRate += uses * advisorInput;
  }

  const usOnly =
    typeof (body as { inference_geo?: unknown }).inference_geo === 'string' && (body as { inference_geo: string }).inference_geo !== 'us'
      ? undefined
      : pricing.premiums.usOnly;
  const fees = webSearches * (pricing.fees.webSearch ?? 0) + webFetches * (pricing.fees.webFetch ?? 0);
  return { inputTokens, inputPico: times(inputPico, usOnly), outputRate: times(outputRate, usOnly), feesPico: times(fixedPico, usOnly) + fees };
}

/** Worst case in whole microdollars (rounded up) at a given `max_tokens`. */
export function worstCaseMicros(w: WorstCase, maxTokens: number): number {
  return Number((BigInt(w.inputPico) + BigInt(maxTokens) * BigInt(w.outputRate) + BigInt(w.feesPico) + PICO_PER_MICRO - 1n) / PICO_PER_MICRO);
}

/** The largest `max_tokens` whose worst case fits in `room` microdollars (exact, in integers). */
function largestFitting(w: WorstCase, room: number, cap: number): number {
  const spare = BigInt(Math.max(0, room)) * PICO_PER_MICRO - BigInt(w.inputPico) - BigInt(w.feesPico);
  if (spare < 0n) return -1;
  if (w.outputRate === 0) return cap;
  const fit = spare / BigInt(w.outputRate);
  return fit > BigInt(cap) ? cap : Number(fit);
}

/** The floor for this request: MIN_OUTPUT_TOKENS, or the thinking budget + 1 (Anthropic needs max_tokens above it). */
function floorOf(body: MessagesRequest): number {
  const thinking = body.thinking as { type?: string; budget_tokens?: unknown } | undefined;
  const needed =
    thinking?.type === 'enabled' && typeof thinking.budget_tokens === 'number' ? Math.max(MIN_OUTPUT_TOKENS, thinking.budget_tokens + 1) : MIN_OUTPUT_TOKENS;
  // A request asking for less than the floor is reserved at its own size or not at all.
  return Math.min(needed, body.max_tokens);
}

/**
 * Reserves the call's worst case, or says why it cannot be reserved (docs/contract.md, "Reservation", "Clamp" and
 * "Holds wait"). `capMicros` bounds the worst case further (an agent run's `maxBudgetUsd`, what is left of it):
 * `max_tokens` is lowered to fit it the same way, and below the floor the refusal is `cost_cap_reached`.
 *
 * Against the user's budget, each refused write returns the window's counters, and from them two fits are told
 * apart: what fits beside what is SPENT (`used`), and what fits beside what is spent and HELD (`used + reserved`).
 *   - Not even the floor fits beside the spent budget: nothing but the window's reset helps → `budget_exhausted`.
 *   - The request would fit better once holds settle: it waits for them — re-trying with a growing, jittered pause,
 *     for up to BUDGET_HOLD_WAIT_MS — instead of being refused or clamped while budget remains. Each retry is the same
 *     single conditional write, so the cap holds at any concurrency.
 *   - When the wait is over: `max_tokens` is clamped to what fits now if that is at least the floor, else the refusal
 *     is `budget_held` (429, `x-should-retry: true`).
 * A caller's abort ends the wait the same way.
 */
export async function reserveCall(
  caller: Caller,
  pricing: ModelPricing,
  clientBody: MessagesRequest,
  now = new Date(clock.now()),
  capMicros?: number,
  signal?: AbortSignal,
): Promise<Refusable<{ reserved: ReservedCall }>> {
  const bounded = boundedTools(clientBody, pricing);
  // The body as it will be forwarded (a `max_uses` the gateway adds is input too); only max_tokens may change later.
  const forwarded = bounded.changed ? ({ ...clientBody, tools: bounded.tools } as MessagesRequest) : clientBody;
  const worstCase = worstCaseOf(pricing, forwarded, bounded.uses);
  const held = await reserveWorstCase(caller, { worstCase, maxTokens: clientBody.max_tokens, floor: floorOf(clientBody) }, now, capMicros, signal);
  if (!held.ok) return held;
  const { reservation, committedAi, clampedMaxTokens } = held.reserved;
  const body = clampedMaxTokens === undefined ? forwarded : { ...forwarded, max_tokens: clampedMaxTokens };
  return { ok: true, reserved: { reservation, committedAi, body, clampedMaxTokens, worstCase } };
}

/** A request's worst case with its output limit: what `reserveWorstCase` holds, whatever the wire format. */
export interface BoundedRequest {
  worstCase: WorstCase;
  /** The output limit asked for (Anthropic's `max_tokens`, OpenAI's `max_completion_tokens`). */
  maxTokens: number;
  /** The smallest limit worth clamping to (at most `maxTokens`). */
  floor: number;
}

/** A held worst case: the limit to forward is `clampedMaxTokens` when set (lowered to fit), else the one asked for. */
export interface HeldWorstCase {
  reservation: Reservation;
  /** The window's AI used + reserved right after the reservation (its own hold included). */
  committedAi: number;
  clampedMaxTokens?: number;
}

/**
 * The reservation loop of `reserveCall` (see its comment), for a worst case already computed: the one place where
 * a model call's hold is written, for Anthropic's format and for OpenAI's Chat Completions passed through
 * (metering/chat-call.ts).
 */
export async function reserveWorstCase(
  caller: Caller,
  request: BoundedRequest,
  now = new Date(clock.now()),
  capMicros?: number,
  signal?: AbortSignal,
): Promise<Refusable<{ reserved: HeldWorstCase }>> {
  const { worstCase, floor } = request;
  const capped = capMicros === undefined ? request.maxTokens : largestFitting(worstCase, capMicros, request.maxTokens);
  if (capped < floor) {
    return {
      ok: false,
      refusal: {
        kind: 'cost_cap_reached',
        capMicros: capMicros!,
        message: `The run's remaining budget (${capMicros} microdollars) cannot pay for even the smallest form of the next model call (up to ${worstCaseMicros(worstCase, floor)})`,
      },
    };
  }
  // Elapsed time of the wait, not a time of day: measured on the monotonic clock, so a test's frozen clock cannot
  // make it endless.
  const waitUntil = performance.now() + budgetHoldWaitMs();
  let pause = HOLD_POLL_FIRST_MS;
  let maxTokens = capped;
  let quickTries = 0;
  let usage: WindowUsage;
  for (;;) {
    const result = await reserve({ caller, amounts: { ai: worstCaseMicros(worstCase, maxTokens), compute: 0 }, enforce: ['ai'], now });
    if (result.ok) {
      const clamped = maxTokens < request.maxTokens;
      return { ok: true, reserved: { reservation: result.reservation, committedAi: result.committed.ai, clampedMaxTokens: clamped ? maxTokens : undefined } };
    }
    usage = result.usage;
    const budget = caller.budget.ai;
    const fitSpent = largestFitting(worstCase, budget - usage.used.ai, capped);
    if (fitSpent < floor) break;
    const fitNow = largestFitting(worstCase, budget - usage.used.ai - usage.reserved.ai, capped);
    const waited = performance.now() >= waitUntil || signal?.aborted === true;
    // No hold stands in the way (what is spent alone leaves this little), or the wait is over: take what fits now,
    // at once — a few times, as other requests' writes may move the counters in between.
    if ((fitNow >= fitSpent || waited) && fitNow >= floor && quickTries < 3) {
      quickTries++;
      maxTokens = fitNow;
      continue;
    }
    if (waited) break;
    quickTries = 0;
    await sleep(Math.min(pause, Math.max(1, waitUntil - performance.now())) * (0.5 + Math.random() / 2), signal);
    pause = Math.min(HOLD_POLL_MAX_MS, pause * 2);
    // Aim at what fits once the holds settle; a refused write tells again how far that is.
    maxTokens = fitSpent;
  }
  return { ok: false, refusal: budgetRefusal(caller, usage, worstCaseMicros(worstCase, floor), now) };
}

/** Resolves after `ms`, or at once when `signal` aborts. */
const sleep = (ms: number, signal?: AbortSignal): Promise<unknown> => delay(ms, undefined, { signal }).catch(() => undefined);

/**
 * A refused reservation, said so that clients retry only when waiting can help: when even the smallest useful form
 * of the request does not fit beside what is already spent, nothing but the window's reset frees room
 * (`budget_exhausted`, with the seconds to the reset; none for a lifetime window); when it would fit once the user's
 * requests in flight settle, `budget_held` (the renderers say "retry in a second").
 */
function budgetRefusal(caller: Caller, usage: WindowUsage, smallestWorst: number, now: Date): Refusal {
  const { used, reserved } = usage;
  const budget = caller.budget.ai;
  const figures = budgetFigures(caller, usage);
  const window = `${caller.budget.window} window (started ${usage.key.windowStart})`;
  const remaining = Math.max(0, budget - used.ai);
  if (used.ai + smallestWorst > budget) {
    const end = windowEnd(caller.budget.window, new Date(usage.key.windowStart));
    const retryAfterSeconds = secondsToReset(usage, now);
    const resets = end ? `; it resets at ${end.toISOString()}` : '; a lifetime budget does not reset';
    const what =
      used.ai >= budget
        ? `AI budget exhausted: ${used.ai} of ${budget} microdollars spent in the current ${window}`
        : `AI budget too low for this request: ${remaining} of ${budget} microdollars remain in the current ${window}, and even its smallest form costs up to ${smallestWorst}`;
    return { kind: 'budget_exhausted', message: `${what}${resets}`, budget: figures, ...(retryAfterSeconds === undefined ? {} : { retryAfterSeconds }) };
  }
  return {
    kind: 'budget_held',
    message: `AI budget fully held by requests in flight: ${used.ai} spent and ${reserved.ai} reserved of ${budget} microdollars in the current ${window}; retry when they finish`,
    budget: figures,
  };
}
