import { once } from 'node:events';
import { createServer, type RequestListener, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import tls from 'node:tls';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import zlib from 'node:zlib';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { guardedFetch, guardedFetchWith, outboundFetch, readCapped, setOutboundResolver, type ResolvedAddress } from '../../lambdas/outbound/fetch.ts';
import { OutboundRefused } from '../../lambdas/outbound/guard.ts';

/**
 * outboundFetch against real HTTP servers on 127.0.0.1 (and an https one, and one on ::1): what is refused before the
 * call, what is refused at connect time (real `localhost` resolution and an injected resolver standing in for DNS),
 * redirects returned unfollowed, the body cap, the time-outs, and the fetch contract the hand-written client keeps
 * (the request's headers and body as fetch sends them, the response's status, headers and decoded body, fetch's
 * errors). The loopback allowance is off unless a test turns it on.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface TestServer {
  port: number;
  url: string;
  /** TCP connections accepted so far: 0 proves a refusal happened before connecting. */
  connections: number;
  requests: string[];
}

const servers: Server[] = [];

/**
 * A self-signed certificate for localhost, tools.example and 127.0.0.1 (P-256, valid until 2126), for the https tests.
 * Made with `openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 36500 -subj /CN=localhost
 * -addext subjectAltName=DNS:localhost,DNS:tools.example,IP:127.0.0.1`.
 */
const TEST_KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgwU1Wxtx8zbx71JAI
PeHxKqSoxzfjJGLHMwRssX6CJ2KhRANCAASBjAbPiPUh734Qna1t2RZNSFVC3Yvi
Roa+8msfm1ldo5NTznVbz/VViexXMAnp+LmzMQHPuk1KgEVTmNNjlHLz
-----END PRIVATE KEY-----
`;
const TEST_CERT = `-----BEGIN CERTIFICATE-----
MIIBqjCCAVCgAwIBAgIUBQCzhGSKo7lH199LaYJgyznWczAwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyNzEzMDAxNVoYDzIxMjYxMTAz
MTMwMDE1WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAASBjAbPiPUh734Qna1t2RZNSFVC3YviRoa+8msfm1ldo5NTznVbz/VV
iexXMAnp+LmzMQHPuk1KgEVTmNNjlHLzo34wfDAdBgNVHQ4EFgQUMPQbQC6gGDbR
ZBJCIUOtrN3JbaIwHwYDVR0jBBgwFoAUMPQbQC6gGDbRZBJCIUOtrN3JbaIwDwYD
VR0TAQH/BAUwAwEB/zApBgNVHREEIjAggglsb2NhbGhvc3SCDXRvb2xzLmV4YW1w
bGWHBH8AAAEwCgYIKoZIzj0EAwIDSAAwRQIhAIMINVZ8T66BJijOzawlJO4c9kwe
TSuSmK1Fb02rVXxYAiBAe9VgqFWeNIKdCDR3FS6wK8QxbHYZeOp08B21rPPSrw==
-----END CERTIFICATE-----
`;

async function serve(handler: RequestListener, opts: { host?: '127.0.0.1' | '::1'; https?: boolean } = {}): Promise<TestServer> {
  const host = opts.host ?? '127.0.0.1';
  const server = opts.https ? createHttpsServer({ key: TEST_KEY, cert: TEST_CERT }) : createServer();
  const state: TestServer = { port: 0, url: '', connections: 0, requests: [] };
  server.on(opts.https ? 'secureConnection' : 'connection', () => state.connections++);
  server.on('request', (req, res) => {
    state.requests.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  server.listen(0, host);
  await once(server, 'listening');
  servers.push(server);
  state.port = (server.address() as AddressInfo).port;
  state.url = `${opts.https ? 'https' : 'http'}://${host === '::1' ? '[::1]' : host}:${state.port}`;
  return state;
}

/** A server that answers every request with what it received: method, URL, headers (raw, in order) and body. */
const echo: RequestListener = (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks).toString() }));
  });
};

interface Echoed {
  method: string;
  url: string;
  headers: Record<string, string>;
  body: string;
}

