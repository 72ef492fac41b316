import type { IncomingMessage } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { ApiGatewayManagementApiClient, GetConnectionCommand } from '@aws-sdk/client-apigatewaymanagementapi';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { WebSocket, type RawData } from 'ws';
import { startGateway, type RunningGateway } from '../../bin/local/runtime.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';
import { apiGatewayConnectionSender, type WebSocketLambdaEvent } from '../../lambdas/http/websocket.ts';
import { WEBSOCKET_ECHO_FUNCTION, webSocketEcho } from './fixtures/websocket-echo.ts';

async function until(cond: () => boolean, timeoutMs = 8000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await sleep(20);
  }
}

type Refused = { status: number; body: string };

/** Opens a client; rejects with the HTTP answer when the upgrade is refused ('unexpected-response'). */
function connect(url: string, headers: Record<string, string> = {}): Promise<WebSocket> {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, { headers });
    ws.once('open', () => resolve(ws));
    ws.once('unexpected-response', (_req, res: IncomingMessage) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () =>
        reject(Object.assign(new Error(`refused ${res.statusCode}`), { status: res.statusCode, body: Buffer.concat(chunks).toString('utf8') })),
      );
    });
    ws.once('error', reject);
  });
}

async function refusal(url: string, headers: Record<string, string> = {}): Promise<Refused> {
  const err = (await connect(url, headers).then(
    () => {
      throw new Error('the upgrade was accepted');
    },
    (e: unknown) => e,
  )) as Refused;
  return { status: err.status, body: err.body };
}

/** The next frame the client receives. */
function nextFrame(ws: WebSocket): Promise<{ data: string; isBinary: boolean }> {
  return new Promise((resolve) => ws.once('message', (data: RawData, isBinary) => resolve({ data: (data as Buffer).toString('utf8'), isBinary })));
}

function closed(ws: WebSocket): Promise<{ code: number; reason: string }> {
  return new Promise((resolve) => ws.once('close', (code, reason) => resolve({ code, reason: reason.toString('utf8') })));
}

async function echo(ws: WebSocket, data: string | Buffer): Promise<unknown> {
  const frame = nextFrame(ws);
  ws.send(data);
  const got = await frame;
  expect(got.isBinary).toBe(false);
  return JSON.parse(got.data) as unknown;
}

const events = () => webSocketEcho().events;
const ofType = (type: 'CONNECT' | 'MESSAGE' | 'DISCONNECT', connectionId?: string): WebSocketLambdaEvent[] =>
  events().filter((e) => e.requestContext.eventType === type && (connectionId === undefined || e.requestContext.connectionId === connectionId));
/** The $connect event whose query string has `n` (each test connects with its own). */
const connectOf = (n: string): WebSocketLambdaEvent => {
  const found = ofType('CONNECT').find((e) => e.queryStringParameters?.n === n || e.headers?.['X-N'] === n);
  if (!found) throw new Error(`no $connect for ${n}`);
  return found;
};

const API_GATEWAY_ID = /^[A-Za-z0-9+/]{15}=$/;

