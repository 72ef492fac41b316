import { describe, expect, it } from 'vitest';
import { bearerToken, Router } from '../../lambdas/http/router.ts';
import { refusalFrom, rejectionOf, renderedHeaders } from './refusal.ts';

/**
 * Router.on / Router.handle and bearerToken, directly (test/http/edge.test.ts covers the same seams end to end,
 * through a running gateway). Routing looks at the normalised path alone; a path with no route is a 404 and a known
 * path asked with another method a 405, both thrown as refusals for the app to render in its own envelope.
 */

const ORIGIN = 'https://gateway.invalid';

/** A router shaped like the proxy's, whose handlers answer with what they were called with. */
function proxyLikeRouter(): Router {
  const answer = (route: string) => (req: Request, params: Record<string, string>) => Response.json({ route, method: req.method, params, url: req.url });
  return new Router()
    .on('POST', '/v1/messages', answer('messages'))
    .on('POST', '/v1/messages/count_tokens', answer('count_tokens'))
    .on('GET', '/v1/models', answer('models'))
    .on('GET', '/v1/models/{id}', answer('model'))
    .on('GET', '/usage', answer('usage'));
}

interface Answer {
  route: string;
  method: string;
  params: Record<string, string>;
  url: string;
}

async function route(method: string, path: string, router = proxyLikeRouter()): Promise<Answer> {
  const res = await router.handle(new Request(`${ORIGIN}${path}`, { method }));
  expect(res.status).toBe(200);
  return (await res.json()) as Answer;
}

const refused = (method: string, path: string, router = proxyLikeRouter()) => refusalFrom(router.handle(new Request(`${ORIGIN}${path}`, { method })));

describe('Router: matching', () => {
  it('routes an exact path and method to its handler, with the Request itself and no params', async () => {
    const seen: Request[] = [];
    const router = new Router().on('GET', '/usage', (req, params) => {
      seen.push(req);
      return Response.json(params);
    });
    const req = new Request(`${ORIGIN}/usage?window=day`);
    const res = await router.handle(req);
    expect(await res.json()).toEqual({});
    expect(seen).toEqual([req]);
  });

  it('on() chains and the first matching route wins', async () => {
    const router = new Router();
    expect(router.on('GET', '/a', () => new Response('first'))).toBe(router);
    router.on('GET', '/a', () => new Response('second'));
    expect(await (await router.handle(new Request(`${ORIGIN}/a`))).text()).toBe('first');
  });

  it('a sibling path is not a prefix match: /v1/messages/count_tokens is its own route', async () => {
    expect((await route('POST', '/v1/messages')).route).toBe('messages');
    expect((await route('POST', '/v1/messages/count_tokens')).route).toBe('count_tokens');
    expect(await refused('POST', '/v1/messages/other')).toMatchObject({ status: 404 });
    expect(await refused('POST', '/v1/messagesx')).toMatchObject({ status: 404 });
  });

  it('a handler that answers synchronously or asynchronously is awaited alike', async () => {
    const router = new Router().on('GET', '/sync', () => new Response('s')).on('GET', '/async', async () => new Response('a'));
    expect(await (await router.handle(new Request(`${ORIGIN}/sync`))).text()).toBe('s');
    expect(await (await router.handle(new Request(`${ORIGIN}/async`))).text()).toBe('a');
  });

  it('a handler’s own failure propagates unchanged (the app, not the router, turns it into a 500)', async () => {
    const boom = new Error('boom');
    const router = new Router().on('GET', '/x', () => {
      throw boom;
    });
    await expect(router.handle(new Request(`${ORIGIN}/x`))).rejects.toBe(boom);
  });

  it('the query string plays no part in routing and reaches the handler intact', async () => {
    const answer = await route('GET', '/v1/models?limit=1&after_id=x');
    expect(answer.route).toBe('models');
    expect(new URL(answer.url).searchParams.get('limit')).toBe('1');
  });
});

