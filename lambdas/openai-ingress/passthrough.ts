import { MAX_TOKENS_CEILING } from '../http/limits.ts';
import { isOpenAIReasoningModel } from '../providers/openai/dialect.ts';
import { Refused } from '../refusals/refusal.ts';
import type { ProviderId } from '../routing/provider-ids.ts';
import { DEFAULT_MAX_TOKENS } from './request.ts';

/**
 * What `POST /v1/chat/completions` checks of a request for an OpenAI or OpenRouter model before passing it through
 * (docs/openai.md, "OpenAI and OpenRouter models"). Validation is the upstream's: only what the gateway needs to
 * route, bound and meter the request is read here, and refused (400 naming the field) only where OpenAI would
 * refuse it too — or where the gateway could not meter what the request asks for.
 */

/**
 * The output limit of a reasoning model (o-series, gpt-5*) whose request sets none: its limit covers the reasoning
 * too, and OpenAI advises leaving at least 25,000 tokens for reasoning and answer.
 */
export const REASONING_DEFAULT_MAX_TOKENS = 32_768;
/** OpenAI's largest `n`. */
export const MAX_CHOICES = 128;

export interface PassthroughRequest {
  body: Record<string, unknown> & { model: string };
  stream: boolean;
  /** `stream_options.include_usage`: the usage chunk reaches the client only when asked. */
  includeUsage: boolean;
  /** The limit per choice: the smaller of `max_completion_tokens` and `max_tokens` when set, else the default. */
  maxTokens: number;
  choices: number;
  webSearch: boolean;
}

type Json = Record<string, unknown>;
const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;
const isPositiveInteger = (v: unknown): v is number => typeof v === 'number' && Number.isSafeInteger(v) && v >= 1;

function refuse(param: string, message: string): Refused {
  return new Refused({ kind: 'invalid_request', param, message: `${param}: ${message}` });
}

/** Audio in or out is billed per audio token at rates the gateway does not hold, so it cannot be metered. */
const UNMETERED_AUDIO = 'audio is billed at audio-token rates this gateway does not meter; send text and images';

export function passthroughRequest(chat: Json & { model: string }, provider: ProviderId, upstreamModel: string): PassthroughRequest {
  let maxTokens: number | undefined;
  for (const field of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = chat[field];
    if (!present(v)) continue;
    if (!isPositiveInteger(v)) throw refuse(field, `${field} must be a positive integer`);
    // As on /v1/messages: no model accepts more, and the bound keeps every worst-case figure exact.
    if (v > MAX_TOKENS_CEILING) throw refuse(field, `${field} must be at most ${MAX_TOKENS_CEILING.toLocaleString('en-US')}`);
    maxTokens = Math.min(maxTokens ?? v, v);
  }
  let choices = 1;
  if (present(chat.n)) {
    if (!isPositiveInteger(chat.n) || chat.n > MAX_CHOICES) throw refuse('n', `n must be an integer from 1 to ${MAX_CHOICES}`);
    choices = chat.n;
  }
  if (choices > 1 && provider !== 'openai') throw refuse('n', 'n above 1 is served only for OpenAI models (one choice per request elsewhere)');
  if (present(chat.stream) && typeof chat.stream !== 'boolean') throw refuse('stream', 'stream must be a boolean');
  if (present(chat.stream_options) && !isObject(chat.stream_options)) throw refuse('stream_options', 'stream_options must be an object');
  if (present(chat.audio) || (Array.isArray(chat.modalities) && chat.modalities.includes('audio')))
    throw refuse(present(chat.audio) ? 'audio' : 'modalities', UNMETERED_AUDIO);
  if (Array.isArray(chat.messages)) {
    chat.messages.forEach((message: unknown, i) => {
      const content = isObject(message) ? message.content : undefined;
      if (!Array.isArray(content)) return;
      const j = content.findIndex((part) => isObject(part) && part.type === 'input_audio');
      if (j !== -1) throw refuse(`messages[${i}].content[${j}].type`, UNMETERED_AUDIO);
    });
  }
  // Priority processing is billed above the standard rates the gateway's prices are (flex below them: charged at standard).
  if (chat.service_tier === 'priority' || chat.service_tier === 'scale') {
    throw refuse('service_tier', `"${chat.service_tier}" is billed above the standard rates this gateway meters; use auto, default or flex`);
  }
  const stream = chat.stream === true;
  return {
    body: chat,
    stream,
    includeUsage: stream && isObject(chat.stream_options) && chat.stream_options.include_usage === true,
    maxTokens: maxTokens ?? (provider === 'openai' && isOpenAIReasoningModel(upstreamModel) ? REASONING_DEFAULT_MAX_TOKENS : DEFAULT_MAX_TOKENS),
    choices,
    webSearch: present(chat.web_search_options),
  };
}
