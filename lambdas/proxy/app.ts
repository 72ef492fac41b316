import { randomBytes } from 'node:crypto';
import { Router } from '../http/router.ts';
import { logger } from '../observability/logger.ts';
import { countRequests } from '../observability/metrics.ts';
import { errorResponse } from './errors.ts';
import { handleCountTokens, handleMessages } from './messages.ts';
import { getModel, listModels } from './models.ts';

/** The channeling URL: Anthropic's Messages API, metered. Every response carries a `request-id`. */
export function proxyApp(): { fetch(req: Request): Promise<Response> } {
  const router = new Router({
    notFound: (req) => errorResponse(404, 'not_found_error', `No route for ${req.method} ${new URL(req.url).pathname}`),
    methodNotAllowed: (req) => errorResponse(405, 'invalid_request_error', `${req.method} is not allowed on ${new URL(req.url).pathname}`),
    onError: (err) => {
      logger.error('proxy request failed', { error: err as Error });
      return errorResponse(500, 'api_error', 'The gateway failed to handle this request');
    },
  })
    .on('POST', '/v1/messages', handleMessages)
    .on('POST', '/v1/messages/count_tokens', handleCountTokens)
    .on('GET', '/v1/models', listModels)
    .on('GET', '/v1/models/{id}', (req, { id }) => getModel(req, id!));

  const counted = countRequests(router.fetch);
  return {
    async fetch(req) {
      const res = await counted(req);
      const headers = new Headers(res.headers);
      headers.set('request-id', `req_gw_${randomBytes(12).toString('hex')}`);
      return new Response(res.body, { status: res.status, statusText: res.statusText, headers });
    },
  };
}
