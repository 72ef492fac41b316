import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONJURE_ROUTES } from '../../lambdas/conjure/routes.ts';
import { FUNCTIONS, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * CORS is the functions' (docs/deploy.md, "CORS"): whatever stands in front of them — API Gateway and the function URLs
 * deployed, the local runtime here — hands a preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) to
 * the function that serves the path, as it would any other method, and answers nothing itself.
 */

/** A second REST function that answers the event it was handed (test/local/fixtures/echo-event.ts). */
const echo: FunctionSpec = {
  id: 'EchoEvent',
  entry: 'test/local/fixtures/echo-event.ts',
  description: 'test: answers its API Gateway event',
  memoryMb: 128,
  timeoutSeconds: 29,
  trigger: {
    kind: 'rest',
    routes: [
      { method: 'GET', path: '/echo' },
      { method: 'GET', path: '/echo/{thingId}' },
      { method: 'POST', path: '/echo/{thingId}/cancel' },
    ],
  },
  access: { tables: {}, providers: false, queues: [] },
};

const ORIGIN = 'https://app.example';
/** Each declared conjure path with its parameters filled in, and the method a page would ask for there. */
const conjurePaths = CONJURE_ROUTES.map((r) => ({ path: r.path.replace(/\{[^}]+\}/g, 'x'), method: r.method }));

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway({ functions: [...FUNCTIONS, echo] });
}, 60_000);
afterAll(() => gw?.stop());

const preflight = (path: string, method: string) =>
  fetch(`${gw.url}${path}`, {
    method: 'OPTIONS',
    headers: { origin: ORIGIN, 'access-control-request-method': method, 'access-control-request-headers': 'authorization, content-type' },
  });

describe('a CORS preflight reaches the function locally, as API Gateway and the function URLs hand it on deployed', () => {
  it('on every declared conjure path: the conjure function answers it (its request-id), not the runtime', async () => {
    expect(conjurePaths.map((p) => p.path).sort()).toEqual(
      ['/usage', '/incubate', '/incubate/batch', '/incubate/vessel/x', '/incubate/vessel/x/cancel', '/openapi.json'].sort(),
    );
    for (const { path, method } of conjurePaths) {
      const res = await preflight(path, method);
      await res.arrayBuffer();
      // The function's own answer: every answer of the gateway's apps carries its request-id.
      expect(res.headers.get('request-id'), `OPTIONS ${path}`).toMatch(/^req_gw_/);
      // The path is known to it: a preflight's 204 once the function answers CORS, its router's 405 before — never a 404.
      expect([204, 405], `OPTIONS ${path} answered ${res.status}`).toContain(res.status);
    }
  });

  it('on the function URLs: channeling (/v1/messages) and /prompt answer it themselves', async () => {
    for (const path of ['/v1/messages', '/prompt']) {
      const res = await preflight(path, 'POST');
      await res.arrayBuffer();
      expect(res.headers.get('request-id'), `OPTIONS ${path}`).toMatch(/^req_gw_/);
      expect([204, 405], `OPTIONS ${path} answered ${res.status}`).toContain(res.status);
    }
  });

  it("hands the REST function API Gateway's event for OPTIONS: the matched resource, its path parameters, no body", async () => {
    const answer = async (path: string) => {
      const res = await preflight(path, 'POST');
      expect(res.status).toBe(200);
      return (await res.json()) as Record<string, unknown>;
    };
    expect(await answer('/echo/a%20b/cancel')).toEqual({
      httpMethod: 'OPTIONS',
      path: '/echo/a%20b/cancel',
      resource: '/echo/{thingId}/cancel',
      pathParameters: { thingId: 'a b' },
      body: null,
      origin: ORIGIN,
      requestMethod: 'POST',
      context: { httpMethod: 'OPTIONS', resourcePath: '/echo/{thingId}/cancel', path: '/echo/a%20b/cancel' },
    });
    expect(await answer('/echo/t_1')).toMatchObject({ resource: '/echo/{thingId}', pathParameters: { thingId: 't_1' } });
    expect(await answer('/echo')).toMatchObject({ httpMethod: 'OPTIONS', resource: '/echo', pathParameters: null });
  });
});
