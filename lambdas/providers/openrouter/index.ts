import { chatCompletionsProvider } from '../chat-completions/provider.ts';
import type { Provider } from '../types.ts';
import { OPENROUTER_DIALECT } from './dialect.ts';

/** OpenRouter: the Chat Completions translation with OpenRouter's dialect (./dialect.ts). `or:` is stripped by the router. */
export const openrouterProvider: Provider = chatCompletionsProvider(OPENROUTER_DIALECT);
