import { anthropicProvider } from './anthropic/index.ts';
import type { ProviderId } from '../routing/provider-ids.ts';
import { openaiProvider } from './openai/index.ts';
import { openrouterProvider } from './openrouter/index.ts';
import type { Provider } from './types.ts';

/**
 * Every provider the proxy routes to, by id: one line per provider. A Record, not a Partial one, so an id added to
 * ids.ts without its provider does not compile, and no caller needs a "not served" branch.
 */
export const PROVIDERS: Record<ProviderId, Provider> = {
  anthropic: anthropicProvider,
  openai: openaiProvider,
  openrouter: openrouterProvider,
};

export function providerFor(id: ProviderId): Provider {
  return PROVIDERS[id];
}