describe('Router: {param} segments', () => {
  it('captures one segment, percent-decoded', async () => {
    expect((await route('GET', '/v1/models/claude-sonnet-4-6')).params).toEqual({ id: 'claude-sonnet-4-6' });
    expect((await route('GET', '/v1/models/gpt%204.1')).params).toEqual({ id: 'gpt 4.1' });
    expect((await route('GET', '/v1/models/%E7%94%A8%E6%88%B7')).params).toEqual({ id: '用户' });
  });

  it('an encoded slash stays inside the one segment (decoded to "/"), a raw slash does not match', async () => {
    expect((await route('GET', '/v1/models/openai%2Fgpt-4.1')).params).toEqual({ id: 'openai/gpt-4.1' });
    expect(await refused('GET', '/v1/models/openai/gpt-4.1')).toMatchObject({ status: 404 });
  });

  it('keeps the case of the parameter (model ids are case-sensitive)', async () => {
    expect((await route('GET', '/V1/models/Claude-X')).params).toEqual({ id: 'Claude-X' });
  });

  it('an empty segment is not a parameter: /v1/models/ is the list route (trailing slash)', async () => {
    const answer = await route('GET', '/v1/models/');
    expect(answer).toMatchObject({ route: 'models', params: {} });
  });

  it('a parameter followed by a trailing slash still matches, without the slash', async () => {
    expect((await route('GET', '/v1/models/abc/')).params).toEqual({ id: 'abc' });
  });

  it('several parameters in one route', async () => {
    const router = new Router().on('GET', '/p/{project}/u/{user}', (_req, params) => Response.json(params));
    const res = await router.handle(new Request(`${ORIGIN}/p/a%20b/u/c`));
    expect(await res.json()).toEqual({ project: 'a b', user: 'c' });
  });

  it('malformed percent-encoding in a parameter is a 400 invalid_request, not a crash', async () => {
    expect(await refused('GET', '/v1/models/%FF')).toEqual({
      status: 400,
      kind: 'invalid_request',
      message: 'The path segment "%FF" is not valid percent-encoded UTF-8',
    });
    expect(await refused('GET', '/v1/models/abc%')).toMatchObject({ status: 400, message: 'The path segment "abc%" is not valid percent-encoded UTF-8' });
  });

  it('the parameter is decoded only once a route is chosen: a bad segment on a wrong method is a 405, not a 400', async () => {
    expect(await refused('POST', '/v1/models/%FF')).toMatchObject({ status: 405 });
  });

  it('a segment that is not a parameter is compared encoded, not decoded (/%75sage is not /usage)', async () => {
    expect(await refused('GET', '/%75sage')).toMatchObject({ status: 404, message: 'No route for GET /%75sage' });
  });
});

describe('Router: normalised paths', () => {
  it.each(['//v1/messages', '/v1//messages', '///v1///messages', '/V1/messages', '/v1/messages/', '//V1//messages//'])(
    '%s routes as /v1/messages',
    async (path) => {
      expect((await route('POST', path)).route).toBe('messages');
    },
  );

  it('only the /v1 prefix is case-insensitive: /V1/MESSAGES is a 404 that names the normalised path', async () => {
    expect(await refused('POST', '/V1/MESSAGES')).toEqual({
      status: 404,
      kind: 'not_found',
      message: 'No route for POST /v1/MESSAGES',
    });
    expect(await refused('GET', '/USAGE')).toMatchObject({ status: 404, message: 'No route for GET /USAGE' });
  });

  it('dot segments are resolved by the URL before routing', async () => {
    expect((await route('GET', '/v1/../usage')).route).toBe('usage');
    expect((await route('GET', '/./v1/models')).route).toBe('models');
  });

  it('the Host of the request URL plays no part', async () => {
    const router = proxyLikeRouter();
    const res = await router.handle(new Request('http://evil.example:8080/v1/models'));
    expect(((await res.json()) as Answer).route).toBe('models');
  });
});

