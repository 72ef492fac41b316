import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpTool, TOOL_USER_AGENT, type HttpToolSpec } from '../../../lambdas/agent/tools/http.ts';
import { resetInstanceState } from '../../../lambdas/instance/state.ts';

/**
 * httpTool against a real tool server on 127.0.0.1 (loopback let through by ALLOW_LOOPBACK_URLS=1, as the outbound
 * guard allows only in tests and the local runtime): the model's input arrives as a JSON POST with the configured
 * headers, the answer comes back as text, and every failure (HTTP error, redirect, time-out, oversized body, refused
 * URL) is an is_error outcome that never throws and never shows the configured secrets.
 */

const SECRET = 'Bearer sk-tool-secret-4242';
let server: Server;
let base: string;
const hits = new Map<string, number>();

function route(req: IncomingMessage, res: ServerResponse, body: string): void {
  const path = new URL(req.url ?? '/', 'http://x').pathname;
  hits.set(path, (hits.get(path) ?? 0) + 1);
  switch (path) {
    case '/echo':
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ method: req.method, headers: req.headers, body }));
      return;
    case '/text':
      res.end('the answer is 42');
      return;
    case '/fail':
      res.statusCode = 500;
      res.end('boom: the tool broke');
      return;
    case '/redirect':
      res.writeHead(302, { location: '/text' }).end('moved');
      return;
    case '/slow':
      setTimeout(() => res.end('too late'), 3_000).unref();
      return;
    case '/big':
      res.end('x'.repeat(1024 * 1024));
      return;
    default:
      res.statusCode = 404;
      res.end('no such tool');
  }
}

beforeAll(async () => {
  process.env.ALLOW_LOOPBACK_URLS = '1';
  resetInstanceState();
  server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => route(req, res, Buffer.concat(chunks).toString('utf8')));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  delete process.env.ALLOW_LOOPBACK_URLS;
  resetInstanceState();
});

const schema = { type: 'object', properties: { q: { type: 'string' } } };
const tool = (path: string, extra: Partial<HttpToolSpec> = {}, opts?: Parameters<typeof httpTool>[1]) =>
  httpTool({ name: 'lookup', description: 'Looks things up', input_schema: schema, url: `${base}${path}`, ...extra }, opts);
const run = (t: ReturnType<typeof httpTool>, input: unknown = { q: 'hi' }, signal = new AbortController().signal) => t.run(input, signal);

describe('httpTool', () => {
  it('offers the spec as the tool definition', () => {
    const t = tool('/text');
    expect(t).toMatchObject({ name: 'lookup', description: 'Looks things up', input_schema: schema });
  });

  it('POSTs the input as JSON with the configured headers and a user-agent naming the gateway', async () => {
    const out = await run(tool('/echo', { headers: { authorization: SECRET, 'x-tool-tenant': 't-1' } }), { q: 'weather', n: 3 });
    expect(out.isError).toBe(false);
    const seen = JSON.parse(out.content) as { method: string; headers: Record<string, string>; body: string };
    expect(seen.method).toBe('POST');
    expect(seen.headers['content-type']).toBe('application/json');
    expect(seen.headers['user-agent']).toBe(TOOL_USER_AGENT);
    expect(seen.headers.authorization).toBe(SECRET);
    expect(seen.headers['x-tool-tenant']).toBe('t-1');
    expect(JSON.parse(seen.body)).toEqual({ q: 'weather', n: 3 });
  });

  it('returns the response text as the result', async () => {
    expect(await run(tool('/text'))).toEqual({ content: 'the answer is 42', isError: false });
  });

  it('turns a 500 into an is_error result with the status and body', async () => {
    expect(await run(tool('/fail'))).toEqual({ content: 'HTTP 500: boom: the tool broke', isError: true });
  });

  it('does not follow a redirect: a 302 is an is_error result', async () => {
    const before = hits.get('/text') ?? 0;
    const out = await run(tool('/redirect'));
    expect(out).toEqual({ content: 'HTTP 302: moved', isError: true });
    expect(hits.get('/text') ?? 0).toBe(before);
  });

  it('times out a slow tool server', async () => {
    const started = Date.now();
    const out = await run(tool('/slow', {}, { timeoutMs: 200 }));
    expect(out).toEqual({ content: 'timed out after 200 ms', isError: true });
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('caps a 1 MB answer at 100,000 bytes by default and says so', async () => {
    const out = await run(tool('/big'));
    expect(out.isError).toBe(false);
    expect(out.content).toBe(`${'x'.repeat(100_000)}\n[truncated]`);
  });

  it('caps at maxResultBytes, an error body too', async () => {
    expect((await run(tool('/big', {}, { maxResultBytes: 10 }))).content).toBe('xxxxxxxxxx\n[truncated]');
    expect(await run(tool('/fail', {}, { maxResultBytes: 4 }))).toEqual({ content: 'HTTP 500: boom\n[truncated]', isError: true });
  });

  it('refuses the same loopback URL when loopback is not allowed', async () => {
    delete process.env.ALLOW_LOOPBACK_URLS;
    resetInstanceState();
    try {
      const before = hits.get('/text') ?? 0;
      const out = await run(tool('/text', { headers: { authorization: SECRET } }));
      expect(out.isError).toBe(true);
      expect(out.content).toMatch(/^refused: address/);
      expect(out.content).not.toContain(SECRET);
      expect(hits.get('/text') ?? 0).toBe(before);
    } finally {
      process.env.ALLOW_LOOPBACK_URLS = '1';
      resetInstanceState();
    }
  });

  it('refuses a URL with another scheme or with credentials', async () => {
    const ftp = await run(httpTool({ name: 't', input_schema: schema, url: 'ftp://127.0.0.1/x' }));
    expect(ftp).toMatchObject({ isError: true, content: expect.stringMatching(/^refused: scheme/) });
    const creds = await run(httpTool({ name: 't', input_schema: schema, url: `http://user:pw@127.0.0.1:1/x` }));
    expect(creds).toMatchObject({ isError: true, content: expect.stringMatching(/^refused: credentials/) });
  });

  it('reports an unreachable server without the configured secrets', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const out = await run(httpTool({ name: 't', input_schema: schema, url: `http://127.0.0.1:${port}/`, headers: { authorization: SECRET } }));
    expect(out.isError).toBe(true);
    expect(out.content).toMatch(/ECONNREFUSED/);
    expect(out.content).not.toContain(SECRET);
  });

  it('reports an invalid header without its value', async () => {
    const bad = 'sk-bad-secret\r\nx-injected: 1';
    const out = await run(tool('/echo', { headers: { authorization: bad } }));
    expect(out.isError).toBe(true);
    expect(out.content).toContain('invalid header "authorization"');
    expect(out.content).not.toContain('sk-bad-secret');
  });

  it('says "aborted" when the run is cancelled', async () => {
    const controller = new AbortController();
    const pending = run(tool('/slow'), {}, controller.signal);
    setTimeout(() => controller.abort(), 50);
    expect(await pending).toEqual({ content: 'aborted', isError: true });
  });
});
