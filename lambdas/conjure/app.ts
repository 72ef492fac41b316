import { TokenError, verifyToken } from '../auth/tokens.ts';
import { bearerToken, Router } from '../http/router.ts';
import { projectSecret } from '../registry/project-cache.ts';
import { usageReport } from '../usage/report.ts';
import { logger } from '../observability/logger.ts';
import { countRequests } from '../observability/metrics.ts';
import { conjureError } from './errors.ts';

/** Routes of the conjure URL served by API Gateway REST (/usage now; /incubate… join here). */
export function conjureApp(): { fetch(req: Request): Promise<Response> } {
  const router = new Router({
    notFound: (req) => conjureError(404, 'not_found', `No route for ${req.method} ${new URL(req.url).pathname}`),
    methodNotAllowed: (req) => conjureError(405, 'method_not_allowed', `${req.method} is not allowed on ${new URL(req.url).pathname}`),
    onError: (err) => {
      logger.error('conjure request failed', { error: err as Error });
      return conjureError(500, 'internal_error', 'The gateway failed to handle this request');
    },
  }).on(
    'GET',
    '/usage',
    async (req) => {
      try {
        const caller = await verifyToken(bearerToken(req), projectSecret);
        return Response.json(await usageReport(caller));
      } catch (err) {
        if (err instanceof TokenError) return conjureError(401, err.message);
        throw err;
      }
    },
  );
  return { fetch: countRequests(router.fetch) };
}
