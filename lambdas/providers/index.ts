import { anthropicProvider } from './anthropic/index.ts';
import { openaiProvider } from './openai/index.ts';
import { openrouterProvider } from './openrouter/index.ts';
import type { Provider, ProviderId } from './types.ts';

/** Every provider the proxy can route to, by id. A provider missing here answers a clear "not available" error. */
export const PROVIDERS: Partial<Record<ProviderId, Provider>> = {
  anthropic: anthropicProvider,
  openai: openaiProvider,
  openrouter: openrouterProvider,
};
