import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/**
 * A node:http handler serving an MCP server over Streamable HTTP, as the SDK's own examples do: one transport (and
 * one server built by `build`) per session, found again by the `mcp-session-id` header.
 */
export function streamableMcpHandler(build: () => McpServer): (req: IncomingMessage & { body?: unknown }, res: ServerResponse) => void {
  const sessions = new Map<string, StreamableHTTPServerTransport>();
  return (req, res) => {
    const id = req.headers['mcp-session-id'];
    let transport = typeof id === 'string' ? sessions.get(id) : undefined;
    void (async () => {
      if (!transport) {
        const created = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(),
          onsessioninitialized: (sid) => void sessions.set(sid, created),
          onsessionclosed: (sid) => void sessions.delete(sid),
        });
        transport = created;
        await build().connect(created);
      }
      await transport.handleRequest(req, res, req.body);
    })().catch(() => res.headersSent || res.writeHead(500).end());
  };
}

/**
 * A JSON-RPC request the MCP server's handler lets a test answer itself (a tools/call whose answer the SDK's server
 * could not send: endless, or larger than memory); true when it did.
 */
export type McpIntercept = (message: { id?: string | number; method?: string; params?: { name?: string } }, res: ServerResponse) => boolean;

/**
 * `streamableMcpHandler`, with `intercept` asked first about every POSTed message: what it does not answer goes to the
 * SDK's server as usual (the body, already read, handed over parsed).
 */
export function interceptingMcpHandler(build: () => McpServer, intercept: McpIntercept): (req: IncomingMessage, res: ServerResponse) => void {
  const sdk = streamableMcpHandler(build);
  return (req, res) => {
    if (req.method !== 'POST') {
      sdk(req, res);
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const parsed = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
      if (!Array.isArray(parsed) && intercept(parsed as Parameters<McpIntercept>[0], res)) return;
      sdk(Object.assign(req, { body: parsed }), res);
    });
  };
}

/**
 * Writes `total` bytes of `prefix` + filler + `suffix` to `res` as fast as the reader takes them, never holding more
 * than the socket's buffer; `sent()` is how many bytes were handed to the socket before it closed or the end.
 */
export function flood(
  res: ServerResponse,
  { prefix, total, suffix = '' }: { prefix: string; total: number; suffix?: string },
): { sent: () => number; done: Promise<void> } {
  const chunk = Buffer.alloc(64 * 1024, 'x');
  let sent = 0;
  let closed = false;
  const done = new Promise<void>((resolve) =>
    res.on('close', () => {
      closed = true;
      resolve();
    }),
  );
  res.write(prefix);
  sent += Buffer.byteLength(prefix);
  const pump = () => {
    while (!closed && sent < total) {
      sent += chunk.length;
      if (!res.write(chunk)) {
        res.once('drain', pump);
        return;
      }
    }
    if (!closed) res.end(suffix);
  };
  pump();
  return { sent: () => sent, done };
}
