import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { apiGatewayConnectionSender, webSocketEventFrom, webSocketResult, type WebSocketLambdaEvent } from '../../lambdas/http/websocket.ts';

// Events shaped as API Gateway delivers them (AWS documentation samples, ids made up).
const requestContext = {
  extendedRequestId: 'Sn6P2F3aoAMFbGw=',
  requestTime: '22/Nov/2026:14:00:00 +0000',
  messageDirection: 'IN' as const,
  stage: 'dev',
  connectedAt: 1795356000000,
  requestTimeEpoch: 1795356000123,
  identity: { sourceIp: '203.0.113.7', userAgent: 'node' },
  requestId: 'Sn6P2F3aoAMFbGw=',
  domainName: 'abc123.execute-api.eu-west-1.amazonaws.com',
  connectionId: 'Sn6P2cdGoAMCJhw=',
  apiId: 'abc123',
};

const connectEvent: WebSocketLambdaEvent = {
  headers: {
    Host: 'abc123.execute-api.eu-west-1.amazonaws.com',
    'Sec-WebSocket-Extensions': 'permessage-deflate; client_max_window_bits',
    'Sec-WebSocket-Key': 'dGhlIHNhbXBsZSBub25jZQ==',
    'Sec-WebSocket-Protocol': 'gateway.v1',
    'Sec-WebSocket-Version': '13',
    Authorization: 'Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig',
    'X-Forwarded-For': '203.0.113.7',
  },
  multiValueHeaders: { Host: ['abc123.execute-api.eu-west-1.amazonaws.com'] },
  queryStringParameters: { token: 'abc', session: 's1' },
  multiValueQueryStringParameters: { token: ['abc'], session: ['s1'], tag: ['a', 'b'] },
  requestContext: { ...requestContext, routeKey: '$connect', eventType: 'CONNECT' },
  isBase64Encoded: false,
};

describe('webSocketEventFrom', () => {
  it('$connect → connect, with the handshake headers and the whole query string', () => {
    const event = webSocketEventFrom(connectEvent);
    expect(event).toMatchObject({
      kind: 'connect',
      connectionId: 'Sn6P2cdGoAMCJhw=',
      requestId: 'Sn6P2F3aoAMFbGw=',
      callbackUrl: 'https://abc123.execute-api.eu-west-1.amazonaws.com/dev',
      sourceIp: '203.0.113.7',
    });
    if (event.kind !== 'connect') throw new Error('not a connect');
    expect(event.headers.get('authorization')).toBe('Bearer eyJhbGciOiJIUzI1NiJ9.e30.sig');
    expect(event.headers.get('sec-websocket-protocol')).toBe('gateway.v1');
    expect([...event.query]).toEqual([
      ['token', 'abc'],
      ['session', 's1'],
      ['tag', 'a'],
      ['tag', 'b'],
    ]);
  });

  it('$connect without a query string or multi-value parameters', () => {
    const { multiValueQueryStringParameters: _m, queryStringParameters: _q, ...bare } = connectEvent;
    const event = webSocketEventFrom({ ...bare, queryStringParameters: { token: 'only' } });
    expect(event.kind === 'connect' && [...event.query]).toEqual([['token', 'only']]);
    const none = webSocketEventFrom({ ...bare, headers: undefined });
    expect(none.kind === 'connect' && [...none.query, ...none.headers]).toEqual([]);
  });

  it('$disconnect → disconnect, with the close code and reason', () => {
    const event = webSocketEventFrom({
      headers: { Host: 'abc123.execute-api.eu-west-1.amazonaws.com', 'x-api-key': '', 'X-Forwarded-For': '', 'x-restapi': '' },
      requestContext: { ...requestContext, routeKey: '$disconnect', eventType: 'DISCONNECT', disconnectStatusCode: 1001, disconnectReason: 'Going away' },
      isBase64Encoded: false,
    });
    expect(event).toEqual({
      kind: 'disconnect',
      connectionId: 'Sn6P2cdGoAMCJhw=',
      requestId: 'Sn6P2F3aoAMFbGw=',
      callbackUrl: 'https://abc123.execute-api.eu-west-1.amazonaws.com/dev',
      statusCode: 1001,
      reason: 'Going away',
    });
  });

  it('$default → message, text as a string and binary (base64-delivered) as bytes; a custom route keeps its key', () => {
    const message = (over: Partial<WebSocketLambdaEvent>) =>
      webSocketEventFrom({
        requestContext: { ...requestContext, routeKey: '$default', messageId: 'Sn6P2dZvoAMCF5Q=', eventType: 'MESSAGE' },
        body: '{"type":"prompt","text":"hi"}',
        isBase64Encoded: false,
        ...over,
      });
    expect(message({})).toMatchObject({ kind: 'message', route: '$default', data: '{"type":"prompt","text":"hi"}', connectionId: 'Sn6P2cdGoAMCJhw=' });
    const binary = message({ body: Buffer.from([0, 1, 2, 255]).toString('base64'), isBase64Encoded: true });
    expect(binary.kind === 'message' && [...(binary.data as Uint8Array)]).toEqual([0, 1, 2, 255]);
    const custom = message({ requestContext: { ...requestContext, routeKey: 'prompt', messageId: 'x', eventType: 'MESSAGE' } });
    expect(custom).toMatchObject({ kind: 'message', route: 'prompt' });
    expect(message({ body: undefined })).toMatchObject({ kind: 'message', data: '' });
  });

  it('an unknown event type is refused', () => {
    expect(() => webSocketEventFrom({ ...connectEvent, requestContext: { ...connectEvent.requestContext, eventType: 'PING' as never } })).toThrow(
      /Unknown WebSocket event type PING/,
    );
  });

  it('webSocketResult: 200 accepts, anything else refuses the handshake', () => {
    expect(webSocketResult()).toEqual({ statusCode: 200 });
    expect(webSocketResult(401, '{"error":"Missing token"}')).toEqual({ statusCode: 401, body: '{"error":"Missing token"}' });
  });
});

