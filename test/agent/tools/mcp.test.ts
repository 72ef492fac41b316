import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { connectMcpServers, type McpConnection, type McpServerSpec } from '../../../lambdas/agent/tools/mcp.ts';
import { resetInstanceState } from '../../../lambdas/instance/state.ts';
import { streamableMcpHandler } from '../../support/mcp.ts';

/**
 * connectMcpServers against the SDK's own servers, started here on 127.0.0.1 (loopback let through by
 * ALLOW_LOOPBACK_URLS=1): a McpServer over Streamable HTTP and a low-level Server over the older SSE transport, both
 * demanding an Authorization header. Tools are offered as mcp__<server>__<tool> with their schemas, calls come back
 * as text with isError kept, and a server that cannot be used (closed port, refused URL, silent, wrong credentials, bad
 * name) is `failed` without costing the others.
 */

const TOKEN = 'Bearer mcp-test-token-777';
const signal = () => new AbortController().signal;

interface TestServer {
  http: HttpServer;
  url: string;
  /** Authorization header of every request, in order. */
  auth: Array<string | undefined>;
  methods: string[];
}

async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void, path: string): Promise<TestServer> {
  const auth: Array<string | undefined> = [];
  const methods: string[] = [];
  const http = createServer((req, res) => {
    auth.push(req.headers.authorization);
    methods.push(req.method ?? '');
    if (req.headers.authorization !== TOKEN) {
      res.writeHead(401).end('unauthorized');
      return;
    }
    handler(req, res);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  return { http, url: `http://127.0.0.1:${(http.address() as AddressInfo).port}${path}`, auth, methods };
}

/** The Streamable HTTP server: McpServer (high-level API, zod schemas), one transport per session. */
function calcServer(): McpServer {
  const server = new McpServer({ name: 'calc', version: '1.0.0' });
  server.registerTool('add', { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({
    content: [{ type: 'text', text: String(a + b) }],
  }));
  server.registerTool('fail', { description: 'Always fails' }, async () => ({
    content: [{ type: 'text', text: 'it went wrong' }],
    isError: true,
  }));
  server.registerTool('picture', { description: 'Text and an image' }, async () => ({
    content: [
      { type: 'text', text: 'here it is' },
      { type: 'image', data: Buffer.from('png').toString('base64'), mimeType: 'image/png' },
      { type: 'text', text: 'enjoy' },
    ],
  }));
  server.registerTool('big', { description: 'A 1 MB answer' }, async () => ({ content: [{ type: 'text', text: 'y'.repeat(1024 * 1024) }] }));
  return server;
}

async function streamableServer(): Promise<TestServer> {
  return listen(streamableMcpHandler(calcServer), '/mcp');
}

/** The SSE server: a low-level Server, so its tool list can come in pages (nextCursor) and carry a name the model would refuse. */
function pagedServer(): Server {
  const server = new Server({ name: 'paged', version: '1.0.0' }, { capabilities: { tools: {} } });
  const schema = { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] };
  const pages: Record<string, { tools: object[]; nextCursor?: string }> = {
    first: { tools: [{ name: 'echo', description: 'Echoes text', inputSchema: schema }], nextCursor: 'p2' },
    p2: {
      tools: [
        { name: 'upper', inputSchema: schema },
        { name: 'bad.name', inputSchema: schema },
      ],
    },
  };
  server.setRequestHandler(ListToolsRequestSchema, async (req) => pages[req.params?.cursor ?? 'first'] as never);
  server.setRequestHandler(CallToolRequestSchema, async (req) => {
    const text = String((req.params.arguments as { text?: unknown } | undefined)?.text);
    if (req.params.name === 'echo') return { content: [{ type: 'text', text }] };
    if (req.params.name === 'upper') return { content: [{ type: 'text', text: text.toUpperCase() }] };
    throw new Error(`no tool ${req.params.name}`);
  });
  return server;
}

async function sseServer(): Promise<TestServer> {
  const sessions = new Map<string, SSEServerTransport>();
  return listen((req, res) => {
    const url = new URL(req.url ?? '/', 'http://x');
    void (async () => {
      if (req.method === 'GET' && url.pathname === '/sse') {
        const transport = new SSEServerTransport('/messages', res);
        sessions.set(transport.sessionId, transport);
        res.on('close', () => sessions.delete(transport.sessionId));
        await pagedServer().connect(transport);
        return;
      }
      const transport = sessions.get(url.searchParams.get('sessionId') ?? '');
      if (req.method !== 'POST' || url.pathname !== '/messages' || !transport) {
        res.writeHead(404).end('no session');
        return;
      }
      await transport.handlePostMessage(req, res);
    })().catch(() => res.headersSent || res.writeHead(500).end());
  }, '/sse');
}

async function closedPortUrl(): Promise<string> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const port = (s.address() as AddressInfo).port;
  await new Promise((resolve) => s.close(resolve));
  return `http://127.0.0.1:${port}/mcp`;
}

let streamable: TestServer;
let sse: TestServer;
let silent: TestServer;
const open: McpConnection[] = [];
const connect = async (...args: Parameters<typeof connectMcpServers>) => {
  const connection = await connectMcpServers(...args);
  open.push(connection);
  return connection;
};
const calc = (): McpServerSpec => ({ type: 'http', url: streamable.url, headers: { authorization: TOKEN } });

beforeAll(async () => {
  process.env.ALLOW_LOOPBACK_URLS = '1';
  resetInstanceState();
  streamable = await streamableServer();
  sse = await sseServer();
  silent = await listen(() => undefined, '/mcp'); // accepts, never answers
});

afterAll(async () => {
  await Promise.all(open.map((c) => c.close()));
  for (const s of [streamable, sse, silent]) {
    s.http.closeAllConnections();
    await new Promise((resolve) => s.http.close(resolve));
  }
  delete process.env.ALLOW_LOOPBACK_URLS;
  resetInstanceState();
});

describe('connectMcpServers over Streamable HTTP', () => {
  it('offers the tools as mcp__<server>__<tool> with their descriptions and schemas', async () => {
    const c = await connect({ calc: calc() });
    expect(c.servers).toEqual([{ name: 'calc', status: 'connected', tools: 4 }]);
    expect(c.tools.map((t) => t.name)).toEqual(['mcp__calc__add', 'mcp__calc__fail', 'mcp__calc__picture', 'mcp__calc__big']);
    const add = c.tools[0]!;
    expect(add.description).toBe('Adds two numbers');
    expect(add.input_schema).toMatchObject({
      type: 'object',
      properties: { a: { type: 'number' }, b: { type: 'number' } },
      required: ['a', 'b'],
    });
  });

  it('calls a tool and returns its text; isError is propagated; other parts are summarised', async () => {
    const c = await connect({ calc: calc() });
    const tool = (name: string) => c.tools.find((t) => t.name === `mcp__calc__${name}`)!;
    expect(await tool('add').run({ a: 2, b: 40 }, signal())).toEqual({ content: '42', isError: false });
    expect(await tool('fail').run({}, signal())).toEqual({ content: 'it went wrong', isError: true });
    expect(await tool('picture').run({}, signal())).toEqual({ content: 'here it is\n[image: image/png]\nenjoy', isError: false });
  });

  it('an input the server rejects is an is_error result', async () => {
    const c = await connect({ calc: calc() });
    const out = await c.tools[0]!.run({ a: 'two' }, signal());
    expect(out.isError).toBe(true);
  });

  it('caps a large result like HTTP tools', async () => {
    const c = await connect({ calc: calc() }, { maxResultBytes: 1_000 });
    const out = await c.tools.find((t) => t.name === 'mcp__calc__big')!.run({}, signal());
    expect(out).toEqual({ content: `${'y'.repeat(1_000)}\n[truncated]`, isError: false });
  });

  it('sends the configured headers with every request', async () => {
    const before = streamable.auth.length;
    const c = await connect({ calc: calc() });
    await c.tools[0]!.run({ a: 1, b: 1 }, signal());
    const seen = streamable.auth.slice(before);
    expect(seen.length).toBeGreaterThanOrEqual(3); // initialize, initialized, tools/list, tools/call, …
    expect(seen.every((a) => a === TOKEN)).toBe(true);
  });

  it('a server that refuses the credentials is failed, without the credentials in the error', async () => {
    const c = await connect({ calc: { type: 'http', url: streamable.url, headers: { authorization: 'Bearer wrong-token-123' } } });
    expect(c.tools).toEqual([]);
    expect(c.servers[0]).toMatchObject({ name: 'calc', status: 'failed', tools: 0, error: expect.stringMatching(/^HTTP 401: /) });
    expect(c.servers[0]!.error).not.toContain('wrong-token-123');
  });

  it('close() ends the session, is idempotent and never throws; a call after it is an is_error result', async () => {
    const c = await connect({ calc: calc() });
    const deletes = () => streamable.methods.filter((m) => m === 'DELETE').length;
    const before = deletes();
    await Promise.all([c.close(), c.close()]);
    await c.close();
    expect(deletes()).toBe(before + 1);
    const out = await c.tools[0]!.run({ a: 1, b: 2 }, signal());
    expect(out.isError).toBe(true);
    expect(out.content).toMatch(/not connected/i);
  });

  it('a call aborted by the run is an is_error result', async () => {
    const c = await connect({ calc: calc() });
    const controller = new AbortController();
    controller.abort();
    expect(await c.tools[0]!.run({ a: 1, b: 2 }, controller.signal)).toEqual({ content: 'aborted', isError: true });
  });
});

describe('connectMcpServers over SSE', () => {
  // SSEServerTransport and SSEClientTransport are deprecated but still shipped by the SDK 1.x this repo pins.
  it('follows nextCursor pages, skips a name the model would refuse, and calls through the SSE session', async () => {
    const c = await connect({ paged: { type: 'sse', url: sse.url, headers: { authorization: TOKEN } } });
    expect(c.servers).toEqual([
      {
        name: 'paged',
        status: 'connected',
        tools: 2,
        skipped: [{ tool: 'bad.name', reason: expect.stringContaining('letters, digits') }],
      },
    ]);
    expect(c.tools.map((t) => t.name)).toEqual(['mcp__paged__echo', 'mcp__paged__upper']);
    expect(c.tools[0]!.input_schema).toEqual({ type: 'object', properties: { text: { type: 'string' } }, required: ['text'] });
    expect(await c.tools[1]!.run({ text: 'shout' }, signal())).toEqual({ content: 'SHOUT', isError: false });
    expect(sse.auth.every((a) => a === TOKEN)).toBe(true);
    expect(sse.methods).toContain('GET');
    expect(sse.methods).toContain('POST');
  });
});

describe('one server failing does not fail the others', () => {
  it('an unreachable server (closed port) is failed while the others work', async () => {
    const c = await connect({
      calc: calc(),
      down: { type: 'http', url: await closedPortUrl() },
      paged: { type: 'sse', url: sse.url, headers: { authorization: TOKEN } },
    });
    expect(c.servers.map((s) => [s.name, s.status, s.tools])).toEqual([
      ['calc', 'connected', 4],
      ['down', 'failed', 0],
      ['paged', 'connected', 2],
    ]);
    expect(c.servers[1]!.error).toMatch(/ECONNREFUSED/);
    expect(c.tools.some((t) => t.name.startsWith('mcp__down__'))).toBe(false);
    expect(await c.tools[0]!.run({ a: 20, b: 22 }, signal())).toEqual({ content: '42', isError: false });
  });

  it('a server that never answers is failed at the time-out', async () => {
    const started = Date.now();
    const c = await connect({ calc: calc(), silent: { type: 'http', url: silent.url, headers: { authorization: TOKEN } } }, { timeoutMs: 300 });
    expect(c.servers[1]).toEqual({ name: 'silent', status: 'failed', tools: 0, error: 'timed out after 300 ms' });
    expect(c.servers[0]!.status).toBe('connected');
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('a URL the outbound guard refuses is failed with the reason', async () => {
    delete process.env.ALLOW_LOOPBACK_URLS;
    resetInstanceState();
    try {
      const before = streamable.auth.length;
      const c = await connect({ calc: calc(), meta: { type: 'sse', url: 'http://169.254.169.254/sse' } });
      expect(c.servers.map((s) => s.status)).toEqual(['failed', 'failed']);
      expect(c.servers[0]!.error).toMatch(/^refused: address/);
      expect(c.servers[1]!.error).toMatch(/^refused: address/);
      expect(streamable.auth.length).toBe(before);
    } finally {
      process.env.ALLOW_LOOPBACK_URLS = '1';
      resetInstanceState();
    }
  });

  it('a server name that cannot prefix a tool name is failed without a connection', async () => {
    const before = sse.auth.length;
    const paged: McpServerSpec = { type: 'sse', url: sse.url, headers: { authorization: TOKEN } };
    const c = await connect({ 'my.server': paged, [`s${'x'.repeat(120)}`]: paged, calc: calc() });
    expect(c.servers.map((s) => s.status)).toEqual(['failed', 'failed', 'connected']);
    expect(c.servers[0]!.error).toContain('server name');
    expect(c.servers[1]!.error).toContain('longer than');
    expect(c.tools.every((t) => /^[a-zA-Z0-9_-]{1,128}$/.test(t.name))).toBe(true);
    expect(sse.auth.length).toBe(before);
  });

  it('the caller aborting fails every pending server', async () => {
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 100);
    const c = await connect({ silent: { type: 'http', url: silent.url, headers: { authorization: TOKEN } } }, { signal: controller.signal });
    expect(c.servers).toEqual([{ name: 'silent', status: 'failed', tools: 0, error: 'aborted' }]);
  });

  it('no servers, no tools', async () => {
    const c = await connect({});
    expect(c).toMatchObject({ tools: [], servers: [] });
  });
});
