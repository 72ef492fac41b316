import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { setProjectOrigins } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { vesselItems } from '../vessels/incubate-client.ts';

/**
 * CORS on every route of both URLs, and origins per project and per token (DESIGN §10; lambdas/http/cors.ts,
 * lambdas/origins). Over real HTTP against the local gateway; the browser's own view is test/clients/browser.test.ts.
 */
const PAGE = 'http://127.0.0.1:5173';
const OTHER = 'https://evil.example';
const BUDGET = { ai: 5_000_000, compute: 600, window: 'day' as const };

/** Every route, with the methods its preflight must name (the proxy's, the conjure API's and /prompt's). */
const ROUTES: [string, string[]][] = [
  ['/v1/messages', ['POST']],
  ['/v1/messages/count_tokens', ['POST']],
  ['/v1/chat/completions', ['POST']],
  ['/v1/models', ['GET']],
  ['/v1/models/claude-sonnet-4-6', ['GET']],
  ['/usage', ['GET']],
  ['/incubate', ['POST']],
  ['/incubate/batch', ['POST']],
  ['/incubate/vessel/v_1', ['GET']],
  ['/incubate/vessel/v_1/cancel', ['POST']],
  ['/prompt', ['POST']],
];

const MESSAGE = { model: 'claude-sonnet-4-6', max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] };

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const usageOf = async (user: string) => {
  await gw.invocationsDone();
  const { used, reserved } = await readUsage({ projectId: gw.projectId, userId: user, budget: BUDGET });
  return { used, reserved };
};

const tokenFor = (user: string, origins?: string[]) =>
  mintToken({ projectId: gw.projectId, userId: user, secret: gw.secret, budget: BUDGET, expiresInSeconds: 600, ...(origins ? { origins } : {}) });

/** One request of each route, as a page would send it with a token of `user`. */
async function everyRoute(token: string, origin: string) {
  const h = { origin, 'content-type': 'application/json' };
  const bearer = { ...h, authorization: `Bearer ${token}` };
  return {
    messages: await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { ...h, 'x-api-key': token }, body: JSON.stringify(MESSAGE) }),
    countTokens: await fetch(`${gw.url}/v1/messages/count_tokens`, { method: 'POST', headers: { ...h, 'x-api-key': token }, body: JSON.stringify(MESSAGE) }),
    chat: await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: bearer,
      body: JSON.stringify({ model: MESSAGE.model, max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] }),
    }),
    usage: await fetch(`${gw.url}/usage`, { headers: bearer }),
    prompt: await fetch(`${gw.url}/prompt`, { method: 'POST', headers: h, body: JSON.stringify({ message: 'Hello', options: { token } }) }),
    incubate: await fetch(`${gw.url}/incubate`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ message: 'Hello', idempotencyKey: `k-${Math.random()}`, options: { token } }),
    }),
    batch: await fetch(`${gw.url}/incubate/batch`, {
      method: 'POST',
      headers: h,
      body: JSON.stringify({ items: [{ message: 'Hello', idempotencyKey: `b-${Math.random()}` }], options: { token } }),
    }),
    status: await fetch(`${gw.url}/incubate/vessel/v_1`, { headers: bearer }),
    cancel: await fetch(`${gw.url}/incubate/vessel/v_1/cancel`, { method: 'POST', headers: bearer }),
  };
}