const hello: RequestListener = (_req, res) => {
  res.writeHead(200, { 'content-type': 'text/plain' });
  res.end('hello');
};

/** A resolver answering from a fixed table, as DNS would (unknown names: ENOTFOUND). */
function fakeDns(table: Record<string, string[]>) {
  const asked: string[] = [];
  setOutboundResolver(async (hostname): Promise<ResolvedAddress[]> => {
    asked.push(hostname);
    const addresses = table[hostname];
    if (!addresses) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 }));
  });
  return asked;
}

async function refusedWith(promise: Promise<unknown>): Promise<OutboundRefused> {
  const err = await promise.then(
    () => {
      throw new Error('expected the call to be refused');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(OutboundRefused);
  return err as OutboundRefused;
}

async function failure(promise: Promise<unknown>): Promise<Error> {
  const err = await promise.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(Error);
  return err as Error;
}

function allowLoopback(on: boolean): void {
  if (on) process.env.ALLOW_LOOPBACK_URLS = '1';
  else delete process.env.ALLOW_LOOPBACK_URLS;
  resetInstanceState();
}

beforeEach(() => allowLoopback(false));
afterEach(async () => {
  allowLoopback(false); // also closes the agents and puts the system resolver back
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    server.close();
  }
});

describe('refused before or at connect time (loopback not allowed)', () => {
  it.each([
    '127.0.0.1',
    '[::1]',
    '[::ffff:127.0.0.1]',
    '[::ffff:7f00:1]',
    '169.254.169.254',
    '10.0.0.1',
    '100.64.0.1',
    '172.16.5.4',
    '192.168.1.1',
    '0.0.0.0',
    '[fe80::1]',
    '[fc00::1]',
    '[64:ff9b::a00:1]',
    '2130706433',
    '0177.0.0.1',
    '0x7f.1',
    '127.1',
  ])('refuses http://%s/ without connecting', async (host) => {
    const server = await serve(hello);
    const err = await refusedWith(outboundFetch(`http://${host}:${server.port}/`));
    expect(err.reason).toBe('address');
    expect(server.connections).toBe(0);
  });

  it('refuses localhost, resolved for real, at connect time', async () => {
    const server = await serve(hello);
    const err = await refusedWith(outboundFetch(`http://localhost:${server.port}/`));
    expect(err.reason).toBe('address');
    expect(err.message).toMatch(/localhost resolves to 127\.0\.0\.1/);
    expect(server.connections).toBe(0);
  });

  it.each([
    ['internal.example', ['10.0.0.1']],
    ['metadata.example', ['169.254.169.254']],
    ['home.example', ['192.168.1.20']],
    ['mapped.example', ['::ffff:127.0.0.1']],
    ['ula.example', ['fd12:3456::1']],
    // One private answer among public ones refuses the name: the check covers every address, not the first.
    ['rebind.example', ['93.184.215.14', '10.1.2.3']],
  ])('refuses %s, which resolves to %j', async (name, addresses) => {
    const asked = fakeDns({ [name]: addresses });
    const err = await refusedWith(outboundFetch(`http://${name}/path`));
    expect(err.reason).toBe('address');
    expect(asked).toEqual([name]);
  });

  it.each([
    ['file:///etc/passwd', 'scheme'],
    ['ftp://example.com/file', 'scheme'],
    ['data:text/plain,hello', 'scheme'],
    ['ws://example.com/socket', 'scheme'],
    ['http://user:pw@example.com/', 'credentials'],
    ['not a url', 'invalid_url'],
  ])('refuses %s (%s)', async (url, reason) => {
    const asked = fakeDns({});
    expect((await refusedWith(outboundFetch(url))).reason).toBe(reason);
    expect(asked).toEqual([]);
  });

  it('refuses a name that resolves to loopback, even through a public-looking name', async () => {
    const server = await serve(hello);
    fakeDns({ 'tools.example': ['127.0.0.1'] });
    expect((await refusedWith(outboundFetch(`http://tools.example:${server.port}/`))).reason).toBe('address');
    expect(server.connections).toBe(0);
  });
});

describe('with ALLOW_LOOPBACK_URLS=1', () => {
  beforeEach(() => allowLoopback(true));

  it('reaches a server on 127.0.0.1, by address, by localhost and by a name resolving there', async () => {
    const server = await serve(hello);
    fakeDns({ 'tools.example': ['127.0.0.1'], localhost: ['127.0.0.1'] });
    for (const url of [`${server.url}/a`, `http://localhost:${server.port}/b`, `http://tools.example:${server.port}/c`]) {
      const res = await outboundFetch(url);
      expect(res.status).toBe(200);
      expect(await res.text()).toBe('hello');
    }
    expect(server.requests).toEqual(['GET /a', 'GET /b', 'GET /c']);
  });

  it('reaches localhost through the system resolver', async () => {
    const server = await serve(hello);
    const res = await outboundFetch(`http://localhost:${server.port}/`);
    expect(await readCapped(res)).toEqual({ text: 'hello', truncated: false, bytes: 5 });
  });

  it('still refuses every other private address', async () => {
    fakeDns({ 'home.example': ['192.168.4.2'], 'meta.example': ['169.254.169.254'], 'both.example': ['127.0.0.1', '10.0.0.1'] });
    for (const url of [
      'http://10.0.0.1/',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fe80::1]/',
      'http://home.example/',
      'http://meta.example/',
      'http://both.example/',
    ]) {
      expect((await refusedWith(outboundFetch(url))).reason, url).toBe('address');
    }
  });

  it('sends the method, headers and body', async () => {
    const server = await serve((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => res.end(JSON.stringify({ method: req.method, auth: req.headers.authorization, body })));
    });
    const res = await outboundFetch(`${server.url}/tool`, { method: 'POST', headers: { authorization: 'Bearer t' }, body: '{"x":1}' });
    expect(await res.json()).toEqual({ method: 'POST', auth: 'Bearer t', body: '{"x":1}' });
  });

  it('returns a redirect to a private address as the response, unfollowed', async () => {
    const server = await serve((_req, res) => {
      res.writeHead(302, { location: 'http://10.0.0.1/' });
      res.end();
    });
    const res = await outboundFetch(`${server.url}/start`, { redirect: 'follow' });
    expect(res.status).toBe(302);
    expect(res.headers.get('location')).toBe('http://10.0.0.1/');
    expect(server.requests).toEqual(['GET /start']);
  });

  it('does not follow a redirect even to an allowed address', async () => {
    const server = await serve((req, res) => {
      if (req.url === '/start') res.writeHead(307, { location: '/next' }).end();
      else res.end('followed');
    });
    const res = await outboundFetch(`${server.url}/start`);
    expect(res.status).toBe(307);
    expect(server.requests).toEqual(['GET /start']);
  });

  it('rebuilds the agent when the allowance is withdrawn (resetInstanceState)', async () => {
    const server = await serve(hello);
    expect((await outboundFetch(`http://localhost:${server.port}/`)).status).toBe(200);
    allowLoopback(false);
    expect((await refusedWith(outboundFetch(`http://localhost:${server.port}/`))).reason).toBe('address');
    expect((await refusedWith(outboundFetch(`${server.url}/`))).reason).toBe('address');
  });
});

