import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike, Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import type { CallToolResult, Tool } from '@modelcontextprotocol/sdk/types.js';
import { MAX_INVOCATION_SECONDS } from '../../config/env.ts';
import { MCP_CONNECT_TIMEOUT_MS, MCP_TERMINATE_TIMEOUT_MS } from '../../config/timing.ts';
import { checkUrl } from '../../outbound/guard.ts';
import { outboundFetch } from '../../outbound/fetch.ts';
import { toolHeaders } from './headers.ts';
import { mcpToolName, serverNameProblem, toolNameProblem } from './names.ts';
import { cappedOutcome, DEFAULT_MAX_RESULT_BYTES, describeFailure } from './outcome.ts';
import type { AgentTool, ToolOutcome } from './types.ts';

/**
 * The caller's remote MCP servers, as tools for one agent run: each server is connected with the official SDK client
 * (Streamable HTTP or the older SSE transport), its tools are listed and offered to the model as
 * `mcp__<server>__<tool>`, and a call is relayed with `callTool`. Servers are the caller's own URLs, so every request
 * the transports make goes through the outbound guard.
 *
 * One server that cannot be used does not cost the run the others: it is reported `failed` with a short reason and
 * its tools are simply absent. Names follow Anthropic's tool-name rule (`names.ts`): a server whose name cannot
 * prefix a valid tool name fails as a whole; a tool whose prefixed name would break the rule, or repeat a name already
 * offered, is skipped (listed in its server's `skipped`), because one bad name would otherwise make the model
 * provider refuse the whole request.
 */

export interface McpServerSpec {
  type: 'http' | 'sse';
  url: string;
  /** Sent with every request to the server (typically its credentials); never echoed in a failure text. */
  headers?: Record<string, string>;
}

export interface McpServerStatus {
  name: string;
  status: 'connected' | 'failed';
  /** How many of its tools are offered to the model. */
  tools: number;
  error?: string;
  /** Tools of a connected server that were not offered, and why (present only when some were). */
  skipped?: Array<{ tool: string; reason: string }>;
}

export interface McpConnection {
  tools: AgentTool[];
  servers: McpServerStatus[];
  /** Closes every client. Idempotent, never throws. */
  close(): Promise<void>;
}

/** A server that pages its tool list forever (a cursor that never ends) is cut here. */
const MAX_TOOL_PAGES = 50;

/**
 * The fetch the transports use: the guarded outbound fetch with its total time-out stretched to the longest invocation.
 * The default (30 s, body included) suits one call, but the transports hold their event streams open for the whole
 * session (the SSE transport's GET stream carries every answer), and cutting it would end the session mid-run. Calls
 * are bounded instead by the SDK's request time-out and by close(), which aborts every stream.
 */
const transportFetch: FetchLike = (url, init) => outboundFetch(url, init, { timeoutMs: MAX_INVOCATION_SECONDS * 1000 });

const CLIENT_INFO = { name: 'prompt-gateway-agent', version: '1.0.0' };

interface Connected {
  status: McpServerStatus;
  client?: Client;
  transport?: Transport;
  tools: Tool[];
}

export async function connectMcpServers(
  servers: Record<string, McpServerSpec>,
  opts: { timeoutMs?: number; signal?: AbortSignal; maxResultBytes?: number } = {},
): Promise<McpConnection> {
  const timeoutMs = opts.timeoutMs ?? MCP_CONNECT_TIMEOUT_MS;
  const maxBytes = opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
  const connected = await Promise.all(Object.entries(servers).map(([name, spec]) => connectOne(name, spec, timeoutMs, opts.signal)));

  // Offered in the servers' order, so which of two clashing names wins does not depend on who answered first.
  const tools: AgentTool[] = [];
  const offeredBy = new Map<string, string>();
  for (const { status, client, tools: listed } of connected) {
    if (!client) continue;
    const secrets = Object.values(servers[status.name]?.headers ?? {});
    for (const tool of listed) {
      const name = mcpToolName(status.name, tool.name);
      const clash = offeredBy.get(name);
      const problem = toolNameProblem(status.name, tool.name) ?? (clash === undefined ? undefined : `${name} is already offered by server "${clash}"`);
      if (problem) {
        status.skipped ??= [];
        status.skipped.push({ tool: tool.name, reason: problem });
        continue;
      }
      offeredBy.set(name, status.name);
      tools.push(mcpTool(client, tool, name, maxBytes, secrets));
      status.tools += 1;
    }
  }

  let closing: Promise<void> | undefined;
  return {
    tools,
    servers: connected.map((c) => c.status),
    close: () => (closing ??= Promise.all(connected.map(closeServer)).then(() => undefined)),
  };
}

