import OPENAPI from '../../docs/openapi.json' with { type: 'json' };
import { authenticate } from '../auth/authenticate.ts';
import { httpApp, type HttpApp } from '../http/app.ts';
import { bearerToken, Router, type RouteHandler } from '../http/router.ts';
import { CONJURE_ENVELOPE } from '../refusals/conjure.ts';
import { Refused } from '../refusals/refusal.ts';
import { usageReport } from '../usage/report.ts';
import { handleBatch, handleCancel, handleIncubate, handleStatus } from './incubate.ts';
import { CONJURE_ROUTES, type ConjureRoute } from './routes.ts';

/** The conjure endpoints read the token from `Authorization: Bearer` only (docs/api.md, "Where it goes"). */
async function bearerCaller(req: Request, route: string) {
  const token = bearerToken(req);
  if (!token && req.headers.has('x-api-key')) {
    throw new Refused({
      kind: 'token',
      code: 'token_missing',
      message: `Missing token: ${route} reads the token from "Authorization: Bearer <token>", not from x-api-key`,
    });
  }
  return authenticate(token, { origin: req.headers.get('origin') });
}

/**
 * GET /openapi.json: the API's OpenAPI document (docs/openapi.json, `npm run openapi`), bundled into the function, for
 * anyone — no token, as a page or a client generator fetches it. A deployment changes it, so caches keep it 5 minutes.
 */
const OPENAPI_MAX_AGE_SECONDS = 300;

/** `"GET /usage"`: one key per declared route (distributed over the union, not a cross product of methods and paths). */
type RouteKey<R> = R extends { method: infer M extends string; path: infer P extends string } ? `${M} ${P}` : never;

/**
 * The handler of each conjure route. The routes themselves are declared once, in routes.ts (API Gateway and the
 * local runtime read the same list); a declared route without a handler here does not compile.
 */
const HANDLERS: Record<RouteKey<ConjureRoute>, RouteHandler> = {
  'GET /usage': async (req) => Response.json(await usageReport(await bearerCaller(req, '/usage'))),
  'POST /incubate': handleIncubate,
  'POST /incubate/batch': handleBatch,
  'GET /incubate/vessel/{vesselId}': handleStatus,
  'POST /incubate/vessel/{vesselId}/cancel': handleCancel,
  'GET /openapi.json': () => Response.json(OPENAPI, { headers: { 'cache-control': `public, max-age=${OPENAPI_MAX_AGE_SECONDS}` } }),
};

/** The conjure URL (API Gateway REST): the routes of routes.ts, refusals in the conjure envelope. */
export function conjureApp(): HttpApp {
  const router = new Router();
  for (const route of CONJURE_ROUTES) router.on(route.method, route.path, HANDLERS[`${route.method} ${route.path}` as RouteKey<ConjureRoute>]);
  return httpApp({ router, ...CONJURE_ENVELOPE });
}