describe('body cap', () => {
  beforeEach(() => allowLoopback(true));

  it('cuts a 1 MB body at the cap, says so, and does not read the socket to the end', async () => {
    const total = 1024 * 1024;
    const chunk = Buffer.alloc(16 * 1024, 'a');
    let written = 0;
    let finished = false;
    let onClose!: () => void;
    const closed = new Promise<void>((resolve) => (onClose = resolve));
    const server = await serve((_req, res) => {
      res.on('close', onClose);
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': String(total) });
      void (async () => {
        while (written < total && !res.destroyed) {
          res.write(chunk);
          written += chunk.length;
          await sleep(5); // paced, so "not read to the end" is not hidden by socket buffers
        }
        if (!res.destroyed) res.end(() => (finished = true));
      })();
    });

    const cap = 100 * 1024;
    const res = await outboundFetch(server.url);
    const out = await readCapped(res, cap);
    expect(out.truncated).toBe(true);
    expect(out.bytes).toBe(cap);
    expect(out.text).toBe('a'.repeat(cap));
    await closed; // the client closed the connection…
    expect(finished).toBe(false); // …before the server could send it all
    expect(written).toBeLessThan(total / 2);
  });

  it('reads a body below, or exactly at, the cap whole', async () => {
    const server = await serve((req, res) => res.end('x'.repeat(Number(req.url!.slice(1)))));
    expect(await readCapped(await outboundFetch(`${server.url}/10`), 100)).toEqual({ text: 'x'.repeat(10), truncated: false, bytes: 10 });
    expect(await readCapped(await outboundFetch(`${server.url}/100`), 100)).toEqual({ text: 'x'.repeat(100), truncated: false, bytes: 100 });
    expect(await readCapped(await outboundFetch(`${server.url}/101`), 100)).toEqual({ text: 'x'.repeat(100), truncated: true, bytes: 100 });
  });

  it('drops a character the cap cuts in half', async () => {
    const server = await serve((_req, res) => res.end('ab€€')); // € is 3 bytes in UTF-8
    expect(await readCapped(await outboundFetch(server.url), 4)).toEqual({ text: 'ab', truncated: true, bytes: 4 });
  });

  it('defaults to 100 KiB', async () => {
    const server = await serve((_req, res) => res.end('z'.repeat(200 * 1024)));
    const out = await readCapped(await outboundFetch(server.url));
    expect(out).toMatchObject({ truncated: true, bytes: 100 * 1024 });
  });
});

