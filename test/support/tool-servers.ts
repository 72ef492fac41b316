import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { interceptingMcpHandler, streamableMcpHandler } from './mcp.ts';

/**
 * The tools an agent run calls in tests (/prompt, /ws): real HTTP servers on 127.0.0.1, one for remote HTTP tools and
 * one with the MCP SDK's own server, each recording what it was called with.
 */

export async function listen(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/** Two HTTP tools: /weather answers from the city, /time from the zone; both record what they got. */
export async function toolServer() {
  const calls: { path: string; body: unknown; headers: IncomingMessage['headers'] }[] = [];
  const { server, url } = await listen((req, res) => {
    let text = '';
    req
      .on('data', (c) => (text += c))
      .on('end', () => {
        const body = JSON.parse(text || '{}') as Record<string, string>;
        calls.push({ path: req.url ?? '', body, headers: req.headers });
        if (req.url === '/weather') res.end(`18°C in ${body.city}`);
        else if (req.url === '/time') res.end(`14:00 ${body.tz}`);
        else res.writeHead(404).end('no such tool');
      });
  });
  return { server, url, calls };
}

/** The MCP SDK's own server over Streamable HTTP, with two tools: add (its calls recorded), and secret (never to be offered). */
export async function mcpServer() {
  const calls: { a: number; b: number }[] = [];
  const { server, url } = await listen(
    streamableMcpHandler(() => {
      const server = new McpServer({ name: 'calc', version: '1.0.0' });
      server.registerTool('add', { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => {
        calls.push({ a, b });
        return { content: [{ type: 'text', text: String(a + b) }] };
      });
      server.registerTool('secret', { description: 'Never offered' }, async () => ({ content: [{ type: 'text', text: 'leaked' }] }));
      return server;
    }),
  );
  return { server, url, calls };
}

/**
 * An HTTP tool at /count that counts how many calls and connections it has at once. Each call is held until
 * `together` are in (or, for the last batch, until the `total`-th call is in), then all held are answered
 * (`counted <n>`): so the most it ever holds is exactly what its caller let run at once, with no timing involved.
 */
export async function countingToolServer({ together, total }: { together: number; total: number }) {
  const stats = { calls: 0, inFlight: 0, maxInFlight: 0, sockets: 0, maxSockets: 0, socketsOpened: 0 };
  let held: Array<{ res: ServerResponse; n: unknown }> = [];
  const { server, url } = await listen((req, res) => {
    let text = '';
    req
      .on('data', (c) => (text += c))
      .on('end', () => {
        stats.calls++;
        stats.inFlight++;
        stats.maxInFlight = Math.max(stats.maxInFlight, stats.inFlight);
        held.push({ res, n: (JSON.parse(text || '{}') as { n?: unknown }).n });
        if (held.length >= together || stats.calls === total) {
          for (const h of held) {
            stats.inFlight--;
            h.res.end(`counted ${h.n}`);
          }
          held = [];
        }
      });
  });
  server.on('connection', (socket) => {
    stats.socketsOpened++;
    stats.maxSockets = Math.max(stats.maxSockets, ++stats.sockets);
    socket.on('close', () => stats.sockets--);
  });
  return { server, url, stats };
}

/** A JSON Schema text nesting `levels` × (schema, properties): written as text, since JSON.stringify cannot go that deep. */
export const deepSchemaText = (levels: number) => `${'{"type":"object","properties":{"a":'.repeat(levels)}{"type":"string"}${'}}'.repeat(levels)}`;

/**
 * The MCP SDK's own server (tool `add`) whose tools/list also offers `deep`, a tool whose input_schema nests 5,000
 * levels — more than JSON.stringify can write back into a model request.
 */
export async function absurdMcpServer() {
  const build = () => {
    const server = new McpServer({ name: 'absurd', version: '1.0.0' });
    server.registerTool('add', { description: 'Adds two numbers', inputSchema: { a: z.number(), b: z.number() } }, async ({ a, b }) => ({
      content: [{ type: 'text', text: String(a + b) }],
    }));
    return server;
  };
  const add =
    '{"name":"add","description":"Adds two numbers","inputSchema":{"type":"object","properties":{"a":{"type":"number"},"b":{"type":"number"}},"required":["a","b"]}}';
  const { server, url } = await listen(
    interceptingMcpHandler(build, (message, res) => {
      if (message.method !== 'tools/list') return false;
      const tools = `[${add},{"name":"deep","description":"Too deep","inputSchema":${deepSchemaText(5_000)}}]`;
      res.writeHead(200, { 'content-type': 'application/json' }).end(`{"jsonrpc":"2.0","id":${JSON.stringify(message.id)},"result":{"tools":${tools}}}`);
      return true;
    }),
  );
  return { server, url };
}
