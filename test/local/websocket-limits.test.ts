import { setTimeout as sleep } from 'node:timers/promises';
import { ApiGatewayManagementApiClient, GetConnectionCommand, PostToConnectionCommand } from '@aws-sdk/client-apigatewaymanagementapi';
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { WebSocket, type RawData } from 'ws';
import { IDLE_TIMEOUT_MS, MAX_CONNECTION_MS, MAX_FRAME_BYTES, MAX_MESSAGE_BYTES } from '../../bin/local/websocket.ts';
import { startGateway, type RunningGateway } from '../../bin/local/runtime.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';
import { apiGatewayConnectionSender, splitIntoParts, type WebSocketLambdaEvent } from '../../lambdas/http/websocket.ts';
import { WEBSOCKET_ECHO_FUNCTION, webSocketEcho } from './fixtures/websocket-echo.ts';

/**
 * API Gateway's WebSocket quotas in the local stand-in (bin/local/websocket.ts, docs/ws.md "Limits"): 32 KB a client
 * message (1009 past it), 10 minutes idle and 2 hours in all (1001 "Going away", shortened here through the
 * environment), 128 KB a PostToConnection (413 PayloadTooLargeException); and the management client's `part` frames
 * for a text over 32 KB (lambdas/http/websocket.ts), which join to what was sent. Served by the echo function of
 * test/local/websocket.test.ts, which answers each message with `{connectionId, route, body, isBase64Encoded}`.
 */

let gw: RunningGateway;
let management: ApiGatewayManagementApiClient;
let seq = 0;

beforeAll(async () => {
  vi.spyOn(console, 'error').mockImplementation(() => {});
  gw = await startGateway({
    dynamoEndpoint: inject('dynamoEndpoint'),
    tablePrefix: 'wslimits',
    simulateUpstreams: true,
    functions: [...FUNCTIONS.filter((f) => f.trigger.kind !== 'websocket'), WEBSOCKET_ECHO_FUNCTION],
  });
  management = new ApiGatewayManagementApiClient({ endpoint: gw.websocket!.managementEndpoint, region: 'us-east-1' });
});
afterEach(() => {
  vi.unstubAllEnvs();
});
afterAll(async () => {
  management?.destroy();
  await gw?.stop();
  vi.restoreAllMocks();
});

interface Client {
  ws: WebSocket;
  id: string;
  /** Every message received as it came. */
  raw: { text: string; bytes: number }[];
  /** The messages, `part` frames joined. */
  joined: string[];
  closed: Promise<{ code: number; reason: string; at: number }>;
  openedAt: number;
}

/** A client of the echo function; its connection id is the one its $connect carried. */
async function connect(): Promise<Client> {
  const n = `lim-${++seq}`;
  const ws = new WebSocket(`${gw.websocket!.url}?token=ok&n=${n}`);
  const raw: Client['raw'] = [];
  const joined: string[] = [];
  const parts = new Map<string, string[]>();
  ws.on('message', (data: RawData) => {
    const buffer = Buffer.from(data as Buffer);
    const text = buffer.toString('utf8');
    raw.push({ text, bytes: buffer.length });
    const frame = JSON.parse(text) as { type?: string; id: string; index: number; count: number; data: string };
    if (frame.type !== 'part') return void joined.push(text);
    const slices = parts.get(frame.id) ?? [];
    parts.set(frame.id, slices);
    slices[frame.index] = frame.data;
    if (slices.filter((s) => s !== undefined).length === frame.count) joined.push(slices.join(''));
  });
  const closed = new Promise<{ code: number; reason: string; at: number }>((resolve) =>
    ws.once('close', (code, reason) => resolve({ code, reason: reason.toString('utf8'), at: Date.now() })),
  );
  await new Promise<void>((resolve, reject) => {
    ws.once('open', () => resolve());
    ws.once('error', reject);
  });
  const openedAt = Date.now();
  const connectEvent = events().find((e) => e.requestContext.eventType === 'CONNECT' && e.queryStringParameters?.n === n);
  return { ws, id: connectEvent!.requestContext.connectionId, raw, joined, closed, openedAt };
}

const events = () => webSocketEcho().events;
const ofType = (type: 'MESSAGE' | 'DISCONNECT', connectionId: string): WebSocketLambdaEvent[] =>
  events().filter((e) => e.requestContext.eventType === type && e.requestContext.connectionId === connectionId);

/** The echo function's answer to `body`. */
const echoOf = (c: Client, body: string) => JSON.stringify({ connectionId: c.id, route: '$default', body, isBase64Encoded: false });