describe('Router: 404 and 405', () => {
  it('an unknown path is a 404 not_found naming the method and path', async () => {
    expect(await refused('GET', '/nope')).toEqual({ status: 404, kind: 'not_found', message: 'No route for GET /nope' });
    expect(await refused('DELETE', '/')).toMatchObject({ status: 404, message: 'No route for DELETE /' });
  });

  it('a known path with another method is a 405 method_not_allowed', async () => {
    expect(await refused('GET', '/v1/messages')).toEqual({
      status: 405,
      kind: 'method_not_allowed',
      message: 'GET is not allowed on /v1/messages',
    });
    expect(await refused('PUT', '/v1/models/abc')).toMatchObject({ status: 405, message: 'PUT is not allowed on /v1/models/abc' });
  });

  it('the 405 message names the normalised path, not the raw one', async () => {
    expect(await refused('DELETE', '//V1/messages/')).toMatchObject({ status: 405, message: 'DELETE is not allowed on /v1/messages/' });
  });

  it('methods are compared exactly: a lower-case extension method is not the route’s', async () => {
    // Fetch upper-cases only the six standard methods; `propfind` stays `propfind`, and HTTP methods are case-sensitive.
    const router = new Router().on('PROPFIND', '/x', () => new Response('ok'));
    expect(await refusalFrom(router.handle(new Request(`${ORIGIN}/x`, { method: 'propfind' })))).toMatchObject({
      status: 405,
      message: 'propfind is not allowed on /x',
    });
    expect((await router.handle(new Request(`${ORIGIN}/x`, { method: 'PROPFIND' }))).status).toBe(200);
    // The six standard ones are normalised by Request itself, so `get` is GET.
    expect((await route('get', '/v1/models')).route).toBe('models');
  });

  it('HEAD is not implied by GET: HEAD on a GET route is a 405 (as implemented)', async () => {
    expect(await refused('HEAD', '/v1/models')).toEqual({
      status: 405,
      kind: 'method_not_allowed',
      message: 'HEAD is not allowed on /v1/models',
    });
  });

  it('the router gives OPTIONS no special treatment (httpApp answers preflights, http/cors.ts): 405 on a known path, 404 elsewhere', async () => {
    expect(await refused('OPTIONS', '/v1/messages')).toMatchObject({ status: 405, message: 'OPTIONS is not allowed on /v1/messages' });
    expect(await refused('OPTIONS', '/elsewhere')).toMatchObject({ status: 404, message: 'No route for OPTIONS /elsewhere' });
  });

  it('a path matched by two routes with other methods is still one 405', async () => {
    const router = new Router().on('GET', '/r', () => new Response()).on('POST', '/r', () => new Response());
    expect(await refusalFrom(router.handle(new Request(`${ORIGIN}/r`, { method: 'DELETE' })))).toMatchObject({ status: 405 });
  });

  it('an empty router answers 404 for everything', async () => {
    expect(await refused('GET', '/', new Router())).toMatchObject({ status: 404, message: 'No route for GET /' });
  });

  // RFC 9110 §15.5.6: a 405 must carry an Allow header naming the path's methods, in both envelopes.
  it('a 405 names the allowed methods in an `allow` header, in both envelopes', async () => {
    const single = renderedHeaders(await rejectionOf(proxyLikeRouter().handle(new Request(`${ORIGIN}/v1/messages`))));
    expect(single.proxy.get('allow')).toBe('POST');
    expect(single.conjure.get('allow')).toBe('POST');
    const router = new Router().on('GET', '/r', () => new Response()).on('POST', '/r', () => new Response());
    const both = renderedHeaders(await rejectionOf(router.handle(new Request(`${ORIGIN}/r`, { method: 'DELETE' }))));
    expect(both.proxy.get('allow')?.split(/,\s*/).sort()).toEqual(['GET', 'POST']);
  });

  // Route literals are escaped: a `.` in a route path is a dot, not a pattern character.
  it('a route literal matches itself only (a dot is a dot)', async () => {
    const router = new Router().on('GET', '/jwks.json', () => new Response('ok'));
    expect((await router.handle(new Request(`${ORIGIN}/jwks.json`))).status).toBe(200);
    expect(await refusalFrom(router.handle(new Request(`${ORIGIN}/jwksXjson`)))).toMatchObject({ status: 404 });
  });
});

describe('bearerToken', () => {
  const withAuth = (authorization?: string, more: Record<string, string> = {}) =>
    new Request(ORIGIN, { headers: authorization === undefined ? more : { authorization, ...more } });

  it.each([
    ['Bearer abc', 'abc'],
    ['Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.sig-_x', 'eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ1In0.sig-_x'],
    ['bearer abc', 'abc'],
    ['BEARER abc', 'abc'],
    ['bEaReR abc', 'abc'],
    ['Bearer    abc', 'abc'],
    ['Bearer\tabc', 'abc'],
    ['Bearer abc   ', 'abc'],
    ['   Bearer abc', 'abc'], // Headers strips surrounding whitespace from values
  ])('%j → %j', (header, token) => {
    expect(bearerToken(withAuth(header))).toBe(token);
  });

  it.each([['Basic dXNlcjpwYXNz'], ['Token abc'], ['Bearerabc'], ['Bearer'], ['Bearer '], ['Bearer    '], ['Bearer abc def'], ['abc'], ['']])(
    '%j → undefined',
    (header) => {
      expect(bearerToken(withAuth(header))).toBeUndefined();
    },
  );

  it('no Authorization header → undefined, whatever x-api-key holds', () => {
    expect(bearerToken(withAuth())).toBeUndefined();
    expect(bearerToken(withAuth(undefined, { 'x-api-key': 'Bearer abc' }))).toBeUndefined();
  });

  it('the header name is case-insensitive (Headers)', () => {
    expect(bearerToken(new Request(ORIGIN, { headers: { AUTHORIZATION: 'Bearer abc' } }))).toBe('abc');
  });
});
