import type { IncomingMessage } from 'node:http';
import type { APIGatewayProxyEvent } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { apiGatewayEvent } from '../../bin/local/events.ts';
import { apiGatewayResultFrom, requestFromApiGateway } from '../../lambdas/http/api-gateway.ts';
import { bearerToken, Router } from '../../lambdas/http/router.ts';
import { refusalOf } from './refusal.ts';

/**
 * The API Gateway REST adapter (the conjure API, proxy integration): an event as a web Request, a Response as an
 * APIGatewayProxyResult.
 */

/** A REST proxy-integration event as API Gateway delivers it, for `GET /usage` unless told otherwise. */
function restEvent(over: Partial<APIGatewayProxyEvent> = {}): APIGatewayProxyEvent {
  const httpMethod = over.httpMethod ?? 'GET';
  const path = over.path ?? '/usage';
  const headers = over.headers ?? {
    Host: 'abcdefghij.execute-api.eu-west-1.amazonaws.com',
    Authorization: 'Bearer tok',
    'User-Agent': 'curl/8.5.0',
    'X-Forwarded-For': '203.0.113.7',
    'X-Forwarded-Proto': 'https',
  };
  return {
    resource: '/{proxy+}',
    path,
    httpMethod,
    headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v!]])),
    queryStringParameters: null,
    multiValueQueryStringParameters: null,
    pathParameters: { proxy: path.slice(1) },
    stageVariables: null,
    requestContext: {
      accountId: '123456789012',
      apiId: 'abcdefghij',
      authorizer: null,
      domainName: 'abcdefghij.execute-api.eu-west-1.amazonaws.com',
      domainPrefix: 'abcdefghij',
      extendedRequestId: 'Ab1CdEfGhIjKlMn=',
      httpMethod,
      identity: {
        accessKey: null,
        accountId: null,
        apiKey: null,
        apiKeyId: null,
        caller: null,
        clientCert: null,
        cognitoAuthenticationProvider: null,
        cognitoAuthenticationType: null,
        cognitoIdentityId: null,
        cognitoIdentityPoolId: null,
        principalOrgId: null,
        sourceIp: '203.0.113.7',
        user: null,
        userAgent: 'curl/8.5.0',
        userArn: null,
      },
      path: `/prod${path}`,
      protocol: 'HTTP/1.1',
      requestId: 'c6af9ac6-7b61-11e6-9a41-93e8deadbeef',
      requestTimeEpoch: 1_779_962_400_000,
      resourceId: 'abc123',
      resourcePath: '/{proxy+}',
      stage: 'prod',
    },
    body: null,
    isBase64Encoded: false,
    ...over,
  };
}

describe('requestFromApiGateway', () => {
  it('method and path become the Request’s, on the fixed origin (the stage is not part of `path`)', () => {
    const req = requestFromApiGateway(restEvent());
    expect(req.method).toBe('GET');
    expect(req.url).toBe('https://gateway.invalid/usage');
  });

  it('the query is rebuilt from multiValueQueryStringParameters, keeping repeats and special characters', () => {
    const req = requestFromApiGateway(
      restEvent({
        queryStringParameters: { window: 'day', tag: 'b c' },
        multiValueQueryStringParameters: { window: ['day'], tag: ['a', 'b c'], q: ['x&y=z+1 %'] },
      }),
    );
    const params = new URL(req.url).searchParams;
    expect(params.getAll('tag')).toEqual(['a', 'b c']);
    expect(params.get('window')).toBe('day');
    expect(params.get('q')).toBe('x&y=z+1 %');
  });

  it('without multi-value parameters, the single-value ones are used', () => {
    const req = requestFromApiGateway(restEvent({ queryStringParameters: { window: 'month', empty: '' } }));
    const params = new URL(req.url).searchParams;
    expect(params.get('window')).toBe('month');
    expect(params.get('empty')).toBe('');
  });

  it('no parameters (null, or empty objects) → no query string at all', () => {
    expect(requestFromApiGateway(restEvent()).url).toBe('https://gateway.invalid/usage');
    expect(requestFromApiGateway(restEvent({ queryStringParameters: {}, multiValueQueryStringParameters: {} })).url).toBe('https://gateway.invalid/usage');
  });

  it('headers are copied case-insensitively; the Host header never becomes the origin', () => {
    const req = requestFromApiGateway(restEvent({ headers: { Host: 'evil.example', Authorization: 'Bearer tok', 'X-Api-Key': 'k' } }));
    expect(new URL(req.url).origin).toBe('https://gateway.invalid');
    expect(req.headers.get('host')).toBe('evil.example');
    expect(bearerToken(req)).toBe('tok');
    expect(req.headers.get('x-api-key')).toBe('k');
  });

  it('a repeated header is its last value (as implemented: `headers` is read, `multiValueHeaders` is not)', () => {
    // API Gateway puts the last value of a repeated header in `headers` and all of them in `multiValueHeaders`.
    const req = requestFromApiGateway(restEvent({ headers: { Accept: 'text/plain' }, multiValueHeaders: { Accept: ['application/json', 'text/plain'] } }));
    expect(req.headers.get('accept')).toBe('text/plain');
  });

  it('null headers → no headers', () => {
    const req = requestFromApiGateway({ ...restEvent(), headers: null } as unknown as APIGatewayProxyEvent);
    expect([...req.headers.keys()]).toEqual([]);
  });

  it('a text body arrives as sent; a base64 one as its bytes', async () => {
    const text = requestFromApiGateway(restEvent({ httpMethod: 'POST', path: '/prompt', body: '{"prompt":"é 🙂"}' }));
    expect(await text.json()).toEqual({ prompt: 'é 🙂' });
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const binary = requestFromApiGateway(restEvent({ httpMethod: 'PUT', path: '/blob', body: bytes.toString('base64'), isBase64Encoded: true }));
    expect(Buffer.from(await binary.arrayBuffer())).toEqual(bytes);
  });

  it('a null body → a null body; a GET’s body is dropped', () => {
    expect(requestFromApiGateway(restEvent({ httpMethod: 'POST' })).body).toBeNull();
    expect(requestFromApiGateway(restEvent({ body: 'x' })).body).toBeNull();
  });

  it.each(['TRACE', 'CONNECT', 'TRACK'])('%s → a 405 refusal', (httpMethod) => {
    expect(refusalOf(() => requestFromApiGateway(restEvent({ httpMethod })))).toEqual({
      status: 405,
      kind: 'method_not_allowed',
      message: `The ${httpMethod} method is not supported`,
    });
  });

  it('agrees with the events the local runtime builds (bin/local/events.ts)', async () => {
    const incoming = {
      url: '/usage?window=day&tag=a&tag=b',
      method: 'POST',
      httpVersion: '1.1',
      headers: { host: 'localhost:8787', authorization: 'Bearer tok', 'content-type': 'application/json' },
      socket: { remoteAddress: '127.0.0.1' },
    } as unknown as IncomingMessage;
    const req = requestFromApiGateway(apiGatewayEvent(incoming, Buffer.from('{"a":1}')));
    expect(req.method).toBe('POST');
    expect(new URL(req.url).pathname).toBe('/usage');
    expect(new URL(req.url).searchParams.getAll('tag')).toEqual(['a', 'b']);
    expect(bearerToken(req)).toBe('tok');
    expect(await req.json()).toEqual({ a: 1 });
  });
});

