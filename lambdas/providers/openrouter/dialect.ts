import { env } from '../../config/env.ts';
import type { Dialect } from '../chat-completions/dialect.ts';
import { requestedEffort, thinkingBudget } from '../chat-completions/request.ts';

/**
 * OpenRouter speaks OpenAI's Chat Completions; it differs only here:
 * - reasoning text comes in `reasoning` (not `reasoning_content`);
 * - reasoning is asked for with its unified `reasoning` object: Anthropic's thinking budget goes as
 *   `reasoning.max_tokens` (OpenRouter turns it into an effort for models that take one), else an effort;
 * - it takes `max_tokens` for every model and drops the sampling settings a model does not support itself;
 * - it reports what the request cost (`usage.cost`, USD) when asked with `usage: {include: true}`.
 */
export const OPENROUTER_DIALECT: Dialect = {
  id: 'openrouter',
  baseUrl: () => env().OPENROUTER_BASE_URL,
  limitField: 'max_tokens',
  reasoningField: 'reasoning',
  limits(params, body) {
    if (typeof body.max_tokens === 'number') params.max_tokens = body.max_tokens;
    const budget = thinkingBudget(body);
    if (budget !== undefined) params.reasoning = { max_tokens: budget };
    else {
      const effort = requestedEffort(body);
      if (effort) params.reasoning = { effort };
    }
  },
  extraParams: { usage: { include: true } },
  reportedCostMicros: reportedCostMicros,
};

/** `usage.cost` in USD → microdollars, rounded up (a float like 0.0000015 must not lose its last microdollar). */
export function reportedCostMicros(usage: unknown): number | undefined {
  const cost = (usage as { cost?: unknown } | null | undefined)?.cost;
  if (typeof cost !== 'number' || !Number.isFinite(cost) || cost < 0) return undefined;
  return Math.max(0, Math.ceil(cost * 1_000_000 - 1e-9));
}
