import { createServer, type IncomingHttpHeaders, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { setOutboundResolver } from '../../lambdas/outbound/fetch.ts';
import { WEBHOOK_ATTEMPT_TIMEOUT_MS } from '../../lambdas/config/timing.ts';
import { attemptDelivery, deliveryHeaders, WEBHOOK_USER_AGENT } from '../../lambdas/webhooks/deliver.ts';
import { verifyWebhook } from '../../lambdas/webhooks/verify.ts';
import { freePort } from '../support/gateway-process.ts';

/**
 * One delivery attempt against real HTTP servers on 127.0.0.1 (issue 15, "Delivery"): 2xx delivered, 410 gone, 3xx
 * never followed and a failure, Retry-After on 429/503, the 10 s cut, network errors, and the outbound guard's
 * refusals (a literal private address before any connection, a name resolving to the metadata address at connect).
 */

interface Received {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** A receiver: each request is recorded, then answered by `answer` (which may never answer). */
function receiver(answer: (path: string, res: ServerResponse) => void) {
  const received: Received[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      received.push({ method: req.method!, url: req.url!, headers: req.headers, body: Buffer.concat(chunks) });
      res.on('error', () => undefined); // the client may hang up early (a large answer read only in part)
      answer(new URL(req.url!, 'http://x').pathname, res);
    });
  });
  return {
    server,
    received,
    base: '',
    async start() {
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      this.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    },
    async stop() {
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

const MB = Buffer.alloc(1024 * 1024, 'x');

/** The second server: a redirect's target, which must never be called. */
const target = receiver((_path, res) => res.writeHead(200).end('followed'));
const main = receiver((path, res) => {
  switch (path) {
    case '/200':
      return res.writeHead(200, { 'content-type': 'text/plain' }).end('ok');
    case '/204':
      return res.writeHead(204).end();
    case '/302':
    case '/301':
    case '/307':
    case '/308':
      return res.writeHead(Number(path.slice(1)), { location: `${target.base}/landing` }).end();
    case '/410':
      return res.writeHead(410).end('gone');
    case '/500':
      return res.writeHead(500, { 'retry-after': '30' }).end('oops');
    case '/400':
      return res.writeHead(400).end('bad');
    case '/429':
      return res.writeHead(429, { 'retry-after': '7' }).end();
    case '/429-garbage':
      return res.writeHead(429, { 'retry-after': 'later' }).end();
    case '/503':
      return res.writeHead(503, { 'retry-after': new Date(Date.now() + 120_000).toUTCString() }).end();
    case '/503-none':
      return res.writeHead(503).end();
    case '/hang':
      return; // never answers
    case '/big':
      return res.writeHead(200, { 'content-type': 'application/octet-stream' }).end(MB);
    case '/big-500':
      return res.writeHead(500, { 'content-type': 'application/octet-stream' }).end(MB);
    default:
      return res.writeHead(404).end();
  }
});

const SECRET = 'deliver-secret';
const BODY = JSON.stringify({ success: true, text: 'héllo 🌍 — 你好', vesselId: 'v-1', status: 'COMPLETED' });
const headersAt = (ts = Math.floor(Date.now() / 1000)) => deliveryHeaders({ webhookId: 'msg_v-1', timestamp: ts, body: BODY, secret: SECRET });

const savedLoopback = process.env.ALLOW_LOOPBACK_URLS;
beforeAll(async () => {
  process.env.ALLOW_LOOPBACK_URLS = '1';
  resetInstanceState();
  await Promise.all([main.start(), target.start()]);
});
afterAll(async () => {
  if (savedLoopback === undefined) delete process.env.ALLOW_LOOPBACK_URLS;
  else process.env.ALLOW_LOOPBACK_URLS = savedLoopback;
  resetInstanceState();
  await Promise.all([main.stop(), target.stop()]);
});
afterEach(() => setOutboundResolver());

const deliver = (path: string) => attemptDelivery(`${main.base}${path}`, BODY, headersAt());

describe('answers', () => {
  it.each([200, 204])('%i → delivered, with the status code', async (status) => {
    const before = Date.now();
    const out = await deliver(`/${status}`);
    expect(out).toEqual({ verdict: 'delivered', attempt: { at: expect.any(Number), durationMs: expect.any(Number), statusCode: status } });
    expect(out.attempt.at).toBeGreaterThanOrEqual(before);
    expect(out.attempt.at).toBeLessThanOrEqual(Date.now());
    expect(out.attempt.durationMs).toBeGreaterThanOrEqual(0);
    expect(out.attempt.durationMs).toBeLessThan(5_000);
  });

  it.each([302, 301, 307, 308])('%i → retry, not followed: the Location server receives nothing', async (status) => {
    const out = await deliver(`/${status}`);
    expect(out).toEqual({ verdict: 'retry', attempt: { at: expect.any(Number), durationMs: expect.any(Number), statusCode: status } });
    await new Promise((r) => setTimeout(r, 100));
    expect(target.received).toHaveLength(0);
  });

  it('410 → gone', async () => {
    const out = await deliver('/410');
    expect(out).toEqual({ verdict: 'gone', attempt: { at: expect.any(Number), durationMs: expect.any(Number), statusCode: 410 } });
  });

  it('500 → retry, its Retry-After ignored (only 429 and 503 have one)', async () => {
    const out = await deliver('/500');
    expect(out).toEqual({ verdict: 'retry', attempt: { at: expect.any(Number), durationMs: expect.any(Number), statusCode: 500 } });
    expect(out).not.toHaveProperty('retryAfterSeconds');
  });

  it('400 → retry', async () => {
    expect(await deliver('/400')).toEqual({ verdict: 'retry', attempt: { at: expect.any(Number), durationMs: expect.any(Number), statusCode: 400 } });
  });

  it('404 → retry', async () => {
    expect(await deliver('/nowhere')).toMatchObject({ verdict: 'retry', attempt: { statusCode: 404 } });
  });

  it('429 with "Retry-After: 7" → retry after 7 s', async () => {
    const out = await deliver('/429');
    expect(out).toEqual({ verdict: 'retry', retryAfterSeconds: 7, attempt: { at: expect.any(Number), durationMs: expect.any(Number), statusCode: 429 } });
  });

  it('429 with an unreadable Retry-After → retry, no retryAfterSeconds', async () => {
    const out = await deliver('/429-garbage');
    expect(out).toMatchObject({ verdict: 'retry', attempt: { statusCode: 429 } });
    expect(out).not.toHaveProperty('retryAfterSeconds');
  });

  it('503 with an HTTP date 2 minutes ahead → its seconds', async () => {
    const out = await deliver('/503');
    expect(out).toMatchObject({ verdict: 'retry', attempt: { statusCode: 503 } });
    // The date has whole seconds and is read a moment after it was written.
    expect(out.retryAfterSeconds).toBeGreaterThanOrEqual(115);
    expect(out.retryAfterSeconds).toBeLessThanOrEqual(120);
  });

  it('503 without Retry-After → retry, no retryAfterSeconds', async () => {
    const out = await deliver('/503-none');
    expect(out).toMatchObject({ verdict: 'retry', attempt: { statusCode: 503 } });
    expect(out).not.toHaveProperty('retryAfterSeconds');
  });

  it('a 1 MB answer neither hangs nor fails the delivery', async () => {
    const started = Date.now();
    expect(await deliver('/big')).toMatchObject({ verdict: 'delivered', attempt: { statusCode: 200 } });
    expect(await deliver('/big-500')).toMatchObject({ verdict: 'retry', attempt: { statusCode: 500 } });
    expect(Date.now() - started).toBeLessThan(5_000);
    // And the receiver is still served afterwards.
    expect(await deliver('/204')).toMatchObject({ verdict: 'delivered', attempt: { statusCode: 204 } });
  });
});

describe('what the receiver gets', () => {
  it('exactly the body bytes and the headers passed, as a POST to the URL', async () => {
    const ts = Math.floor(Date.now() / 1000);
    const headers = headersAt(ts);
    const count = main.received.length;
    const out = await attemptDelivery(`${main.base}/204?vessel=v-1`, BODY, headers);
    expect(out.verdict).toBe('delivered');
    expect(main.received).toHaveLength(count + 1);
    const got = main.received.at(-1)!;
    expect(got.method).toBe('POST');
    expect(got.url).toBe('/204?vessel=v-1');
    expect(got.body.equals(Buffer.from(BODY, 'utf8'))).toBe(true);
    expect(got.headers['content-length']).toBe(String(Buffer.byteLength(BODY, 'utf8')));
    expect(got.headers).toMatchObject({
      'content-type': 'application/json',
      'user-agent': WEBHOOK_USER_AGENT,
      'webhook-id': 'msg_v-1',
      'webhook-timestamp': String(ts),
      'webhook-signature': headers['webhook-signature'],
      'x-service-signature': headers['X-Service-Signature'],
    });
    expect(got.headers['user-agent']).toBe('prompt-gateway-webhooks/1.0');
    // And the receiver's helper accepts what arrived.
    expect(verifyWebhook(got.body, got.headers, SECRET)).toEqual({
      ok: true,
      scheme: 'standard-webhooks',
      webhookId: 'msg_v-1',
      timestamp: new Date(ts * 1000),
    });
  });

  it('no signature headers when there is no secret', async () => {
    const headers = deliveryHeaders({ webhookId: 'msg_v-2', timestamp: 1_700_000_000, body: BODY });
    await attemptDelivery(`${main.base}/204`, BODY, headers);
    const got = main.received.at(-1)!;
    expect(got.headers['webhook-id']).toBe('msg_v-2');
    expect(got.headers['webhook-timestamp']).toBe('1700000000');
    expect(got.headers).not.toHaveProperty('webhook-signature');
    expect(got.headers).not.toHaveProperty('x-service-signature');
  });

  it('the attempt time and duration come from the given clock', async () => {
    let t = 1_000_000;
    const clock = () => (t += 250);
    const out = await attemptDelivery(`${main.base}/204`, BODY, headersAt(), clock);
    expect(out.attempt.at).toBe(1_000_250);
    expect(out.attempt.durationMs).toBe(250);
  });
});

describe('network failures', () => {
  it('a receiver that never answers is cut at 10 s', async () => {
    expect(WEBHOOK_ATTEMPT_TIMEOUT_MS).toBe(10_000);
    const count = main.received.length;
    const out = await deliver('/hang');
    expect(main.received).toHaveLength(count + 1); // it did receive the request
    expect(out.verdict).toBe('retry');
    expect(out.attempt.statusCode).toBeUndefined();
    expect(out.attempt.error).toMatch(/^timed out/);
    expect(out.attempt.durationMs).toBeGreaterThanOrEqual(9_500);
    expect(out.attempt.durationMs).toBeLessThanOrEqual(12_500);
  }, 20_000);

  it('a closed port → connection failed: ECONNREFUSED', async () => {
    const port = await freePort();
    const out = await attemptDelivery(`http://127.0.0.1:${port}/hook`, BODY, headersAt());
    expect(out).toEqual({ verdict: 'retry', attempt: { at: expect.any(Number), durationMs: expect.any(Number), error: 'connection failed: ECONNREFUSED' } });
  });
});

describe('the outbound guard', () => {
  it('a literal private IP is refused before any connection', async () => {
    const out = await attemptDelivery('http://10.0.0.1/x', BODY, headersAt());
    expect(out).toEqual({
      verdict: 'refused',
      attempt: { at: expect.any(Number), durationMs: expect.any(Number), error: 'refused: address 10.0.0.1 is not allowed' },
    });
    // Refused by the URL check: a connection attempt to 10.0.0.1 would time out or fail otherwise, not at once.
    expect(out.attempt.durationMs).toBeLessThan(1_000);
  });

  it.each([
    ['http://169.254.169.254/latest/meta-data/', 'refused: address 169.254.169.254 is not allowed'],
    ['http://[::ffff:10.0.0.1]/x', 'refused: address ::ffff:a00:1 is not allowed'],
    ['http://192.168.1.1:8080/x', 'refused: address 192.168.1.1 is not allowed'],
  ])('%s is refused', async (url, error) => {
    expect(await attemptDelivery(url, BODY, headersAt())).toMatchObject({ verdict: 'refused', attempt: { error } });
  });

  it('a host name resolving to the metadata address is refused at connect time, naming the address', async () => {
    const asked: string[] = [];
    setOutboundResolver(async (hostname) => {
      asked.push(hostname);
      return [{ address: '169.254.169.254', family: 4 }];
    });
    const out = await attemptDelivery('http://evil.test/hook', BODY, headersAt());
    expect(out).toEqual({
      verdict: 'refused',
      attempt: { at: expect.any(Number), durationMs: expect.any(Number), error: 'refused: evil.test resolves to 169.254.169.254, which is not allowed' },
    });
    expect(asked).toContain('evil.test');
  });

  it('a name with one private address among public ones is refused, naming it', async () => {
    setOutboundResolver(async () => [
      { address: '127.0.0.1', family: 4 },
      { address: '10.1.2.3', family: 4 },
    ]);
    const out = await attemptDelivery(`http://mixed.test:${new URL(main.base).port}/204`, BODY, headersAt());
    expect(out).toMatchObject({ verdict: 'refused', attempt: { error: 'refused: mixed.test resolves to 10.1.2.3, which is not allowed' } });
  });

  it('control: the same resolver path delivers to an allowed (loopback) address', async () => {
    setOutboundResolver(async () => [{ address: '127.0.0.1', family: 4 }]);
    const count = main.received.length;
    const out = await attemptDelivery(`http://good.test:${new URL(main.base).port}/204`, BODY, headersAt());
    expect(out).toMatchObject({ verdict: 'delivered', attempt: { statusCode: 204 } });
    expect(main.received).toHaveLength(count + 1);
    expect(main.received.at(-1)!.headers.host).toBe(`good.test:${new URL(main.base).port}`);
  });
});
