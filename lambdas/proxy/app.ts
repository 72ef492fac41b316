import { httpApp, type HttpApp } from '../http/app.ts';
import { Router } from '../http/router.ts';
import { anthropicError } from '../providers/errors.ts';
import { anthropicEnvelope, anthropicRefusal } from '../refusals/anthropic.ts';
import { handleCountTokens, handleMessages } from './messages.ts';
import { getModel, listModels } from './models.ts';

/** The channeling URL: Anthropic's Messages API, metered. Every response carries a `request-id`. */
export function proxyApp(): HttpApp {
  const router = new Router()
    .on('POST', '/v1/messages', handleMessages)
    .on('POST', '/v1/messages/count_tokens', handleCountTokens)
    .on('GET', '/v1/models', listModels)
    .on('GET', '/v1/models/{id}', (req, { id }) => getModel(req, id!));
  return httpApp({
    router,
    renderRefusal: (refusal) => anthropicRefusal(refusal),
    internalError: () => anthropicEnvelope(500, anthropicError('api_error', 'The gateway failed to handle this request')),
    errorTypeOf: (body) => (body as { error?: { type?: string } })?.error?.type,
  });
}
