import { httpApp, type HttpApp } from '../http/app.ts';
import { Router } from '../http/router.ts';
import { anthropicError } from '../providers/errors.ts';
import { normalizePath } from '../http/path.ts';
import { anthropicEnvelope, anthropicRefusal } from '../refusals/anthropic.ts';
import { openaiEnvelope, openaiError, openaiRefusal } from '../refusals/openai.ts';
import { handleChatCompletions } from './chat-completions.ts';
import { handleCountTokens, handleMessages } from './messages.ts';
import { getModel, listModels } from './models.ts';

/** The path of the OpenAI-compatible route, whose refusals speak OpenAI's envelope (refusals/openai.ts). */
export const CHAT_COMPLETIONS_PATH = '/v1/chat/completions';

/** Whether a request is for the OpenAI-compatible route (by its normalised path, as the router matches it). */
function speaksOpenAI(req: Request | undefined): boolean {
  if (!req) return false;
  try {
    return normalizePath(new URL(req.url).pathname).replace(/\/$/, '') === CHAT_COMPLETIONS_PATH;
  } catch {
    return false;
  }
}

/**
 * The channeling URL: Anthropic's Messages API, metered, and OpenAI's Chat Completions (DESIGN §11). Every response
 * carries a `request-id`.
 */
export function proxyApp(): HttpApp {
  const router = new Router()
    .on('POST', '/v1/messages', handleMessages)
    .on('POST', '/v1/messages/count_tokens', handleCountTokens)
    .on('POST', CHAT_COMPLETIONS_PATH, handleChatCompletions)
    .on('GET', '/v1/models', listModels)
    .on('GET', '/v1/models/{id}', (req, { id }) => getModel(req, id!));
  return httpApp({
    router,
    renderRefusal: (refusal, req) => (speaksOpenAI(req) ? openaiRefusal(refusal) : anthropicRefusal(refusal)),
    internalError: (req) =>
      speaksOpenAI(req)
        ? openaiEnvelope(500, openaiError('The gateway failed to handle this request', 'api_error'))
        : anthropicEnvelope(500, anthropicError('api_error', 'The gateway failed to handle this request')),
    // OpenAI's envelope carries a code more telling than its type (`invalid_api_key`, `insufficient_quota`).
    errorTypeOf: (body) => {
      const error = (body as { error?: { type?: string; code?: unknown } })?.error;
      return typeof error?.code === 'string' ? error.code : error?.type;
    },
  });
}