describe('time-outs and aborts', () => {
  beforeEach(() => allowLoopback(true));

  it('fails a server that never answers with a TimeoutError at the total time-out', async () => {
    const server = await serve(() => undefined);
    const started = Date.now();
    const err = await failure(outboundFetch(server.url, {}, { timeoutMs: 200 }));
    expect(err.name).toBe('TimeoutError');
    expect(Date.now() - started).toBeGreaterThanOrEqual(190);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(server.connections).toBe(1);
  });

  it('counts the body in the total time-out', async () => {
    const server = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial');
    });
    const res = await outboundFetch(server.url, {}, { timeoutMs: 300 });
    expect(res.status).toBe(200);
    const err = await failure(readCapped(res));
    expect(err.name).toBe('TimeoutError');
  });

  it("stops at the caller's abort", async () => {
    const server = await serve(() => undefined);
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const err = await failure(outboundFetch(server.url, {}, { signal: controller.signal, timeoutMs: 5_000 }));
    expect(err.name).toBe('AbortError');
  });

  it('honours an abort signal in init too', async () => {
    const server = await serve(() => undefined);
    const err = await failure(outboundFetch(server.url, { signal: AbortSignal.timeout(50) }, { timeoutMs: 5_000 }));
    expect(err.name).toBe('TimeoutError');
  });

  it('fails with a TimeoutError when resolving and connecting take longer than the connect time-out', async () => {
    setOutboundResolver(() => new Promise(() => undefined)); // DNS that never answers
    const started = Date.now();
    const err = await failure(outboundFetch('http://slow.example/', {}, { connectTimeoutMs: 150, timeoutMs: 5_000 }));
    expect(err.name).toBe('TimeoutError');
    expect(err.message).toMatch(/150 ms/);
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('counts only resolving and connecting in the connect time-out, not the wait for the answer', async () => {
    const server = await serve((_req, res) => void sleep(300).then(() => res.end('late')));
    const res = await outboundFetch(server.url, {}, { connectTimeoutMs: 100, timeoutMs: 5_000 });
    expect(await res.text()).toBe('late');
  });
});