describe('preflight', () => {
  it('every route of both URLs answers OPTIONS with 204, its methods and the headers asked for, without a token', async () => {
    const asked = 'x-api-key, anthropic-version, anthropic-dangerous-direct-browser-access, x-stainless-os, content-type, idempotency-key';
    for (const [path, methods] of ROUTES) {
      const r = await fetch(`${gw.url}${path}`, {
        method: 'OPTIONS',
        headers: { origin: PAGE, 'access-control-request-method': methods[0]!, 'access-control-request-headers': asked },
      });
      expect({ path, status: r.status, body: await r.text() }).toEqual({ path, status: 204, body: '' });
      expect(Object.fromEntries([...r.headers].filter(([name]) => name.startsWith('access-control-') || name === 'vary'))).toEqual({
        'access-control-allow-origin': PAGE,
        'access-control-allow-methods': [...methods, 'OPTIONS'].join(', '),
        'access-control-allow-headers': asked,
        'access-control-max-age': '7200',
        vary: 'Origin',
      });
      expect(r.headers.get('request-id')).toMatch(/^req_gw_/);
    }
  });

  it('an ill-formed header list is not echoed; a path with no route is a 404 the page can read', async () => {
    const r = await fetch(`${gw.url}/v1/messages`, {
      method: 'OPTIONS',
      headers: { origin: PAGE, 'access-control-request-method': 'POST', 'access-control-request-headers': 'x-api-key, (bad)' },
    });
    expect(r.status).toBe(204);
    expect(r.headers.has('access-control-allow-headers')).toBe(false);
    const none = await fetch(`${gw.url}/nowhere`, { method: 'OPTIONS', headers: { origin: PAGE, 'access-control-request-method': 'GET' } });
    expect(none.status).toBe(404);
    expect(none.headers.get('access-control-allow-origin')).toBe(PAGE);
  });

  it('an OPTIONS that is not a preflight is still a 405 naming the methods', async () => {
    const r = await fetch(`${gw.url}/v1/messages`, { method: 'OPTIONS' });
    expect(r.status).toBe(405);
    expect(r.headers.get('allow')).toBe('POST');
  });
});

describe('actual responses to a page', () => {
  it('answers, refusals and streams carry the origin and expose the gateway headers; without Origin, none', async () => {
    const token = await tokenFor('cors-reader');
    const ok = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { origin: PAGE, 'content-type': 'application/json', 'x-api-key': token },
      body: JSON.stringify(MESSAGE),
    });
    expect(ok.status).toBe(200);
    expect(ok.headers.get('access-control-allow-origin')).toBe(PAGE);
    const exposed = ok.headers.get('access-control-expose-headers')!.split(', ');
    for (const name of [
      'request-id',
      'retry-after',
      'x-should-retry',
      'idempotent-replayed',
      'x-session-id',
      'x-gateway-cost-microdollars',
      'x-gateway-max-tokens',
    ])
      expect(exposed).toContain(name);
    expect(exposed).not.toContain('content-type');
    await ok.json();

    const stream = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { origin: PAGE, 'content-type': 'application/json', accept: 'text/event-stream' },
      body: JSON.stringify({ message: 'Hello', options: { token } }),
    });
    expect(stream.headers.get('content-type')).toContain('text/event-stream');
    expect(stream.headers.get('access-control-allow-origin')).toBe(PAGE);
    expect(stream.headers.get('access-control-expose-headers')).toContain('x-session-id');
    expect(await stream.text()).toContain('event: done');

    const refused = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { origin: PAGE, 'content-type': 'application/json' }, body: '{}' });
    expect(refused.status).toBe(401);
    expect(refused.headers.get('access-control-allow-origin')).toBe(PAGE);
    expect(refused.headers.get('access-control-expose-headers')).toContain('request-id');
    const unusage = await fetch(`${gw.url}/usage`, { headers: { origin: PAGE } });
    expect(unusage.status).toBe(401);
    expect(unusage.headers.get('access-control-allow-origin')).toBe(PAGE);

    const server = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
    expect(server.status).toBe(200);
    expect(server.headers.has('access-control-allow-origin')).toBe(false);
    expect(server.headers.get('vary')).toBe('Origin');
  });
});

