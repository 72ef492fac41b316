import type { ProviderId } from './provider-ids.ts';

export interface Route {
  provider: ProviderId;
  /** The model name the provider is asked for. */
  upstreamModel: string;
}

const OPENAI_MODEL = /^(gpt-|chatgpt-|o1|o3|o4)/;

/** docs/contract.md, "Proxy": claude-* → Anthropic; GPT and o-series → OpenAI; `or:<id>` and every other name → OpenRouter. */
export function routeModel(model: string): Route {
  if (model.startsWith('or:')) return { provider: 'openrouter', upstreamModel: model.slice(3) };
  if (model.startsWith('claude-')) return { provider: 'anthropic', upstreamModel: model };
  if (OPENAI_MODEL.test(model)) return { provider: 'openai', upstreamModel: model };
  return { provider: 'openrouter', upstreamModel: model };
}