async function connectOne(name: string, spec: McpServerSpec, timeoutMs: number, signal?: AbortSignal): Promise<Connected> {
  const failed = (error: string): Connected => ({ status: { name, status: 'failed', tools: 0, error }, tools: [] });
  const nameProblem = serverNameProblem(name);
  if (nameProblem) return failed(nameProblem);
  if (spec.type !== 'http' && spec.type !== 'sse') return failed(`unknown server type ${JSON.stringify(spec.type)}: http or sse`);

  const secrets = Object.values(spec.headers ?? {});
  const deadline = AbortSignal.timeout(timeoutMs);
  const connectSignal = signal ? AbortSignal.any([signal, deadline]) : deadline;
  let client: Client | undefined;
  let transport: Transport | undefined;
  try {
    // Checked here too (the fetch checks again) so a refused URL fails with the guard's reason, not the SDK's wrapping.
    const url = checkUrl(spec.url);
    const options = { fetch: transportFetch, requestInit: { headers: toolHeaders(spec.headers) } };
    transport = spec.type === 'http' ? new StreamableHTTPClientTransport(url, options) : new SSEClientTransport(url, options);
    const c = new Client(CLIENT_INFO, { capabilities: {} });
    client = c;
    const t = transport;
    // The SDK's own request time-out covers a request, not the transport's start (the SSE stream's endpoint event):
    // the race bounds the whole setup, and the signal stops the SDK's pending request when it is lost.
    const tools = await raceSignal(
      (async () => {
        await c.connect(t, { signal: connectSignal });
        return c.getServerCapabilities()?.tools ? await listAllTools(c, connectSignal) : [];
      })(),
      connectSignal,
    );
    return { status: { name, status: 'connected', tools: 0 }, client, transport, tools };
  } catch (err) {
    await closeServer({ client, transport });
    const text = describeFailure(err, { timeoutMs, timedOut: deadline.aborted, aborted: signal?.aborted, secrets });
    const status = httpStatusOf(err);
    return failed(status === undefined ? text : `HTTP ${status}: ${text}`);
  }
}

/** The HTTP status behind a transport's error, which its message leaves out ("Error POSTing to endpoint: …"). */
function httpStatusOf(err: unknown): number | undefined {
  const code = err instanceof StreamableHTTPError || err instanceof SseError ? err.code : undefined;
  return code !== undefined && code >= 100 && code <= 599 ? code : undefined;
}

/** Every page of the server's tool list (`nextCursor`), stopping at a cursor seen before. */
async function listAllTools(client: Client, signal: AbortSignal): Promise<Tool[]> {
  const tools: Tool[] = [];
  const cursors = new Set<string>();
  let cursor: string | undefined;
  for (let page = 0; page < MAX_TOOL_PAGES; page++) {
    const result = await client.listTools(cursor === undefined ? undefined : { cursor }, { signal });
    tools.push(...result.tools);
    cursor = result.nextCursor;
    if (cursor === undefined || cursors.has(cursor)) break;
    cursors.add(cursor);
  }
  return tools;
}

function mcpTool(client: Client, tool: Tool, name: string, maxBytes: number, secrets: string[]): AgentTool {
  return {
    name,
    ...(tool.description !== undefined && { description: tool.description }),
    input_schema: tool.inputSchema as Record<string, unknown>,
    async run(input: unknown, signal: AbortSignal): Promise<ToolOutcome> {
      if (input !== undefined && (typeof input !== 'object' || input === null || Array.isArray(input))) {
        return { content: 'the tool input must be a JSON object', isError: true };
      }
      try {
        // No time-out of our own: the SDK's request time-out (60 s by default) bounds a call, the run's signal stops it.
        const result = await client.callTool({ name: tool.name, arguments: (input ?? {}) as Record<string, unknown> }, undefined, { signal });
        return cappedOutcome(resultText(result), result.isError === true, maxBytes);
      } catch (err) {
        return { content: describeFailure(err, { aborted: signal.aborted, secrets }), isError: true };
      }
    },
  };
}

type Part = CallToolResult['content'][number];

/**
 * The text the model reads of a call's result: text parts joined, embedded text resources by their text, every other
 * part summarised by kind (the model cannot use the bytes of an image in a text result, but should know it came).
 * A result with no content but structured content gives that as JSON; an old-protocol `toolResult` likewise.
 */
export function resultText(result: { content?: unknown; structuredContent?: unknown; toolResult?: unknown }): string {
  if (!Array.isArray(result.content)) return result.toolResult === undefined ? '' : JSON.stringify(result.toolResult);
  const parts = (result.content as Part[]).map(partText);
  if (parts.length === 0 && result.structuredContent !== undefined) return JSON.stringify(result.structuredContent);
  return parts.join('\n');
}

function partText(part: Part): string {
  switch (part.type) {
    case 'text':
      return part.text;
    case 'image':
    case 'audio':
      return `[${part.type}: ${part.mimeType}]`;
    case 'resource_link':
      return `[resource_link: ${part.uri}]`;
    case 'resource':
      if ('text' in part.resource && typeof part.resource.text === 'string') return part.resource.text;
      return `[resource: ${part.resource.uri}${part.resource.mimeType ? ` (${part.resource.mimeType})` : ''}]`;
    default:
      return `[${(part as { type?: unknown }).type}]`;
  }
}

/** `work`, or the signal's reason as soon as it aborts. */
function raceSignal<T>(work: Promise<T>, signal: AbortSignal): Promise<T> {
  work.catch(() => undefined); // lost races end quietly
  if (signal.aborted) return Promise.reject(signal.reason);
  let onAbort = (): void => undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
  });
  return Promise.race([work, aborted]).finally(() => signal.removeEventListener('abort', onAbort));
}

/** Ends a server's session if it keeps one (Streamable HTTP), then closes. Bounded, and never throws. */
async function closeServer({ client, transport }: { client?: Client; transport?: Transport }): Promise<void> {
  if (transport instanceof StreamableHTTPClientTransport && transport.sessionId !== undefined) {
    await raceSignal(transport.terminateSession(), AbortSignal.timeout(MCP_TERMINATE_TIMEOUT_MS)).catch(() => undefined);
  }
  // The client closes its transport (connect() hands it over before anything can fail).
  await (client ?? transport)?.close().catch(() => undefined);
}