describe('apiGatewayConnectionSender against a stand-in of the management API', () => {
  let server: Server;
  let endpoint: string;
  const calls: Array<{ method: string; path: string; body: string; signed: boolean }> = [];

  beforeAll(async () => {
    vi.stubEnv('AWS_REGION', 'eu-west-1');
    vi.stubEnv('AWS_ACCESS_KEY_ID', 'test');
    vi.stubEnv('AWS_SECRET_ACCESS_KEY', 'test');
    resetInstanceState();
    server = createServer((req: IncomingMessage, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const path = req.url ?? '';
        calls.push({
          method: req.method ?? '',
          path,
          body: Buffer.concat(chunks).toString('utf8'),
          signed: /AWS4-HMAC-SHA256/.test(req.headers.authorization ?? ''),
        });
        const gone = decodeURIComponent(path).endsWith('/gone=');
        const status = gone ? 410 : req.method === 'DELETE' ? 204 : 200;
        res.writeHead(status, { 'content-type': 'application/json', ...(gone ? { 'x-amzn-errortype': 'GoneException' } : {}) });
        res.end(gone ? '{"message":"Gone"}' : '');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
    endpoint = `http://127.0.0.1:${(server.address() as { port: number }).port}/dev`;
  });
  afterAll(async () => {
    vi.unstubAllEnvs();
    resetInstanceState();
    await new Promise<void>((r) => server.close(() => r()));
  });

  it('posts text and bytes to @connections/<id>, signed; a gone connection is false, not an error', async () => {
    const sender = apiGatewayConnectionSender(endpoint);
    expect(await sender.send('Sn6P2cdGoAMCJhw=', '{"type":"delta","text":"hé"}')).toBe(true);
    expect(await sender.send('Sn6P2cdGoAMCJhw=', new Uint8Array([104, 105]))).toBe(true);
    expect(await sender.send('gone=', 'late')).toBe(false);
    expect(calls.slice(0, 3).map(({ method, path, body, signed }) => ({ method, path: decodeURIComponent(path), body, signed }))).toEqual([
      { method: 'POST', path: '/dev/@connections/Sn6P2cdGoAMCJhw=', body: '{"type":"delta","text":"hé"}', signed: true },
      { method: 'POST', path: '/dev/@connections/Sn6P2cdGoAMCJhw=', body: 'hi', signed: true },
      { method: 'POST', path: '/dev/@connections/gone=', body: 'late', signed: true },
    ]);
  });

  it('closes with DELETE @connections/<id>; closing a gone connection is fine', async () => {
    calls.length = 0;
    const sender = apiGatewayConnectionSender(endpoint);
    await sender.close('Sn6P2cdGoAMCJhw=');
    await sender.close('gone=');
    expect(calls.map((c) => `${c.method} ${decodeURIComponent(c.path)}`)).toEqual([
      'DELETE /dev/@connections/Sn6P2cdGoAMCJhw=',
      'DELETE /dev/@connections/gone=',
    ]);
  });

  it('another failure is thrown', async () => {
    const sender = apiGatewayConnectionSender('http://127.0.0.1:1/dev');
    await expect(sender.send('x', 'y')).rejects.toThrow();
  });
});
