import { env } from '../../config/env.ts';
import type { Dialect } from '../chat-completions/dialect.ts';
import { requestedEffort } from '../chat-completions/request.ts';

/** OpenAI reasoning models: o-series and gpt-5*. They take max_completion_tokens and refuse custom sampling. */
export function isOpenAIReasoningModel(model: string): boolean {
  return /^(o1|o3|o4|gpt-5)/.test(model);
}

/**
 * OpenAI itself: reasoning text comes in `reasoning_content`; a reasoning model takes `max_completion_tokens` and an
 * effort and refuses temperature / top_p, every other model takes `max_tokens`.
 */
export const OPENAI_DIALECT: Dialect = {
  id: 'openai',
  baseUrl: () => env().OPENAI_BASE_URL,
  limitField: 'max_completion_tokens',
  reasoningField: 'reasoning_content',
  limits(params, body, upstreamModel) {
    if (isOpenAIReasoningModel(upstreamModel)) {
      if (typeof body.max_tokens === 'number') params.max_completion_tokens = body.max_tokens;
      delete params.temperature;
      delete params.top_p;
      const effort = requestedEffort(body);
      if (effort) params.reasoning_effort = effort;
    } else if (typeof body.max_tokens === 'number') {
      params.max_tokens = body.max_tokens;
    }
  },
};