describe('apiGatewayResultFrom', () => {
  it('a JSON answer: status, headers and text body', async () => {
    const res = Response.json({ used: { ai: 1 } }, { status: 200, headers: { 'request-id': 'req_1' } });
    expect(await apiGatewayResultFrom(res)).toEqual({
      statusCode: 200,
      headers: { 'content-type': 'application/json', 'request-id': 'req_1' },
      body: '{"used":{"ai":1}}',
    });
  });

  it('a refusal’s status and headers pass through; header names are lower-cased', async () => {
    const res = Response.json({ error: 'user_budget_exhausted' }, { status: 429, headers: { 'Retry-After': '30' } });
    expect(await apiGatewayResultFrom(res)).toMatchObject({ statusCode: 429, headers: { 'retry-after': '30' } });
  });

  it('a repeated header is one comma-joined value', async () => {
    const headers = new Headers();
    headers.append('vary', 'accept');
    headers.append('vary', 'authorization');
    expect((await apiGatewayResultFrom(new Response('', { headers }))).headers).toMatchObject({ vary: 'accept, authorization' });
  });

  it('UTF-8 text survives', async () => {
    expect((await apiGatewayResultFrom(new Response('用户 🙂 é'))).body).toBe('用户 🙂 é');
  });

  it('no body → an empty string body', async () => {
    expect(await apiGatewayResultFrom(new Response(null, { status: 204 }))).toEqual({ statusCode: 204, headers: {}, body: '' });
  });

  it('a Request through the adapters and a router comes back as a result', async () => {
    const router = new Router().on('GET', '/usage', (req) => Response.json({ token: bearerToken(req), window: new URL(req.url).searchParams.get('window') }));
    const event = restEvent({ path: '//usage/', multiValueQueryStringParameters: { window: ['day'] } });
    const result = await apiGatewayResultFrom(await router.handle(requestFromApiGateway(event)));
    expect(result).toMatchObject({ statusCode: 200, body: '{"token":"tok","window":"day"}' });
  });

  // A binary body is base64-encoded (read as text, invalid UTF-8 would become U+FFFD).
  it('a binary answer is base64-encoded, byte for byte', async () => {
    const bytes = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0xff, 0xfe, 0x80]);
    const result = await apiGatewayResultFrom(new Response(bytes, { headers: { 'content-type': 'image/png' } }));
    expect(result.isBase64Encoded).toBe(true);
    expect(Buffer.from(result.body, 'base64')).toEqual(bytes);
  });

  // Every Set-Cookie survives, in multiValueHeaders (one header value cannot hold several).
  it('keeps every Set-Cookie of the Response', async () => {
    const headers = new Headers();
    headers.append('set-cookie', 'a=1; Path=/');
    headers.append('set-cookie', 'b=2; Path=/');
    const result = await apiGatewayResultFrom(new Response('', { headers }));
    const cookies = [...(result.multiValueHeaders?.['set-cookie'] ?? []), result.headers?.['set-cookie']].filter(Boolean);
    expect(cookies).toContain('a=1; Path=/');
    expect(cookies).toContain('b=2; Path=/');
  });
});
