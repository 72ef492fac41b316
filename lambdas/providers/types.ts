import type Anthropic from '@anthropic-ai/sdk';
import type { Project } from '../registry/model.ts';
import type { ProviderId } from '../routing/provider-ids.ts';

/**
 * The contract every provider folder implements. The proxy speaks only Anthropic's Messages format; a provider turns
 * that into its own API and its answers back into Anthropic's shapes, streams included, and it knows where its API is
 * and which key to call it with, so the proxy holds no per-provider case.
 *
 *   providers/index.ts             PROVIDERS: one line per provider
 *   providers/anthropic/           pass-through (index.ts, api.ts, errors.ts, credentials.ts: the service key)
 *   providers/chat-completions/    the shared translation to OpenAI's Chat Completions API (request.ts,
 *                                  response.ts, stream.ts, errors.ts, provider.ts), the Dialect type (dialect.ts),
 *                                  and the pass-through of a client's own Chat Completions body (passthrough.ts)
 *   providers/openai/              a Chat Completions dialect: dialect.ts (what differs) + index.ts (the Provider)
 *   providers/openrouter/          the same two files
 *
 * The ids, their labels and which providers take a project's key are in routing/provider-ids.ts.
 *
 * Adding a provider = its id in routing/provider-ids.ts, a folder with the same files as its kind (a Chat
 * Completions dialect: dialect.ts + index.ts) and a line in providers/index.ts; the compiler then asks for its label
 * and its entry.
 */

/** Defined in routing/provider-ids.ts; re-exported for the modules that still import them from here. */
export { PROVIDER_LABELS, type ProviderId } from '../routing/provider-ids.ts';

/** Error types of Anthropic's envelope `{type:"error", error:{type, message}}`. */
export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  /** 402: the account's billing (here: a developer's compute plan) does not allow the request. */
  | 'billing_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'overloaded_error';

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: AnthropicErrorType; message: string };
}

/** The request body as the client sent it; validated for the fields the gateway needs, all others kept as they are. */
export type MessagesRequest = Anthropic.MessageCreateParams & Record<string, unknown>;

export interface ProviderRequest {
  /** The client's body, parsed. */
  body: MessagesRequest;
  /** The exact text the client sent: the Anthropic provider forwards it unchanged. */
  rawBody: string;
  /** Model name to ask the upstream for (`or:` already stripped). The answer must still name `body.model`. */
  upstreamModel: string;
  /** From `Provider.baseUrl()` (tests pass their simulated upstream's). */
  baseUrl: string;
  /** From `Provider.credential()`: the proxy refuses the request before calling when there is none. */
  apiKey: string;
  /** Client headers the upstream may need (Anthropic: forwarded; others: ignored). */
  headers: { anthropicVersion?: string; anthropicBeta?: string };
  /** Aborted when the client disconnects: stop the upstream call. */
  signal: AbortSignal;
  /** Give up on the upstream after this long without an answer (or between two stream chunks). */
  timeoutMs: number;
}

export type ProviderResult =
  /** The upstream refused or failed before any answer: already in Anthropic's envelope with the status to send. */
  | { kind: 'error'; status: number; body: AnthropicErrorBody }
  | {
      kind: 'message';
      message: Anthropic.Message;
      /** Cost the upstream reported itself (OpenRouter), in microdollars; preferred over the price table. */
      reportedCostMicros?: number;
    }
  | {
      kind: 'stream';
      /**
       * Anthropic SSE bytes (`event: …\ndata: …\n\n`), produced as the upstream produces them. A failure in the middle
       * is either an `event: error` in the stream or an error of the ReadableStream (the proxy then writes the event).
       */
      body: ReadableStream<Uint8Array>;
      /** Read once the stream has ended (OpenRouter reports cost in its last chunk). */
      reportedCostMicros?: () => number | undefined;
    };

/**
 * A Chat Completions request passed through to a provider that speaks it (`POST /v1/chat/completions` with an
 * OpenAI or OpenRouter model): the client's body, unknown fields kept; the provider sets only the model, the output
 * limit the reservation holds, and what metering needs (the usage chunk of a stream, OpenRouter's cost).
 */
export interface ChatPassthroughRequest {
  /** The client's Chat Completions body, parsed. */
  body: Record<string, unknown>;
  /** Model name to ask the upstream for (`or:` already stripped). */
  upstreamModel: string;
  /** The output limit the reservation holds: each limit field the client set is lowered to it, or one is added. */
  maxTokens: number;
  baseUrl: string;
  apiKey: string;
  signal: AbortSignal;
  timeoutMs: number;
}

export type ChatPassthroughResult =
  /** Refused or failed before any answer; `openai` keeps the upstream's own `param` and `code` for its client. */
  | (Extract<ProviderResult, { kind: 'error' }> & { openai?: { param: string | null; code: string | null } })
  /** A `chat.completion`: the upstream's bytes (`text`) and their parse. */
  | { kind: 'completion'; text: string; completion: Record<string, unknown>; reportedCostMicros?: number }
  /** Chat Completions SSE bytes, as the upstream sends them (its usage chunk included). */
  | { kind: 'stream'; body: ReadableStream<Uint8Array>; reportedCostMicros?: (usage: unknown) => number | undefined };

export type CountResult = { kind: 'count'; input_tokens: number; estimated: boolean } | Extract<ProviderResult, { kind: 'error' }>;

export interface Provider {
  id: ProviderId;
  /** Where the provider's API is (its *_BASE_URL setting): the caller passes it in `ProviderRequest.baseUrl`. */
  baseUrl(): string;
  /**
   * The key to call the upstream with for this project: the gateway's service key, or the project's own key
   * (undefined when the project has not set one). The caller passes it in `ProviderRequest.apiKey`.
   */
  credential(project: Project): Promise<string | undefined>;
  /** Whether `credential` is the project's key: a project without one cannot use the provider's models. */
  usesProjectKey: boolean;
  send(req: ProviderRequest): Promise<ProviderResult>;
  countTokens(req: ProviderRequest): Promise<CountResult>;
  /** Chat Completions passed through unchanged (providers that speak OpenAI's format: chat-completions/passthrough.ts). */
  chatCompletions?(req: ChatPassthroughRequest): Promise<ChatPassthroughResult>;
}
