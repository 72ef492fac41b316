import { TokenError, verifyToken } from '../auth/tokens.ts';
import { httpApp, type HttpApp } from '../http/app.ts';
import { bearerToken, Router } from '../http/router.ts';
import { accessRecord } from '../observability/access-log.ts';
import { projectSecret } from '../registry/project-cache.ts';
import { usageReport } from '../usage/report.ts';
import { clientErrorResponse, conjureError } from './errors.ts';

/** Routes of the conjure URL served by API Gateway REST (/usage now; /incubate… join here). */
export function conjureApp(): HttpApp {
  const router = new Router().on('GET', '/usage', async (req) => {
    const token = bearerToken(req);
    if (!token && req.headers.has('x-api-key')) {
      return conjureError(401, 'Missing token: /usage reads the token from "Authorization: Bearer <token>", not from x-api-key');
    }
    try {
      const caller = await verifyToken(token, projectSecret);
      Object.assign(accessRecord(), { project: caller.projectId, user: caller.userId });
      return Response.json(await usageReport(caller));
    } catch (err) {
      if (err instanceof TokenError) return conjureError(401, err.message);
      throw err;
    }
  });
  return httpApp({
    router,
    renderClientError: clientErrorResponse,
    internalError: () => conjureError(500, 'internal_error', 'The gateway failed to handle this request'),
    errorTypeOf: (body) => {
      const error = (body as { error?: unknown })?.error;
      return typeof error === 'string' ? error.slice(0, 80) : undefined;
    },
  });
}
