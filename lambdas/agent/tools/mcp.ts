import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport, SseError } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport, StreamableHTTPError } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import type { FetchLike, Transport } from '@modelcontextprotocol/sdk/shared/transport.js';
import { type CallToolResult, McpError, type Tool } from '@modelcontextprotocol/sdk/types.js';
import { MAX_INVOCATION_SECONDS } from '../../config/env.ts';
import { MCP_CONNECT_TIMEOUT_MS, MCP_TERMINATE_TIMEOUT_MS, MCP_TOOL_TIMEOUT_MS } from '../../config/timing.ts';
import { checkUrl } from '../../outbound/guard.ts';
import { toolHeaders } from './headers.ts';
import { MAX_MCP_TOOLS_PER_SERVER, MAX_TOOL_SCHEMA_BYTES, MAX_TOOL_SCHEMA_DEPTH, MCP_MAX_MESSAGE_BYTES, MCP_MAX_STREAM_BYTES } from './limits.ts';
import { type McpAnswerTooLarge, cappedMcpFetch, type McpReadLimits } from './mcp-fetch.ts';
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
 * provider refuse the whole request. A tool whose `input_schema` is absurd (limits.ts: too deep, too large) is skipped
 * the same way, before it can reach a model request it would break.
 *
 * Nothing a server sends is read past the limits of docs/prompt.md, "Limits on tools": the transports' fetch caps every
 * body beneath the SDK (mcp-fetch.ts), a call has an HTTP tool's time limit, and a tool list its count.
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
 * What the transports read of a server (mcp-fetch.ts, docs/prompt.md "Limits on tools"): every body capped, a POST that
 * carries a request bounded like a tool call, body included. The streams the transports hold open for the session (the
 * SSE transport's GET stream carries every answer) live as long as the longest invocation, since cutting one would end
 * the session mid-run; close() aborts them.
 */
export const MCP_READ_LIMITS: McpReadLimits = {
  maxMessageBytes: MCP_MAX_MESSAGE_BYTES,
  maxStreamBytes: MCP_MAX_STREAM_BYTES,
  requestTimeoutMs: MCP_TOOL_TIMEOUT_MS,
  streamTimeoutMs: MAX_INVOCATION_SECONDS * 1000,
};

/** The JSON-RPC error code of the answer that stands in for one cut at a limit ("server error" range). */
const TOO_LARGE_CODE = -32_000;

/**
 * One server's connection as the capped fetch sees it: a body cut at a limit that answered a request fails that
 * request at once (an error answer for its id is handed to the client, as if the server had sent it), so the call ends
 * with the reason rather than waiting for its time-out; a cut stream that answered no request (the SSE transport's GET
 * stream, which carries every answer) breaks the connection: it is closed, and every pending and later call fails
 * with the reason.
 */
interface Link {
  transport?: Transport;
  client?: Client;
  broken?: Error;
}

function linkFetch(link: Link, limits: McpReadLimits): FetchLike {
  return cappedMcpFetch(limits, (err: McpAnswerTooLarge, ids) => {
    if (ids.length > 0) {
      for (const id of ids) {
        link.transport?.onmessage?.({ jsonrpc: '2.0', id, error: { code: TOO_LARGE_CODE, message: err.message, data: { gatewayLimit: err.message } } });
      }
      return;
    }
    link.broken ??= new Error(`${err.message}; its connection was closed, so its tools cannot be called again in this run`);
    queueMicrotask(() => void link.client?.close().catch(() => undefined));
  });
}

/** The failure to report for `err`: the connection's break, or a limit's own words, or `err` itself. */
function failureOf(err: unknown, link: Link): unknown {
  if (link.broken) return link.broken;
  const limit = err instanceof McpError ? (err.data as { gatewayLimit?: unknown } | undefined)?.gatewayLimit : undefined;
  return typeof limit === 'string' ? new Error(limit) : err;
}

const CLIENT_INFO = { name: 'prompt-gateway-agent', version: '1.0.0' };

interface Connected {
  status: McpServerStatus;
  client?: Client;
  transport?: Transport;
  link?: Link;
  tools: Tool[];
}

export interface ConnectOptions {
  /** Connecting, initializing and listing the tools of one server (default MCP_CONNECT_TIMEOUT_MS). */
  timeoutMs?: number;
  signal?: AbortSignal;
  /** The text of one tool result the model reads (default DEFAULT_MAX_RESULT_BYTES, as HTTP tools). */
  maxResultBytes?: number;
  /** One tool call, its answer read in full (default MCP_TOOL_TIMEOUT_MS, as HTTP tools). */
  callTimeoutMs?: number;
  /** What is read of the server's answers (default MCP_READ_LIMITS); tests lower it. */
  limits?: Partial<McpReadLimits>;
}

export async function connectMcpServers(servers: Record<string, McpServerSpec>, opts: ConnectOptions = {}): Promise<McpConnection> {
  const timeoutMs = opts.timeoutMs ?? MCP_CONNECT_TIMEOUT_MS;
  const maxBytes = opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
  const callTimeoutMs = opts.callTimeoutMs ?? MCP_TOOL_TIMEOUT_MS;
  const limits: McpReadLimits = { ...MCP_READ_LIMITS, requestTimeoutMs: callTimeoutMs, ...opts.limits };
  const connected = await Promise.all(Object.entries(servers).map(([name, spec]) => connectOne(name, spec, { timeoutMs, limits }, opts.signal)));

  // Offered in the servers' order, so which of two clashing names wins does not depend on who answered first.
  const tools: AgentTool[] = [];
  const offeredBy = new Map<string, string>();
  for (const { status, client, link, tools: listed } of connected) {
    if (!client || !link) continue;
    const secrets = Object.values(servers[status.name]?.headers ?? {});
    for (const tool of listed) {
      const name = mcpToolName(status.name, tool.name);
      const clash = offeredBy.get(name);
      const problem =
        toolNameProblem(status.name, tool.name) ??
        schemaProblem(tool.inputSchema) ??
        (clash === undefined ? undefined : `${name} is already offered by server "${clash}"`);
      if (problem) {
        status.skipped ??= [];
        status.skipped.push({ tool: tool.name, reason: problem });
        continue;
      }
      offeredBy.set(name, status.name);
      tools.push(mcpTool({ client, link, tool, name, server: status.name, maxBytes, timeoutMs: callTimeoutMs, secrets }));
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

async function connectOne(
  name: string,
  spec: McpServerSpec,
  { timeoutMs, limits }: { timeoutMs: number; limits: McpReadLimits },
  signal?: AbortSignal,
): Promise<Connected> {
  const failed = (error: string): Connected => ({ status: { name, status: 'failed', tools: 0, error }, tools: [] });
  const nameProblem = serverNameProblem(name);
  if (nameProblem) return failed(nameProblem);
  if (spec.type !== 'http' && spec.type !== 'sse') return failed(`unknown server type ${JSON.stringify(spec.type)}: http or sse`);

  const secrets = Object.values(spec.headers ?? {});
  const deadline = AbortSignal.timeout(timeoutMs);
  const connectSignal = signal ? AbortSignal.any([signal, deadline]) : deadline;
  let client: Client | undefined;
  let transport: Transport | undefined;
  const link: Link = {};
  try {
    // Checked here too (the fetch checks again) so a refused URL fails with the guard's reason, not the SDK's wrapping.
    const url = checkUrl(spec.url);
    const options = { fetch: linkFetch(link, limits), requestInit: { headers: toolHeaders(spec.headers) } };
    transport = spec.type === 'http' ? new StreamableHTTPClientTransport(url, options) : new SSEClientTransport(url, options);
    link.transport = transport;
    const c = new Client(CLIENT_INFO, { capabilities: {} });
    client = c;
    link.client = c;
    const t = transport;
    // The SDK's own request time-out covers a request, not the transport's start (the SSE stream's endpoint event):
    // the race bounds the whole setup, and the signal stops the SDK's pending request when it is lost.
    const tools = await raceSignal(
      (async () => {
        await c.connect(t, { signal: connectSignal });
        return c.getServerCapabilities()?.tools ? await listAllTools(c, link, connectSignal) : [];
      })(),
      connectSignal,
    );
    return { status: { name, status: 'connected', tools: 0 }, client, transport, link, tools };
  } catch (err) {
    await closeServer({ client, transport });
    const text = describeFailure(failureOf(err, link), { timeoutMs, timedOut: deadline.aborted, aborted: signal?.aborted, secrets });
    const status = httpStatusOf(err);
    return failed(status === undefined ? text : `HTTP ${status}: ${text}`);
  }
}

/** The HTTP status behind a transport's error, which its message leaves out ("Error POSTing to endpoint: …"). */
function httpStatusOf(err: unknown): number | undefined {
  const code = err instanceof StreamableHTTPError || err instanceof SseError ? err.code : undefined;
  return code !== undefined && code >= 100 && code <= 599 ? code : undefined;
}

/**
 * Every page of the server's tool list (`nextCursor`), stopping at a cursor seen before. A list longer than
 * MAX_MCP_TOOLS_PER_SERVER, or a page too large to read, fails the server with that reason.
 */
async function listAllTools(client: Client, link: Link, signal: AbortSignal): Promise<Tool[]> {
  const tools: Tool[] = [];
  const cursors = new Set<string>();
  let cursor: string | undefined;
  for (let page = 0; page < MAX_TOOL_PAGES; page++) {
    let result: Awaited<ReturnType<Client['listTools']>>;
    try {
      result = await client.listTools(cursor === undefined ? undefined : { cursor }, { signal });
    } catch (err) {
      const failure = failureOf(err, link);
      throw failure === err ? err : new Error(`tools/list: ${(failure as Error).message}`);
    }
    tools.push(...result.tools);
    if (tools.length > MAX_MCP_TOOLS_PER_SERVER) {
      throw new Error(`tools/list: the server lists more than ${MAX_MCP_TOOLS_PER_SERVER} tools, the most one server may offer`);
    }
    cursor = result.nextCursor;
    if (cursor === undefined || cursors.has(cursor)) break;
    cursors.add(cursor);
  }
  return tools;
}

/**
 * Why a tool's `input_schema` cannot be offered, or undefined if it can: nested deeper than MAX_TOOL_SCHEMA_DEPTH (a
 * schema thousands of levels deep cannot even be written into the model's request), or larger than
 * MAX_TOOL_SCHEMA_BYTES as JSON. The depth is measured with an explicit stack, stopping at the limit.
 */
export function schemaProblem(schema: unknown): string | undefined {
  const stack: Array<{ value: unknown; depth: number }> = [{ value: schema, depth: 1 }];
  while (stack.length > 0) {
    const { value, depth } = stack.pop()!;
    if (value === null || typeof value !== 'object') continue;
    if (depth > MAX_TOOL_SCHEMA_DEPTH) return `input_schema nests deeper than ${MAX_TOOL_SCHEMA_DEPTH} levels`;
    for (const child of Object.values(value)) if (child !== null && typeof child === 'object') stack.push({ value: child, depth: depth + 1 });
  }
  const bytes = Buffer.byteLength(JSON.stringify(schema) ?? '');
  return bytes > MAX_TOOL_SCHEMA_BYTES ? `input_schema is ${bytes} bytes of JSON, more than ${MAX_TOOL_SCHEMA_BYTES}` : undefined;
}

interface ToolOf {
  client: Client;
  link: Link;
  tool: Tool;
  name: string;
  server: string;
  maxBytes: number;
  timeoutMs: number;
  secrets: string[];
}

function mcpTool({ client, link, tool, name, server, maxBytes, timeoutMs, secrets }: ToolOf): AgentTool {
  return {
    name,
    server,
    ...(tool.description !== undefined && { description: tool.description }),
    input_schema: tool.inputSchema as Record<string, unknown>,
    async run(input: unknown, signal: AbortSignal): Promise<ToolOutcome> {
      if (input !== undefined && (typeof input !== 'object' || input === null || Array.isArray(input))) {
        return { content: 'the tool input must be a JSON object', isError: true };
      }
      // The same deadline as an HTTP tool's, answer included: our own, so a time-out is told apart from the run's abort.
      const deadline = AbortSignal.timeout(timeoutMs);
      const callSignal = AbortSignal.any([signal, deadline]);
      try {
        if (link.broken) throw link.broken;
        const call = client.callTool({ name: tool.name, arguments: (input ?? {}) as Record<string, unknown> }, undefined, {
          signal: callSignal,
          // The SDK's own request time-out only backs ours up.
          timeout: timeoutMs + 1_000,
        });
        const result = await raceSignal(call, callSignal);
        return cappedOutcome(resultText(result), result.isError === true, maxBytes);
      } catch (err) {
        return {
          content: describeFailure(failureOf(err, link), { timeoutMs, timedOut: deadline.aborted, aborted: signal.aborted, secrets }),
          isError: true,
        };
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
