import type Anthropic from '@anthropic-ai/sdk';
import type { ProjectProvider } from '../registry/model.ts';

/**
 * The contract every provider folder implements (`providers/<id>/index.ts` exports one `Provider`). The proxy speaks
 * only Anthropic's Messages format; a provider turns that into its own API and its answers back into Anthropic's
 * shapes, streams included. Adding a provider = a new folder with the same files + a line in providers/index.ts.
 */
export type ProviderId = 'anthropic' | ProjectProvider;

/** How messages name each provider. */
export const PROVIDER_LABELS: Record<ProviderId, string> = { anthropic: 'Anthropic', openai: 'OpenAI', openrouter: 'OpenRouter' };

/** Error types of Anthropic's envelope `{type:"error", error:{type, message}}`. */
export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
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
  baseUrl: string;
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

export type CountResult = { kind: 'count'; input_tokens: number; estimated: boolean } | Extract<ProviderResult, { kind: 'error' }>;

export interface Provider {
  id: ProviderId;
  send(req: ProviderRequest): Promise<ProviderResult>;
  countTokens(req: ProviderRequest): Promise<CountResult>;
}
