import { chatCompletionsProvider } from '../chat-completions/provider.ts';
import type { Provider } from '../types.ts';
import { OPENAI_DIALECT } from './dialect.ts';

/** OpenAI: the Chat Completions translation with OpenAI's dialect (./dialect.ts). */
export const openaiProvider: Provider = chatCompletionsProvider(OPENAI_DIALECT);