describe("API Gateway's quotas, as the defaults", () => {
  it('32 KB a frame, 128 KB a message, 10 minutes idle, 2 hours a connection', () => {
    expect({ MAX_FRAME_BYTES, MAX_MESSAGE_BYTES, IDLE_TIMEOUT_MS, MAX_CONNECTION_MS }).toEqual({
      MAX_FRAME_BYTES: 32_768,
      MAX_MESSAGE_BYTES: 131_072,
      IDLE_TIMEOUT_MS: 600_000,
      MAX_CONNECTION_MS: 7_200_000,
    });
  });
});

describe('client frames', () => {
  it('a message of 32,768 bytes reaches the function (its echo, over 32 KB, comes back as parts); one byte more closes the connection with 1009', async () => {
    const c = await connect();
    const fits = 'a'.repeat(MAX_FRAME_BYTES);
    c.ws.send(fits);
    await expect.poll(() => c.joined).toEqual([echoOf(c, fits)]);
    expect(c.raw.length).toBeGreaterThan(1);
    expect(c.raw.every((r) => r.bytes <= MAX_FRAME_BYTES && JSON.parse(r.text).type === 'part')).toBe(true);

    c.ws.send('b'.repeat(MAX_FRAME_BYTES + 1));
    expect(await c.closed).toMatchObject({ code: 1009 });
    await expect.poll(() => ofType('DISCONNECT', c.id).map((e) => e.requestContext.disconnectStatusCode)).toEqual([1009]);
    expect(ofType('MESSAGE', c.id).map((e) => e.body?.length)).toEqual([MAX_FRAME_BYTES]);
  });

  it('a message fragmented into frames of 32 KB or less is checked whole: over 32 KB it is closed with 1009 (AWS would take it up to 128 KB)', async () => {
    const c = await connect();
    c.ws.send('x'.repeat(20_000), { fin: false });
    c.ws.send('y'.repeat(20_000), { fin: true });
    expect(await c.closed).toMatchObject({ code: 1009 });
    expect(ofType('MESSAGE', c.id)).toEqual([]);
  });
});

describe('idle timeout and connection duration', () => {
  it('no frame either way for the idle time: closed with 1001 "Going away", and that is the $disconnect', async () => {
    vi.stubEnv('LOCAL_WEBSOCKET_IDLE_MS', '700');
    const c = await connect();
    const closed = await c.closed;
    expect(closed).toMatchObject({ code: 1001, reason: 'Going away' });
    expect(closed.at - c.openedAt).toBeGreaterThanOrEqual(650);
    await expect
      .poll(() => ofType('DISCONNECT', c.id).map((e) => e.requestContext))
      .toEqual([expect.objectContaining({ disconnectStatusCode: 1001, disconnectReason: 'Going away' })]);
  });

  it('a frame from the client, or one PostToConnection sends, restarts the idle time; the connection closes once they stop', async () => {
    vi.stubEnv('LOCAL_WEBSOCKET_IDLE_MS', '1500');
    const fromClient = await connect();
    const toClient = await connect();
    // 3 s of activity, a frame every 300 ms (the sleeps are the thing tested: time passing with or without frames).
    for (let i = 0; i < 10; i++) {
      fromClient.ws.send(`tick ${i}`);
      await management.send(new PostToConnectionCommand({ ConnectionId: toClient.id, Data: new TextEncoder().encode(`{"tick":${i}}`) }));
      await sleep(300);
    }
    expect([fromClient.ws.readyState, toClient.ws.readyState]).toEqual([WebSocket.OPEN, WebSocket.OPEN]);
    const stoppedAt = Date.now();
    const [a, b] = await Promise.all([fromClient.closed, toClient.closed]);
    expect([a.code, b.code]).toEqual([1001, 1001]);
    expect(Math.min(a.at, b.at) - stoppedAt).toBeGreaterThanOrEqual(1000);
  });

  it('a connection is closed with 1001 at the maximum duration, however active', async () => {
    vi.stubEnv('LOCAL_WEBSOCKET_MAX_CONNECTION_MS', '1500');
    const c = await connect();
    let closedAt: number | undefined;
    void c.closed.then((r) => (closedAt = r.at));
    while (closedAt === undefined) {
      if (c.ws.readyState === WebSocket.OPEN) c.ws.send('still here');
      await sleep(100);
    }
    expect(await c.closed).toMatchObject({ code: 1001, reason: 'Going away' });
    expect(closedAt - c.openedAt).toBeGreaterThanOrEqual(1450);
    await expect.poll(() => ofType('DISCONNECT', c.id).map((e) => e.requestContext.disconnectStatusCode)).toEqual([1001]);
  });

  it('a timing that is not a positive whole number of milliseconds refuses the upgrade with 500, naming it', async () => {
    vi.stubEnv('LOCAL_WEBSOCKET_IDLE_MS', '10s');
    const ws = new WebSocket(`${gw.websocket!.url}?token=ok&n=bad-timing`);
    const refused = await new Promise<{ status?: number; body: string }>((resolve) =>
      ws.once('unexpected-response', (_req, res) => {
        let body = '';
        res.on('data', (chunk: Buffer) => (body += chunk.toString('utf8'))).on('end', () => resolve({ status: res.statusCode, body }));
      }),
    );
    ws.on('error', () => {});
    expect(refused).toEqual({
      status: 500,
      body: JSON.stringify({ message: 'LOCAL_WEBSOCKET_IDLE_MS must be a positive whole number of milliseconds, got "10s"' }),
    });
  });
});

