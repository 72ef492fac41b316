import { once } from 'node:events';
import { createServer, type RequestListener, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { guardedFetch, guardedFetchWith, outboundFetch, readCapped, setOutboundResolver, type ResolvedAddress } from '../../lambdas/outbound/fetch.ts';
import { OutboundRefused } from '../../lambdas/outbound/guard.ts';

/**
 * outboundFetch against real HTTP servers on 127.0.0.1: what is refused before the call, what is refused at connect
 * time (real `localhost` resolution and an injected resolver standing in for DNS), redirects returned unfollowed, the
 * body cap, and the time-outs. The loopback allowance is off unless a test turns it on.
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

async function serve(handler: RequestListener): Promise<TestServer> {
  const server = createServer();
  const state: TestServer = { port: 0, url: '', connections: 0, requests: [] };
  server.on('connection', () => state.connections++);
  server.on('request', (req, res) => {
    state.requests.push(`${req.method} ${req.url}`);
    handler(req, res);
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  servers.push(server);
  state.port = (server.address() as AddressInfo).port;
  state.url = `http://127.0.0.1:${state.port}`;
  return state;
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
