import { chatCompletionsProvider } from '../openai/index.ts';
import type { Provider } from '../types.ts';
import { OPENROUTER_DIALECT } from './dialect.ts';

/** OpenRouter: the OpenAI translation with OpenRouter's dialect (./dialect.ts). `or:` is stripped by the router. */
export const openrouterProvider: Provider = chatCompletionsProvider(OPENROUTER_DIALECT);
