import type OpenAI from 'openai';
import { projectKeyCredential } from '../project-key.ts';
import type { CountResult, Provider, ProviderRequest, ProviderResult } from '../types.ts';
import { chatCompletionChunks, postChatCompletions, readCompletion } from './api.ts';
import type { ChatProviderId, Dialect } from './dialect.ts';
import { type ChatFailure, TranslationError, translationFailure } from './errors.ts';
import { passThrough } from './passthrough.ts';
import { estimateTokens, translateRequest, type TranslatedRequest } from './request.ts';
import { translateResponse, type AnswerContext } from './response.ts';
import { anthropicSseStream, StreamTranslator } from './stream.ts';

/**
 * A provider speaking OpenAI's Chat Completions API, translated to and from Anthropic's Messages format
 * (docs/translation.md). OpenAI itself and OpenRouter are two dialects of it (providers/openai, providers/openrouter).
 * Each project pays these providers with its own key. The upstream is called with plain `fetch` (api.ts, which says
 * why not the openai SDK).
 */

/** A failure as the Anthropic route answers it: without the upstream's `param` and `code`, which only the pass-through keeps. */
const anthropicFailure = ({ kind, status, body }: ChatFailure): Extract<ProviderResult, { kind: 'error' }> => ({ kind, status, body });

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

  function answerContext(req: ProviderRequest, t: TranslatedRequest): AnswerContext {
    return { requestedModel: req.body.model, names: t.names, dialect, stopSequences: t.stopSequences };
  }

  async function sendMessage(req: ProviderRequest, t: TranslatedRequest): Promise<ProviderResult> {
    const res = await postChatCompletions(id, req, { ...t.params, stream: false }, { stream: false, deadline: 'whole' });
    if (!(res instanceof Response)) return anthropicFailure(res);
    const answer = await readCompletion(id, res, req.timeoutMs);
    if (answer.kind === 'error') return anthropicFailure(answer);
    const completion = answer.completion as unknown as OpenAI.Chat.ChatCompletion;
    const message = translateResponse(completion, answerContext(req, t));
    const cost = dialect.reportedCostMicros?.(completion.usage);
    return cost === undefined ? { kind: 'message', message } : { kind: 'message', message, reportedCostMicros: cost };
  }

  async function sendStream(req: ProviderRequest, t: TranslatedRequest): Promise<ProviderResult> {
    // Aborted by the translated stream when it gives up on the upstream (an idle gap) or its reader cancels it.
    const upstream = new AbortController();
    const res = await postChatCompletions(id, req, { ...t.params, stream: true }, { stream: true, deadline: 'headers', signal: upstream.signal });
    if (!(res instanceof Response)) return anthropicFailure(res);
    const translator = new StreamTranslator(answerContext(req, t), estimateTokens(t.params));
    const body = anthropicSseStream({
      chunks: chatCompletionChunks(res, AbortSignal.any([req.signal, upstream.signal])),
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