describe('guardedFetch', () => {
  it('is fetch under the same guard', async () => {
    const server = await serve(hello);
    expect((await refusedWith(guardedFetch(`${server.url}/`))).reason).toBe('address');
    expect((await refusedWith(guardedFetch(new URL('http://169.254.169.254/')))).reason).toBe('address');
    expect((await refusedWith(guardedFetch(new Request('http://10.0.0.1/', { method: 'POST', body: 'x' })))).reason).toBe('address');
    expect(server.connections).toBe(0);
  });

  it('takes a URL, a string or a Request, and passes the Request on whole', async () => {
    allowLoopback(true);
    const server = await serve((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => (body += c));
      req.on('end', () => res.end(`${req.method} ${req.url} ${req.headers['content-type'] ?? '-'} ${body}`));
    });
    expect(await (await guardedFetch(`${server.url}/s`)).text()).toBe('GET /s - ');
    expect(await (await guardedFetch(new URL(`${server.url}/u`))).text()).toBe('GET /u - ');
    const request = new Request(`${server.url}/r`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"a":1}' });
    expect(await (await guardedFetch(request)).text()).toBe('POST /r application/json {"a":1}');
  });

  it('guardedFetchWith applies its options to every call', async () => {
    allowLoopback(true);
    const server = await serve(() => undefined);
    const err = await failure(guardedFetchWith({ timeoutMs: 100 })(server.url));
    expect(err.name).toBe('TimeoutError');
  });
});