describe('PostToConnection', () => {
  it('takes 131,072 bytes (one frame locally) and refuses one more with 413 PayloadTooLargeException; the connection stays', async () => {
    const c = await connect();
    const most = 'z'.repeat(MAX_MESSAGE_BYTES - 2);
    await management.send(new PostToConnectionCommand({ ConnectionId: c.id, Data: new TextEncoder().encode(JSON.stringify(most)) }));
    await expect.poll(() => c.raw.map((r) => r.bytes)).toEqual([MAX_MESSAGE_BYTES]);
    const refused = await management.send(new PostToConnectionCommand({ ConnectionId: c.id, Data: new TextEncoder().encode(JSON.stringify(`${most}z`)) })).then(
      () => undefined,
      (err: { name: string; $metadata: { httpStatusCode?: number } }) => ({ name: err.name, status: err.$metadata.httpStatusCode }),
    );
    expect(refused).toEqual({ name: 'PayloadTooLargeException', status: 413 });
    const { $metadata } = await management.send(new GetConnectionCommand({ ConnectionId: c.id }));
    expect($metadata.httpStatusCode).toBe(200);
    expect(c.raw).toHaveLength(1);
    c.ws.close();
    await c.closed;
  });

  it('the management client sends a text over 32 KB as parts of 32 KB or less that join to it, even past 128 KB', async () => {
    const c = await connect();
    const sender = apiGatewayConnectionSender(gw.websocket!.managementEndpoint);
    const texts = [JSON.stringify({ type: 'result', text: `"quoted" é 中 😀 \n${'x'.repeat(50_000)}` }), JSON.stringify({ big: 'é'.repeat(150_000) })];
    for (const text of texts) expect(await sender.send(c.id, text)).toBe(true);
    await expect.poll(() => c.joined).toEqual(texts);
    expect(c.raw.every((r) => r.bytes <= MAX_FRAME_BYTES)).toBe(true);
    // The second text is over 128 KB in UTF-8, so over PostToConnection's limit as one message.
    expect(Buffer.byteLength(texts[1]!)).toBeGreaterThan(MAX_MESSAGE_BYTES);
    // A text that fits goes as it is.
    expect(await sender.send(c.id, '{"type":"small"}')).toBe(true);
    await expect.poll(() => c.raw.at(-1)?.text).toBe('{"type":"small"}');
    c.ws.close();
    await c.closed;
  });
});

describe('splitIntoParts', () => {
  const unit = fc.constantFrom('a', ' ', '"', '\\', '\n', '\u0001', 'é', '中', '😀', '\ud800', '\udc00', '\u2028');
  it('every part, encoded, is within the limit; the parts are numbered in order; their data joins to the text', () => {
    fc.assert(
      fc.property(fc.array(unit, { maxLength: 3000 }), fc.integer({ min: 100, max: 400 }), (units, maxBytes) => {
        const text = units.join('');
        const parts = splitIntoParts(text, 'id-1', maxBytes).map(
          (p) => JSON.parse(p) as { type: string; id: string; index: number; count: number; data: string },
        );
        for (const encoded of splitIntoParts(text, 'id-1', maxBytes)) expect(Buffer.byteLength(encoded)).toBeLessThanOrEqual(maxBytes);
        expect(parts.map((p) => [p.type, p.id, p.index, p.count])).toEqual(parts.map((_, i) => ['part', 'id-1', i, parts.length]));
        expect(parts.map((p) => p.data).join('')).toBe(text);
        // A surrogate pair is never cut.
        for (const p of parts.slice(0, -1)) expect(/[\ud800-\udbff]$/.test(p.data) && /^[\udc00-\udfff]/.test(parts[p.index + 1]!.data)).toBe(false);
      }),
      { seed: 26, numRuns: 300 },
    );
  });
});
