import { httpApp, type HttpApp } from '../http/app.ts';
import { Router } from '../http/router.ts';
import { clientErrorResponse, errorResponse } from './errors.ts';
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
    renderClientError: clientErrorResponse,
    internalError: () => errorResponse(500, 'api_error', 'The gateway failed to handle this request'),
    errorTypeOf: (body) => (body as { error?: { type?: string } })?.error?.type,
  });
}