describe('the request, as fetch sends it', () => {
  beforeEach(() => allowLoopback(true));

  const send = async (url: string, init?: RequestInit): Promise<Echoed> => (await (await outboundFetch(url, init)).json()) as Echoed;

  it("adds fetch's defaults a receiver may rely on, and not the browser's", async () => {
    const server = await serve(echo);
    const got = await send(`${server.url}/plain`);
    expect(got.headers).toMatchObject({ accept: '*/*', 'user-agent': 'node', 'accept-encoding': 'gzip, deflate', host: `127.0.0.1:${server.port}` });
    expect(got.headers).not.toHaveProperty('accept-language');
    expect(got.headers).not.toHaveProperty('sec-fetch-mode');
    expect(got.headers).not.toHaveProperty('content-length');
    expect(got.headers).not.toHaveProperty('transfer-encoding');
  });

  it("keeps the caller's headers (Headers, record or pairs), and takes Host from the URL", async () => {
    const server = await serve(echo);
    const expected = { 'x-a': '1', 'user-agent': 'mine/1', accept: 'application/json', host: `127.0.0.1:${server.port}` };
    for (const headers of [
      new Headers({ 'X-A': '1', 'User-Agent': 'mine/1', Accept: 'application/json', Host: 'elsewhere.example' }),
      { 'x-a': '1', 'user-agent': 'mine/1', accept: 'application/json', host: 'elsewhere.example' },
      [
        ['x-a', '1'],
        ['user-agent', 'mine/1'],
        ['accept', 'application/json'],
        ['host', 'elsewhere.example'],
      ] as [string, string][],
    ]) {
      expect((await send(server.url, { headers })).headers).toMatchObject(expected);
    }
  });

  it('sends a body of known length with its content-length and the content-type fetch gives it', async () => {
    const server = await serve(echo);
    const string = await send(server.url, { method: 'POST', body: 'héllo' });
    expect(string).toMatchObject({ method: 'POST', body: 'héllo' });
    expect(string.headers).toMatchObject({ 'content-type': 'text/plain;charset=UTF-8', 'content-length': '6' });

    const bytes = await send(server.url, { method: 'PUT', body: new TextEncoder().encode('abc') });
    expect(bytes).toMatchObject({ method: 'PUT', body: 'abc' });
    expect(bytes.headers['content-length']).toBe('3');
    expect(bytes.headers).not.toHaveProperty('content-type');

    const buffer = await send(server.url, { method: 'POST', body: new TextEncoder().encode('abcd').buffer as ArrayBuffer });
    expect(buffer).toMatchObject({ body: 'abcd', headers: { 'content-length': '4' } });

    const form = await send(server.url, { method: 'POST', body: new URLSearchParams({ a: '1', b: 'x y' }) });
    expect(form).toMatchObject({ body: 'a=1&b=x+y', headers: { 'content-type': 'application/x-www-form-urlencoded;charset=UTF-8', 'content-length': '9' } });

    const own = await send(server.url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    expect(own.headers).toMatchObject({ 'content-type': 'application/json', 'content-length': '2' });

    // fetch sends content-length 0 for a POST or PUT without a body, and none for other methods.
    expect((await send(server.url, { method: 'POST' })).headers['content-length']).toBe('0');
    expect((await send(server.url, { method: 'DELETE' })).headers).not.toHaveProperty('content-length');
  });

  it('streams a ReadableStream body (duplex: half) chunked, as it comes', async () => {
    const server = await serve(echo);
    const encoder = new TextEncoder();
    const body = new ReadableStream<Uint8Array>({
      async start(controller) {
        for (const part of ['one ', 'two ', 'three']) {
          controller.enqueue(encoder.encode(part));
          await sleep(10);
        }
        controller.close();
      },
    });
    const got = await send(server.url, { method: 'POST', body, duplex: 'half' } as RequestInit);
    expect(got.body).toBe('one two three');
    expect(got.headers['transfer-encoding']).toBe('chunked');
    expect(got.headers).not.toHaveProperty('content-length');
  });

  it('guardedFetchWith passes on a Request whose body is a stream (as the MCP SDK may send one)', async () => {
    const server = await serve(echo);
    const body = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('{"jsonrpc":"2.0",'));
        controller.enqueue(new TextEncoder().encode('"id":1,"method":"ping"}'));
        controller.close();
      },
    });
    const request = new Request(`${server.url}/mcp`, { method: 'POST', headers: { 'content-type': 'application/json' }, body, duplex: 'half' } as RequestInit);
    const res = await guardedFetchWith({ timeoutMs: 5_000 })(request);
    const got = (await res.json()) as Echoed;
    expect(got).toMatchObject({ method: 'POST', url: '/mcp', body: '{"jsonrpc":"2.0","id":1,"method":"ping"}' });
    expect(got.headers).toMatchObject({ 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
  });

  it('fails, as fetch does, a body stream that errors and the headers that are the connection’s own', async () => {
    const server = await serve(echo);
    const broken = new ReadableStream<Uint8Array>({
      start(controller) {
        controller.enqueue(new TextEncoder().encode('start'));
        controller.error(new Error('the source broke'));
      },
    });
    const err = await failure(outboundFetch(server.url, { method: 'POST', body: broken, duplex: 'half' } as RequestInit));
    expect(err).toBeInstanceOf(TypeError);
    expect(err.message).toBe('fetch failed');

    for (const headers of [{ 'transfer-encoding': 'chunked' }, { upgrade: 'websocket' }, { 'content-length': '99' }] as Record<string, string>[]) {
      const refused = await failure(outboundFetch(server.url, { method: 'POST', headers, body: 'x' }));
      expect(refused, JSON.stringify(headers)).toBeInstanceOf(TypeError);
    }
    // fetch's own refusals, before anything is sent.
    expect(await failure(outboundFetch(server.url, { method: 'GET', body: 'x' }))).toBeInstanceOf(TypeError);
    expect(server.requests.length).toBeLessThanOrEqual(1); // the broken stream's, if its head went out before it broke
  });
});

