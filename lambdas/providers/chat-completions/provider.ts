import OpenAI from 'openai';
import { projectKeyCredential } from '../project-key.ts';
import type { CountResult, Provider, ProviderRequest, ProviderResult } from '../types.ts';
import type { ChatProviderId, Dialect } from './dialect.ts';
import { bodyFailure, requestFailure, TranslationError, translationFailure } from './errors.ts';
import { passThrough } from './passthrough.ts';
import { estimateTokens, translateRequest, type TranslatedRequest } from './request.ts';
import { translateResponse, type AnswerContext } from './response.ts';
import { anthropicSseStream, StreamTranslator } from './stream.ts';

/**
 * A provider speaking OpenAI's Chat Completions API, translated to and from Anthropic's Messages format
 * (docs/translation.md). OpenAI itself and OpenRouter are two dialects of it (providers/openai, providers/openrouter).
 * Each project pays these providers with its own key.
 */
export function chatCompletionsProvider(dialect: Dialect): Provider {
  const id: ChatProviderId = dialect.id;

  /** The request translated and handed to `use`; one the translation cannot carry is the provider's 400 instead. */
  async function translated<R extends ProviderResult | CountResult>(
    req: ProviderRequest,
    stream: boolean,
    use: (t: TranslatedRequest) => R | Promise<R>,
  ): Promise<R | Extract<ProviderResult, { kind: 'error' }>> {
    let t: TranslatedRequest;
    try {
      t = translateRequest(req.body, { upstreamModel: req.upstreamModel, dialect, stream });
    } catch (err) {
      if (err instanceof TranslationError) return translationFailure(err);
      throw err;
    }
    return use(t);
  }

  function client(req: ProviderRequest): OpenAI {
    return new OpenAI({ apiKey: req.apiKey, baseURL: req.baseUrl, maxRetries: 0, timeout: req.timeoutMs });
  }

  function answerContext(req: ProviderRequest, t: TranslatedRequest): AnswerContext {
    return { requestedModel: req.body.model, names: t.names, dialect, stopSequences: t.stopSequences };
  }

  async function sendMessage(req: ProviderRequest, t: TranslatedRequest): Promise<ProviderResult> {
    let completion: OpenAI.Chat.ChatCompletion;
    try {
      completion = await client(req).chat.completions.create({ ...t.params, stream: false }, { signal: req.signal });
    } catch (err) {
      return requestFailure(id, err, req.timeoutMs);
    }
    const bodyError = (completion as { error?: unknown }).error;
    if (bodyError && !completion.choices?.length) return bodyFailure(id, bodyError);
    const message = translateResponse(completion, answerContext(req, t));
    const cost = dialect.reportedCostMicros?.(completion.usage);
    return cost === undefined ? { kind: 'message', message } : { kind: 'message', message, reportedCostMicros: cost };
  }

  async function sendStream(req: ProviderRequest, t: TranslatedRequest): Promise<ProviderResult> {
    const upstream = new AbortController();
    const signal = AbortSignal.any([req.signal, upstream.signal]);
    let chunks: AsyncIterable<OpenAI.Chat.ChatCompletionChunk>;
    try {
      chunks = await client(req).chat.completions.create({ ...t.params, stream: true }, { signal });
    } catch (err) {
      return requestFailure(id, err, req.timeoutMs);
    }
    const translator = new StreamTranslator(answerContext(req, t), estimateTokens(t.params));
    const body = anthropicSseStream({
      chunks,
      translator,
      provider: id,
      timeoutMs: req.timeoutMs,
      abort: (reason) => upstream.abort(reason),
    });
    const result: Extract<ProviderResult, { kind: 'stream' }> = { kind: 'stream', body };
    const cost = dialect.reportedCostMicros;
    if (cost) result.reportedCostMicros = () => (translator.rawUsage === undefined ? undefined : cost(translator.rawUsage));
    return result;
  }

  return {
    id,
    baseUrl: () => dialect.baseUrl(),
    ...projectKeyCredential(id),
    send(req): Promise<ProviderResult> {
      const stream = req.body.stream === true;
      return translated(req, stream, (t) => (stream ? sendStream(req, t) : sendMessage(req, t)));
    },
    countTokens(req): Promise<CountResult> {
      return translated(req, false, (t): CountResult => ({ kind: 'count', input_tokens: estimateTokens(t.params), estimated: true }));
    },
    chatCompletions: (req) => passThrough(dialect, req),
  };
}