describe('origins per project and per token', () => {
  it('a project restricted to other origins: every route 403 in its envelope, readable, nothing charged or queued', async () => {
    await setProjectOrigins(gw.projectId, ['https://app.example', 'https://*.app.example']);
    try {
      const token = await tokenFor('cors-refused');
      const before = await usageOf('cors-refused');
      const r = await everyRoute(token, OTHER);
      const message = `Requests from origin "${OTHER}" are not allowed by project ${gw.projectId} (gateway project set-origins)`;
      expect({ status: r.messages.status, body: await r.messages.json() }).toEqual({
        status: 403,
        body: { type: 'error', error: { type: 'permission_error', message } },
      });
      expect(r.messages.headers.get('x-should-retry')).toBe('false');
      expect(r.countTokens.status).toBe(403);
      // The OpenAI-compatible route: the same refusal in OpenAI's envelope.
      expect({ status: r.chat.status, body: await r.chat.json() }).toEqual({
        status: 403,
        body: { error: { message, type: 'invalid_request_error', param: null, code: 'origin_not_allowed' } },
      });
      for (const res of [r.usage, r.prompt, r.incubate, r.batch, r.status, r.cancel]) {
        expect({ status: res.status, body: await res.json() }).toEqual({ status: 403, body: { error: 'origin_not_allowed', message } });
      }
      for (const res of Object.values(r)) expect(res.headers.get('access-control-allow-origin')).toBe(OTHER);
      expect(await usageOf('cors-refused')).toEqual(before);
      expect(await vesselItems(gw.projectId)).toEqual([]);

      // Allowed: the listed origin, a subdomain, and a request without Origin (a server).
      const allowed = await everyRoute(token, 'https://a.b.app.example');
      expect([allowed.messages.status, allowed.chat.status, allowed.usage.status, allowed.prompt.status, allowed.incubate.status]).toEqual([
        200, 200, 200, 200, 202,
      ]);
      const fromServer = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
      expect(fromServer.status).toBe(200);
    } finally {
      await setProjectOrigins(gw.projectId, undefined);
    }
  });

  it("a token's origins claim narrows its project's: another origin is refused, its own served", async () => {
    const token = await tokenFor('cors-claim', ['http://localhost:*']);
    const refused = await fetch(`${gw.url}/usage`, { headers: { origin: PAGE, authorization: `Bearer ${token}` } });
    expect({ status: refused.status, body: await refused.json() }).toEqual({
      status: 403,
      body: { error: 'origin_not_allowed', message: `Requests from origin "${PAGE}" are not allowed by this token (its origins claim)` },
    });
    const served = await fetch(`${gw.url}/usage`, { headers: { origin: 'http://localhost:3000', authorization: `Bearer ${token}` } });
    expect(served.status).toBe(200);
    const bad = await mintToken({ projectId: gw.projectId, userId: 'u', secret: gw.secret, budget: BUDGET, expiresInSeconds: 60, origins: ['nope'] });
    const malformed = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${bad}` } });
    expect(malformed.status).toBe(401);
    expect((await malformed.json()).message).toMatch(/^Token claims invalid: origins\.0 "nope" is not an origin/);
  });
});

describe('the deployment (CORS_ORIGINS)', () => {
  let narrow: TestGateway;
  beforeAll(async () => {
    narrow = await startTestGateway({ env: { CORS_ORIGINS: `${PAGE},https://*.example.org` } });
  });
  afterAll(async () => {
    await narrow?.stop();
  });

  it('serves the pages it lists; refuses others with 403 and no CORS headers, preflight or not', async () => {
    const pre = await fetch(`${narrow.url}/v1/messages`, { method: 'OPTIONS', headers: { origin: OTHER, 'access-control-request-method': 'POST' } });
    expect(pre.status).toBe(403);
    expect(pre.headers.has('access-control-allow-origin')).toBe(false);
    const token = await narrow.token({ user: 'cors-deploy' });
    const refused = await fetch(`${narrow.url}/usage`, { headers: { origin: OTHER, authorization: `Bearer ${token}` } });
    expect({ status: refused.status, body: await refused.json() }).toEqual({
      status: 403,
      body: { error: 'origin_not_allowed', message: `Requests from origin "${OTHER}" are not allowed by this gateway (CORS_ORIGINS)` },
    });
    expect(refused.headers.has('access-control-allow-origin')).toBe(false);
    for (const origin of [PAGE, 'https://www.example.org']) {
      const ok = await fetch(`${narrow.url}/usage`, { headers: { origin, authorization: `Bearer ${token}` } });
      expect(ok.status).toBe(200);
      expect(ok.headers.get('access-control-allow-origin')).toBe(origin);
    }
  });
});