describe('startGateway serves a websocket function at /ws', () => {
  let gw: RunningGateway;
  let stopped = false;
  let port: number;
  const errors: string[] = [];

  beforeAll(async () => {
    vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void errors.push(args.map(String).join(' ')));
    gw = await startGateway({
      dynamoEndpoint: inject('dynamoEndpoint'),
      tablePrefix: 'wsfn',
      simulateUpstreams: true,
      // The manifest's own websocket function (Sessions) makes way: the local server has one /ws.
      functions: [...FUNCTIONS.filter((f) => f.trigger.kind !== 'websocket'), WEBSOCKET_ECHO_FUNCTION],
    });
    port = Number(new URL(gw.url).port);
  });
  afterAll(async () => {
    if (!stopped) await gw?.stop();
    vi.restoreAllMocks();
  });

  it('exposes the ws URL and the management endpoint', () => {
    expect(gw.websocket).toEqual({ url: `ws://127.0.0.1:${port}/ws`, managementEndpoint: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+\/local$/) });
    expect(gw.functions.find((f) => f.id === 'WebSocketEcho')).toMatchObject({ kind: 'websocket', path: '/ws', functionName: 'web-socket-echo' });
    expect(process.env.WEBSOCKET_CALLBACK_URL).toBe(gw.websocket!.managementEndpoint);
  });

  it('a bad token is refused with 401 on the upgrade; the $connect event is the one API Gateway sends', async () => {
    const before = events().length;
    const refused = await refusal(`${gw.websocket!.url}?token=bad&n=bad&tag=a&tag=b`, { 'X-Test': 'yes' });
    expect(refused).toEqual({ status: 401, body: '{"error":"unauthorized","message":"bad token"}' });
    expect(events()).toHaveLength(before + 1);
    const event = connectOf('bad');
    expect(event).toEqual({
      headers: {
        Host: `127.0.0.1:${port}`,
        Connection: 'Upgrade',
        Upgrade: 'websocket',
        'Sec-WebSocket-Version': '13',
        'Sec-WebSocket-Key': expect.stringMatching(/^[A-Za-z0-9+/]{22}==$/),
        'Sec-WebSocket-Extensions': 'permessage-deflate; client_max_window_bits',
        'X-Test': 'yes',
      },
      multiValueHeaders: {
        Host: [`127.0.0.1:${port}`],
        Connection: ['Upgrade'],
        Upgrade: ['websocket'],
        'Sec-WebSocket-Version': ['13'],
        'Sec-WebSocket-Key': [event.headers!['Sec-WebSocket-Key']],
        'Sec-WebSocket-Extensions': ['permessage-deflate; client_max_window_bits'],
        'X-Test': ['yes'],
      },
      queryStringParameters: { token: 'bad', n: 'bad', tag: 'b' },
      multiValueQueryStringParameters: { token: ['bad'], n: ['bad'], tag: ['a', 'b'] },
      requestContext: {
        routeKey: '$connect',
        eventType: 'CONNECT',
        connectionId: expect.stringMatching(API_GATEWAY_ID),
        requestId: expect.stringMatching(API_GATEWAY_ID),
        extendedRequestId: expect.stringMatching(API_GATEWAY_ID),
        apiId: 'local',
        domainName: `127.0.0.1:${port}`,
        stage: 'local',
        connectedAt: expect.any(Number),
        requestTimeEpoch: event.requestContext.connectedAt,
        requestTime: expect.stringMatching(/^\d\d\/[A-Z][a-z]{2}\/\d{4}:\d\d:\d\d:\d\d \+0000$/),
        messageDirection: 'IN',
        identity: { sourceIp: '127.0.0.1' },
      },
      isBase64Encoded: false,
    });
    expect(Math.abs(event.requestContext.connectedAt - Date.now())).toBeLessThan(10_000);
    // No connection came of it: nothing to disconnect.
    await sleep(100);
    expect(ofType('DISCONNECT', event.requestContext.connectionId)).toEqual([]);
  });

  it('a $connect handler that throws is a 500 on the upgrade, logged; the runtime keeps serving', async () => {
    expect(await refusal(`${gw.websocket!.url}?token=throw&n=throw`)).toEqual({ status: 500, body: '{"message":"Internal server error"}' });
    expect(errors.some((e) => e.includes('web-socket-echo ($connect) failed') && e.includes('connect failed on purpose'))).toBe(true);
    expect(ofType('DISCONNECT', connectOf('throw').requestContext.connectionId)).toEqual([]);
  });

  it('a good token (query or Authorization header) opens; text and binary frames are echoed through PostToConnection', async () => {
    const byQuery = await connect(`${gw.websocket!.url}?token=ok&n=query`);
    const byHeader = await connect(gw.websocket!.url, { Authorization: 'Bearer ok', 'X-N': 'header' });
    try {
      const queryId = connectOf('query').requestContext.connectionId;
      const headerId = connectOf('header').requestContext.connectionId;
      expect(queryId).not.toBe(headerId);
      expect(connectOf('header')).not.toHaveProperty('queryStringParameters');

      expect(await echo(byQuery, 'hello')).toEqual({ connectionId: queryId, route: '$default', body: 'hello', isBase64Encoded: false });
      expect(await echo(byHeader, 'héllo ✓')).toEqual({ connectionId: headerId, route: '$default', body: 'héllo ✓', isBase64Encoded: false });
      expect(await echo(byQuery, Buffer.from([0, 1, 2, 255]))).toEqual({ connectionId: queryId, route: '$default', body: 'AAEC/w==', isBase64Encoded: true });

      const messages = ofType('MESSAGE', queryId);
      expect(messages).toHaveLength(2);
      expect(messages[0]).toEqual({
        requestContext: {
          routeKey: '$default',
          eventType: 'MESSAGE',
          messageId: expect.stringMatching(API_GATEWAY_ID),
          connectionId: queryId,
          requestId: expect.stringMatching(API_GATEWAY_ID),
          extendedRequestId: expect.stringMatching(API_GATEWAY_ID),
          apiId: 'local',
          domainName: `127.0.0.1:${port}`,
          stage: 'local',
          connectedAt: connectOf('query').requestContext.connectedAt,
          requestTimeEpoch: expect.any(Number),
          requestTime: expect.any(String),
          messageDirection: 'IN',
          identity: { sourceIp: '127.0.0.1' },
        },
        body: 'hello',
        isBase64Encoded: false,
      });
      expect(messages[1]).toMatchObject({ body: 'AAEC/w==', isBase64Encoded: true });
    } finally {
      byQuery.close();
      byHeader.close();
    }
  });

  it('a handler that throws on a message is logged; the connection stays open and the next message echoes', async () => {
    const ws = await connect(`${gw.websocket!.url}?token=ok&n=boom`);
    try {
      ws.send('boom');
      expect(await echo(ws, 'after')).toEqual({
        connectionId: connectOf('boom').requestContext.connectionId,
        route: '$default',
        body: 'after',
        isBase64Encoded: false,
      });
      await until(() => errors.some((e) => e.includes('web-socket-echo ($default) failed') && e.includes('boom on purpose')));
      expect(ws.readyState).toBe(WebSocket.OPEN);
    } finally {
      ws.close();
    }
  });

  it('"close-me" closes through DeleteConnection: the client sees 1000, one $disconnect; the id is gone (410 → false)', async () => {
    const ws = await connect(`${gw.websocket!.url}?token=ok&n=close-me`);
    const id = connectOf('close-me').requestContext.connectionId;
    const close = closed(ws);
    ws.send('close-me');
    expect(await close).toEqual({ code: 1000, reason: '' });
    await until(() => ofType('DISCONNECT', id).length > 0);
    await sleep(150);
    expect(ofType('DISCONNECT', id)).toHaveLength(1);
    expect(ofType('DISCONNECT', id)[0]).toEqual({
      headers: { Host: `127.0.0.1:${port}`, 'X-Forwarded-For': '127.0.0.1' },
      multiValueHeaders: { Host: [`127.0.0.1:${port}`], 'X-Forwarded-For': ['127.0.0.1'] },
      requestContext: {
        routeKey: '$disconnect',
        eventType: 'DISCONNECT',
        connectionId: id,
        disconnectStatusCode: 1000,
        disconnectReason: '',
        requestId: expect.stringMatching(API_GATEWAY_ID),
        extendedRequestId: expect.stringMatching(API_GATEWAY_ID),
        apiId: 'local',
        domainName: `127.0.0.1:${port}`,
        stage: 'local',
        connectedAt: connectOf('close-me').requestContext.connectedAt,
        requestTimeEpoch: expect.any(Number),
        requestTime: expect.any(String),
        messageDirection: 'IN',
        identity: { sourceIp: '127.0.0.1' },
      },
      isBase64Encoded: false,
    });
    const sender = apiGatewayConnectionSender(gw.websocket!.managementEndpoint);
    expect(await sender.send(id, 'x')).toBe(false);
    await expect(sender.close(id)).resolves.toBeUndefined();
  });

  it('the client closing with 4000 "bye" is a $disconnect with that code and reason', async () => {
    const ws = await connect(`${gw.websocket!.url}?token=ok&n=bye`);
    const id = connectOf('bye').requestContext.connectionId;
    ws.close(4000, 'bye');
    await until(() => ofType('DISCONNECT', id).length > 0);
    expect(ofType('DISCONNECT', id)).toHaveLength(1);
    expect(ofType('DISCONNECT', id)[0]!.requestContext).toMatchObject({ disconnectStatusCode: 4000, disconnectReason: 'bye' });
  });

  it('a frame over 128 KiB closes the connection with 1009, and that is a $disconnect', async () => {
    const ws = await connect(`${gw.websocket!.url}?token=ok&n=big`);
    const id = connectOf('big').requestContext.connectionId;
    const close = closed(ws);
    ws.send('x'.repeat(200 * 1024));
    expect((await close).code).toBe(1009);
    await until(() => ofType('DISCONNECT', id).length > 0);
    expect(ofType('DISCONNECT', id)).toHaveLength(1);
    expect(ofType('DISCONNECT', id)[0]!.requestContext.disconnectStatusCode).toBe(1009);
    expect(ofType('MESSAGE', id)).toEqual([]);
  });

  it('PostToConnection sends text or binary frames; GetConnection answers a live connection with its identity; a closed one is 410 GoneException', async () => {
    const ws = await connect(`${gw.websocket!.url}?token=ok&n=get`, { 'User-Agent': 'ws-test/1' });
    const id = connectOf('get').requestContext.connectionId;
    const client = new ApiGatewayManagementApiClient({ endpoint: gw.websocket!.managementEndpoint, region: 'us-east-1' });
    try {
      const { $metadata, ...got } = await client.send(new GetConnectionCommand({ ConnectionId: id }));
      expect($metadata.httpStatusCode).toBe(200);
      expect(got).toEqual({
        ConnectedAt: new Date(connectOf('get').requestContext.connectedAt),
        Identity: { SourceIp: '127.0.0.1', UserAgent: 'ws-test/1' },
        LastActiveAt: new Date(connectOf('get').requestContext.connectedAt),
      });
      expect(connectOf('get').requestContext.identity).toEqual({ sourceIp: '127.0.0.1', userAgent: 'ws-test/1' });
      // PostToConnection: UTF-8 bytes arrive as a text frame, anything else as a binary one.
      const sender = apiGatewayConnectionSender(gw.websocket!.managementEndpoint);
      let frame = new Promise<{ data: Buffer; isBinary: boolean }>((r) =>
        ws.once('message', (data: RawData, isBinary) => r({ data: data as Buffer, isBinary })),
      );
      expect(await sender.send(id, 'plain ✓')).toBe(true);
      expect(await frame).toEqual({ data: Buffer.from('plain ✓'), isBinary: false });
      frame = new Promise((r) => ws.once('message', (data: RawData, isBinary) => r({ data: data as Buffer, isBinary })));
      expect(await sender.send(id, new Uint8Array([0xff, 0x00, 0xfe]))).toBe(true);
      expect(await frame).toEqual({ data: Buffer.from([0xff, 0x00, 0xfe]), isBinary: true });
      const close = closed(ws);
      ws.close();
      await close;
      await until(() => ofType('DISCONNECT', id).length > 0);
      const gone = await client.send(new GetConnectionCommand({ ConnectionId: id })).catch((e: unknown) => e);
      expect(gone).toMatchObject({ name: 'GoneException', message: `Connection ${id} is gone`, $metadata: { httpStatusCode: 410 } });
    } finally {
      client.destroy();
    }
  });

  it('an upgrade on another path is answered 404', async () => {
    const before = events().length;
    expect((await refusal(`ws://127.0.0.1:${port}/other?token=ok`)).status).toBe(404);
    expect(events()).toHaveLength(before);
  });

  it('stop() with a client still connected completes within seconds; the client sees 1001 and $disconnect runs', async () => {
    const ws = await connect(`${gw.websocket!.url}?token=ok&n=stop`);
    const id = connectOf('stop').requestContext.connectionId;
    const close = closed(ws);
    const started = Date.now();
    stopped = true;
    await gw.stop();
    expect(Date.now() - started).toBeLessThan(5000);
    expect((await close).code).toBe(1001);
    expect(ofType('DISCONNECT', id)).toHaveLength(1);
    expect(ofType('DISCONNECT', id)[0]!.requestContext.disconnectStatusCode).toBe(1001);
    expect(process.env.WEBSOCKET_CALLBACK_URL).toBeUndefined();
  });
});
