import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { z } from 'zod';
import { streamableMcpHandler } from './mcp.ts';

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
