import type { ProviderId } from '../../routing/provider-ids.ts';
import type { MessagesRequest } from '../types.ts';
import type { ChatRequest } from './request.ts';

/** Providers served through the Chat Completions translation (each one a Dialect, in its own folder). */
export type ChatProviderId = Extract<ProviderId, 'openai' | 'openrouter'>;

/**
 * Where two Chat Completions providers differ. Everything else — messages, tools, responses, streams — is shared
 * (this folder); each provider's folder holds its Dialect (`dialect.ts`) and the Provider made of it (`index.ts`).
 */
export interface Dialect {
  id: ChatProviderId;
  /** Where the provider's API is: its *_BASE_URL setting (read when asked, so a reset environment is seen). */
  baseUrl(): string;
  /** Field of a message (and of a stream delta) that carries reasoning text. */
  reasoningField: 'reasoning_content' | 'reasoning';
  /** Sets the output limit and the reasoning controls (and drops sampling settings a model refuses). */
  limits(params: ChatRequest, body: MessagesRequest, upstreamModel: string): void;
  /**
   * The field a passed-through Chat Completions request gets when it sets no output limit of its own
   * (chat-completions/passthrough.ts): the reservation needs one.
   */
  limitField: 'max_completion_tokens' | 'max_tokens';
  /** Extra fields on every request body. */
  extraParams?: Partial<ChatRequest>;
  /** The cost the upstream reported in its usage, in microdollars (OpenRouter). */
  reportedCostMicros?(usage: unknown): number | undefined;
}