describe('the response, as fetch gives it', () => {
  beforeEach(() => allowLoopback(true));

  const TEXT = 'the quick brown fox jumps over the lazy dog '.repeat(200);
  const encoded: Record<string, Buffer> = {
    gzip: zlib.gzipSync(TEXT),
    deflate: zlib.deflateSync(TEXT),
    'deflate-raw': zlib.deflateRawSync(TEXT),
    br: zlib.brotliCompressSync(TEXT),
  };

  it.each(['gzip', 'deflate', 'deflate-raw', 'br'])('decodes a %s body, headers kept as sent', async (coding) => {
    const seen: string[] = [];
    const server = await serve((req, res) => {
      seen.push(String(req.headers['accept-encoding']));
      const body = encoded[coding]!;
      res.writeHead(200, { 'content-type': 'text/plain', 'content-encoding': coding === 'deflate-raw' ? 'deflate' : coding, 'content-length': body.length });
      res.end(body);
    });
    const res = await outboundFetch(server.url);
    expect(res.headers.get('content-encoding')).toBe(coding === 'deflate-raw' ? 'deflate' : coding);
    expect(res.headers.get('content-length')).toBe(String(encoded[coding]!.length));
    expect(await res.text()).toBe(TEXT);
    expect(seen).toEqual(['gzip, deflate']);
  });

  it('caps the decoded body, and undoes a chain of codings', async () => {
    const server = await serve((req, res) => {
      if (req.url === '/chain') {
        res.writeHead(200, { 'content-encoding': 'deflate, gzip' }); // deflate applied first, then gzip
        res.end(zlib.gzipSync(zlib.deflateSync(TEXT)));
      } else {
        res.writeHead(200, { 'content-encoding': 'gzip' });
        res.end(encoded.gzip);
      }
    });
    expect(await readCapped(await outboundFetch(server.url), 100)).toEqual({ text: TEXT.slice(0, 100), truncated: true, bytes: 100 });
    expect(await (await outboundFetch(`${server.url}/chain`)).text()).toBe(TEXT);
  });

  it('leaves a body in a coding it does not know as sent', async () => {
    const server = await serve((_req, res) => {
      res.writeHead(200, { 'content-encoding': 'x-unknown' });
      res.end('as sent');
    });
    expect(await (await outboundFetch(server.url)).text()).toBe('as sent');
  });

  it('has no body for HEAD, 204 and 304, and keeps the connection for the next call', async () => {
    const server = await serve((req, res) => {
      const status = Number(req.url!.slice(1)) || 200;
      res.writeHead(status, { 'content-type': 'text/plain', etag: '"e"', ...(status === 200 && { 'content-length': 4 }) });
      res.end(status === 200 && req.method !== 'HEAD' ? 'body' : undefined);
    });
    for (const [path, method, status] of [
      ['/204', 'GET', 204],
      ['/304', 'GET', 304],
      ['/200', 'HEAD', 200],
    ] as const) {
      const res = await outboundFetch(`${server.url}${path}`, { method });
      expect(res.status).toBe(status);
      expect(res.body).toBeNull();
      expect(await res.text()).toBe('');
      expect(res.headers.get('etag')).toBe('"e"');
    }
    expect(await (await outboundFetch(`${server.url}/200`)).text()).toBe('body');
    expect(server.connections).toBe(1); // kept alive from one call to the next
  });

  it('keeps the status text, every value of a repeated header, and the URL without its fragment', async () => {
    const server = await serve((_req, res) => {
      res.setHeader('set-cookie', ['a=1; Path=/', 'b=2; Path=/']);
      res.writeHead(418, 'Short And Stout');
      res.end();
    });
    const res = await outboundFetch(`${server.url}/pot?x=1#frag`);
    expect(res.status).toBe(418);
    expect(res.ok).toBe(false);
    expect(res.statusText).toBe('Short And Stout');
    expect(res.headers.getSetCookie()).toEqual(['a=1; Path=/', 'b=2; Path=/']);
    expect(res.url).toBe(`${server.url}/pot?x=1`);
  });

  it('cancelling the body closes the connection: the rest is never sent', async () => {
    let written = 0;
    let onClose!: () => void;
    const closed = new Promise<void>((resolve) => (onClose = resolve));
    const server = await serve((_req, res) => {
      res.on('close', onClose);
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      void (async () => {
        while (!res.destroyed && written < 10 * 1024 * 1024) {
          res.write(Buffer.alloc(16 * 1024, 'b'));
          written += 16 * 1024;
          await sleep(5);
        }
      })();
    });
    const res = await outboundFetch(server.url);
    const reader = res.body!.getReader();
    expect((await reader.read()).value!.byteLength).toBeGreaterThan(0);
    await reader.cancel();
    await closed;
    const at = written;
    await sleep(50);
    expect(written).toBe(at);
    expect(written).toBeLessThan(1024 * 1024);
  });

  it('closes the connection of a Response dropped with its body never taken up, not of a body still read', async () => {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    const closed: string[] = [];
    const server = await serve((req, res) => {
      res.on('close', () => closed.push(req.url!));
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('never ends');
    });
    await (async () => {
      expect((await outboundFetch(`${server.url}/dropped`)).status).toBe(200);
    })();
    const reader = (await outboundFetch(`${server.url}/read`)).body!.getReader(); // the Response dropped, its body read
    for (let i = 0; i < 100 && closed.length === 0; i++) {
      gc();
      await sleep(20);
    }
    expect(closed).toEqual(['/dropped']);
    expect(new TextDecoder().decode((await reader.read()).value)).toBe('never ends');
    await reader.cancel();
  });

  it("errors the body with the caller's abort reason, and a cut connection as fetch's TypeError", async () => {
    const server = await serve((req, res) => {
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '100' });
      res.write('part');
      if (req.url === '/cut') setTimeout(() => res.destroy(), 20);
    });
    const controller = new AbortController();
    const aborted = await outboundFetch(server.url, {}, { signal: controller.signal });
    const reading = aborted.text();
    controller.abort(new Error('caller gave up'));
    expect((await failure(reading)).message).toBe('caller gave up');

    const cut = await failure((await outboundFetch(`${server.url}/cut`)).text());
    expect(cut).toBeInstanceOf(TypeError);
  });

  it('fails a call nobody answers as fetch does: TypeError "fetch failed", the socket error its cause', async () => {
    const server = await serve(hello);
    const port = server.port;
    for (const s of servers.splice(0)) s.close();
    await sleep(10);
    const err = await failure(outboundFetch(`http://127.0.0.1:${port}/`));
    expect(err).toBeInstanceOf(TypeError);
    expect(err.message).toBe('fetch failed');
    expect((err.cause as { code?: string }).code).toBe('ECONNREFUSED');
  });
});

