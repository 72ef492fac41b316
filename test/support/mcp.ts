import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';

/**
 * A node:http handler serving an MCP server over Streamable HTTP, as the SDK's own examples do: one transport (and
 * one server built by `build`) per session, found again by the `mcp-session-id` header.
 */
export function streamableMcpHandler(build: () => McpServer): (req: IncomingMessage, res: ServerResponse) => void {
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
      await transport.handleRequest(req, res);
    })().catch(() => res.headersSent || res.writeHead(500).end());
  };
}
