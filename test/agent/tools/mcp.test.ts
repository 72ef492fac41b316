import { createServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import { CallToolRequestSchema, ListToolsRequestSchema } from '@modelcontextprotocol/sdk/types.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { z } from 'zod';
import { MAX_MCP_TOOLS_PER_SERVER, MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_DEPTH, MCP_MAX_MESSAGE_BYTES } from '../../../lambdas/agent/tools/limits.ts';
import { connectMcpServers, type McpConnection, type McpServerSpec, schemaProblem } from '../../../lambdas/agent/tools/mcp.ts';
import { HTTP_TOOL_TIMEOUT_MS, MCP_TOOL_TIMEOUT_MS } from '../../../lambdas/config/timing.ts';
import { resetInstanceState } from '../../../lambdas/instance/state.ts';
import { flood, interceptingMcpHandler, streamableMcpHandler } from '../../support/mcp.ts';

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

/**
 * What the gateway reads of an MCP server is capped beneath the SDK (tools/mcp-fetch.ts, docs/prompt.md "Limits on
 * tools"): a JSON body at MCP_MAX_MESSAGE_BYTES, an event stream at that much per event. The server here is the SDK's
 * own McpServer, with a few answers written by the test itself — what the SDK's server could not send: 50 MB of one
 * tool result, as JSON or as one endless SSE event, and tool lists too long, too large, or with absurd schemas.
 * Each flood records how many bytes the server managed to hand to its socket before the gateway closed it.
 */
describe('limits on what is read of a server', () => {
  const FLOOD_BYTES = 50 * 1024 * 1024;
  let server: HttpServer;
  let url: string;
  const floods: Array<{ sent: () => number; done: Promise<void> }> = [];
  /** The tool list the next tools/list is answered with (undefined: the SDK server's own). */
  let list: { text: string } | undefined;

  const deepSchemaText = (levels: number) => `${'{"type":"object","properties":{"a":'.repeat(levels)}{"type":"string"}${'}}'.repeat(levels)}`;

  beforeAll(async () => {
    const built = () => {
      const s = new McpServer({ name: 'floods', version: '1.0.0' });
      for (const name of ['flood_sse', 'flood_json', 'slow'])
        s.registerTool(name, { description: name }, async () => ({ content: [{ type: 'text', text: 'unreached' }] }));
      s.registerTool('echo', { description: 'Echoes', inputSchema: { text: z.string() } }, async ({ text }) => ({ content: [{ type: 'text', text }] }));
      return s;
    };
    const handler = interceptingMcpHandler(built, (message, res) => {
      const id = JSON.stringify(message.id);
      if (message.method === 'tools/list' && list) {
        res.writeHead(200, { 'content-type': 'application/json' }).end(`{"jsonrpc":"2.0","id":${id},"result":${list.text}}`);
        return true;
      }
      if (message.method !== 'tools/call') return false;
      const prefix = `{"jsonrpc":"2.0","id":${id},"result":{"content":[{"type":"text","text":"`;
      switch (message.params?.name) {
        case 'flood_sse':
          // One event that goes on for 50 MB (and would end there, a valid answer, were it all read).
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          floods.push(flood(res, { prefix: `event: message\ndata: ${prefix}`, total: FLOOD_BYTES, suffix: '"}]}}\n\n' }));
          return true;
        case 'flood_json':
          res.writeHead(200, { 'content-type': 'application/json' });
          floods.push(flood(res, { prefix, total: FLOOD_BYTES, suffix: '"}]}}' }));
          return true;
        case 'slow':
          return true; // never answered
        default:
          return false;
      }
    });
    ({ http: server, url } = await listen(handler, '/mcp'));
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  const floods$ = (): McpServerSpec => ({ type: 'http', url, headers: { authorization: TOKEN } });
  const toolOf = (c: McpConnection, name: string) => c.tools.find((t) => t.name === `mcp__floods__${name}`)!;

  it('one endless SSE event: an is_error result naming the limit, at once, after reading about 4 MiB of it', async () => {
    const c = await connect({ floods: floods$() });
    const rss = process.memoryUsage().rss;
    const started = Date.now();
    const out = await toolOf(c, 'flood_sse').run({}, signal());
    expect(out).toEqual({
      content: `the server sent a message larger than ${MCP_MAX_MESSAGE_BYTES} bytes, the most the gateway reads of one MCP message`,
      isError: true,
    });
    expect(Date.now() - started).toBeLessThan(MCP_TOOL_TIMEOUT_MS);
    await floods.at(-1)!.done;
    // What the server got into its socket: the cap, plus what the kernel's socket buffers held.
    expect(floods.at(-1)!.sent()).toBeLessThan(MCP_MAX_MESSAGE_BYTES + 12 * 1024 * 1024);
    expect(process.memoryUsage().rss - rss).toBeLessThan(64 * 1024 * 1024);
    // The connection is still usable: only that call failed.
    expect(await toolOf(c, 'echo').run({ text: 'still here' }, signal())).toEqual({ content: 'still here', isError: false });
  });

  it('five 50 MB JSON answers at once: five is_error results, each read to the cap and no further', async () => {
    const c = await connect({ floods: floods$() });
    const before = floods.length;
    const rss = process.memoryUsage().rss;
    const outs = await Promise.all(Array.from({ length: 5 }, () => toolOf(c, 'flood_json').run({}, signal())));
    for (const out of outs) expect(out).toEqual({ content: expect.stringContaining(`larger than ${MCP_MAX_MESSAGE_BYTES} bytes`), isError: true });
    const mine = floods.slice(before);
    expect(mine).toHaveLength(5);
    await Promise.all(mine.map((f) => f.done));
    for (const f of mine) expect(f.sent()).toBeLessThan(MCP_MAX_MESSAGE_BYTES + 12 * 1024 * 1024);
    expect(process.memoryUsage().rss - rss).toBeLessThan(128 * 1024 * 1024);
  });

  it('a call the server never answers: an is_error result at the call time-out', async () => {
    const c = await connect({ floods: floods$() }, { callTimeoutMs: 400 });
    const started = Date.now();
    expect(await toolOf(c, 'slow').run({}, signal())).toEqual({ content: 'timed out after 400 ms', isError: true });
    expect(Date.now() - started).toBeLessThan(3_000);
  });

  it('the default call time-out is an HTTP tool’s', () => {
    expect(MCP_TOOL_TIMEOUT_MS).toBe(HTTP_TOOL_TIMEOUT_MS);
    expect(MCP_TOOL_TIMEOUT_MS).toBe(30_000);
  });

  describe('tool lists', () => {
    afterAll(() => {
      list = undefined;
    });

    it('a tools/list answer over the cap fails the server with the reason', async () => {
      list = { text: JSON.stringify({ tools: [{ name: 'big', description: 'd'.repeat(MCP_MAX_MESSAGE_BYTES), inputSchema: { type: 'object' } }] }) };
      const c = await connect({ floods: floods$(), calc: calc() });
      expect(c.servers[0]).toEqual({
        name: 'floods',
        status: 'failed',
        tools: 0,
        error: `tools/list: the server sent a message larger than ${MCP_MAX_MESSAGE_BYTES} bytes, the most the gateway reads of one MCP message`,
      });
      expect(c.servers[1]!.status).toBe('connected');
    });

    it(`more than ${MAX_MCP_TOOLS_PER_SERVER} tools fails the server with the reason`, async () => {
      const tools = Array.from({ length: MAX_MCP_TOOLS_PER_SERVER + 1 }, (_, i) => ({ name: `t${i}`, inputSchema: { type: 'object' } }));
      list = { text: JSON.stringify({ tools }) };
      const c = await connect({ floods: floods$() });
      expect(c.servers[0]).toEqual({
        name: 'floods',
        status: 'failed',
        tools: 0,
        error: `tools/list: the server lists more than ${MAX_MCP_TOOLS_PER_SERVER} tools, the most one server may offer`,
      });
      list = { text: JSON.stringify({ tools: tools.slice(1) }) };
      expect((await connect({ floods: floods$() })).servers[0]).toEqual({ name: 'floods', status: 'connected', tools: MAX_MCP_TOOLS_PER_SERVER });
    });

    it('a schema 5,000 levels deep, or too large, is skipped with the reason; the other tools are offered', async () => {
      const big = {
        type: 'object',
        properties: Object.fromEntries(Array.from({ length: 2_000 }, (_, i) => [`p${i}`, { type: 'string', description: 'x'.repeat(30) }])),
      };
      // Exactly MAX_TOOL_SCHEMA_DEPTH levels: the object, then 31 × (schema, properties), then the innermost schema.
      const edge = { type: 'object', x: JSON.parse(deepSchemaText(MAX_TOOL_SCHEMA_DEPTH / 2 - 1)) as unknown };
      list = {
        text: `{"tools":[{"name":"deep","inputSchema":${deepSchemaText(5_000)}},{"name":"big","inputSchema":${JSON.stringify(big)}},{"name":"edge","inputSchema":${JSON.stringify(edge)}},{"name":"fine","inputSchema":{"type":"object"}}]}`,
      };
      const c = await connect({ floods: floods$() });
      expect(c.servers[0]).toEqual({
        name: 'floods',
        status: 'connected',
        tools: 2,
        skipped: [
          { tool: 'deep', reason: `input_schema nests deeper than ${MAX_TOOL_SCHEMA_DEPTH} levels` },
          { tool: 'big', reason: `input_schema is ${Buffer.byteLength(JSON.stringify(big))} bytes of JSON, more than ${MAX_TOOL_SCHEMA_BYTES}` },
        ],
      });
      expect(c.tools.map((t) => t.name)).toEqual(['mcp__floods__edge', 'mcp__floods__fine']);
      expect(schemaProblem(edge)).toBeUndefined();
      expect(schemaProblem({ wrap: edge })).toBe(`input_schema nests deeper than ${MAX_TOOL_SCHEMA_DEPTH} levels`);
    });
  });
});

describe('limits over the older SSE transport, whose one stream carries every answer', () => {
  it('an endless event on that stream closes the connection: the pending call and every later one fail with the reason', async () => {
    let stream: ServerResponse | undefined;
    let sent: { sent: () => number; done: Promise<void> } | undefined;
    const sessions = new Map<string, SSEServerTransport>();
    const s = await listen((req, res) => {
      const u = new URL(req.url ?? '/', 'http://x');
      void (async () => {
        if (req.method === 'GET') {
          const transport = new SSEServerTransport('/messages', res);
          sessions.set(transport.sessionId, transport);
          stream = res;
          await pagedServer().connect(transport);
          return;
        }
        const transport = sessions.get(u.searchParams.get('sessionId') ?? '')!;
        const chunks: Buffer[] = [];
        for await (const c of req) chunks.push(c as Buffer);
        const message = JSON.parse(Buffer.concat(chunks).toString('utf8')) as { id?: number; method?: string };
        if (message.method === 'tools/call') {
          res.writeHead(202).end('Accepted');
          sent = flood(stream!, {
            prefix: `event: message\ndata: {"jsonrpc":"2.0","id":${message.id},"result":{"content":[{"type":"text","text":"`,
            total: 50 * 1024 * 1024,
          });
          return;
        }
        await transport.handlePostMessage(req, res, message);
      })().catch(() => res.headersSent || res.writeHead(500).end());
    }, '/sse');
    try {
      const c = await connect({ paged: { type: 'sse', url: s.url, headers: { authorization: TOKEN } } });
      expect(c.servers[0]!.status).toBe('connected');
      const reason = `the server sent a message larger than ${MCP_MAX_MESSAGE_BYTES} bytes, the most the gateway reads of one MCP message; its connection was closed, so its tools cannot be called again in this run`;
      const started = Date.now();
      expect(await c.tools[0]!.run({ text: 'hi' }, signal())).toEqual({ content: reason, isError: true });
      expect(Date.now() - started).toBeLessThan(MCP_TOOL_TIMEOUT_MS);
      await sent!.done;
      expect(sent!.sent()).toBeLessThan(MCP_MAX_MESSAGE_BYTES + 12 * 1024 * 1024);
      expect(await c.tools[1]!.run({ text: 'again' }, signal())).toEqual({ content: reason, isError: true });
    } finally {
      s.http.closeAllConnections();
      await new Promise((resolve) => s.http.close(resolve));
    }
  });
});

describe('server names', () => {
  it('a name containing "__" is failed without a connection: its tools would read as another server’s', async () => {
    const before = streamable.auth.length;
    const c = await connect({ a__b: calc() });
    expect(c.servers).toEqual([
      { name: 'a__b', status: 'failed', tools: 0, error: 'server name must not contain "__", which separates the server from the tool' },
    ]);
    expect(streamable.auth.length).toBe(before);
  });

  it('each tool knows the server it came from (what an mcp__<server> rule matches)', async () => {
    const c = await connect({ calc: calc() });
    expect(c.tools.map((t) => t.server)).toEqual(['calc', 'calc', 'calc', 'calc']);
  });
});