describe('https and IPv6', () => {
  it('checks the addresses of an https name at connect time too', async () => {
    const asked = fakeDns({ 'tools.example': ['10.0.0.7'] });
    expect((await refusedWith(outboundFetch('https://tools.example/'))).reason).toBe('address');
    expect(asked).toEqual(['tools.example']);
  });

  it('refuses a certificate it cannot verify: TypeError "fetch failed", the TLS error its cause', async () => {
    allowLoopback(true);
    const server = await serve(hello, { https: true });
    const err = await failure(outboundFetch(server.url));
    expect(err).toBeInstanceOf(TypeError);
    expect((err.cause as { code?: string }).code).toMatch(/CERT|SELF_SIGNED/);
  });

  const canTrust = typeof tls.setDefaultCACertificates === 'function' && typeof tls.getCACertificates === 'function';
  it.skipIf(!canTrust)('reaches an https server through the guarded lookup, advertising br as undici does', async () => {
    allowLoopback(true);
    const seen: string[] = [];
    const server = await serve(
      (req, res) => {
        seen.push(String(req.headers['accept-encoding']));
        res.writeHead(200, { 'content-encoding': 'br' });
        res.end(zlib.brotliCompressSync('over tls'));
      },
      { https: true },
    );
    const asked = fakeDns({ 'tools.example': ['127.0.0.1'] });
    const before = tls.getCACertificates('default');
    tls.setDefaultCACertificates([...before, TEST_CERT]);
    try {
      const res = await outboundFetch(`https://tools.example:${server.port}/`);
      expect(await res.text()).toBe('over tls');
      expect(await (await outboundFetch(`https://tools.example:${server.port}/again`)).text()).toBe('over tls');
    } finally {
      tls.setDefaultCACertificates(before);
    }
    expect(asked).toEqual(['tools.example']); // one connection, kept alive
    expect(server.connections).toBe(1);
    expect(seen).toEqual(['br, gzip, deflate', 'br, gzip, deflate']);
  });

  it('reaches [::1] when loopback is allowed (brackets off for the socket, on in Host)', async () => {
    allowLoopback(true);
    const server = await serve(echo, { host: '::1' });
    const got = (await (await outboundFetch(`${server.url}/six`)).json()) as Echoed;
    expect(got).toMatchObject({ url: '/six', headers: { host: `[::1]:${server.port}` } });
  });
});
