import * as z from 'zod';
import { MCP_SEPARATOR, TOOL_NAME } from './tools/names.ts';

/**
 * The options of an agent run, the one schema `/prompt` validates (and `/incubate` and `/ws` reuse): every option of
 * the interface, strict — an unknown key is a 400 naming it, so a typo (`maxTurn`) never passes silently
 * (docs/prompt.md, "Options").
 */

/**
 * Keys that are not plain data: assigning them to an object changes its prototype (`__proto__`) or shadows what every
 * object inherits (`constructor`, `prototype`), so a record keyed by one — a server named `__proto__` — would be
 * silently dropped or misread when the options are copied. Refused as names and header names (docs/prompt.md,
 * "Options").
 */
const NOT_DATA_KEYS: ReadonlySet<string> = new Set(['__proto__', 'constructor', 'prototype']);
const notDataKey = (what: string) => (key: string) =>
  `${JSON.stringify(key)} is not allowed as ${what}: it is not a plain data key (it would set or shadow an object's prototype)`;

/**
 * A record whose key failures say what is wrong with the key (zod's own says only "Invalid key in record"); its other
 * failures say `shape`.
 */
function recordError(shape: string): z.core.$ZodErrorMap {
  return (issue) => (issue.code === 'invalid_key' ? (issue.issues[0]?.message ?? shape) : shape);
}

const HeaderName = z.string().refine((key) => !NOT_DATA_KEYS.has(key), { error: (issue) => notDataKey('a header name')(String(issue.input)) });
const Headers = z.record(HeaderName, z.string({ error: 'header values must be strings' }), {
  error: recordError('headers must be an object of header names and string values'),
});

/**
 * The path of the first `__proto__` key anywhere in `value`, or undefined. JSON.parse keeps such a key as an own
 * property, but copying the value (as zod's parse does) assigns it, which sets the copy's prototype instead: whatever
 * it held would be lost or, worse, inherited. Walked with an explicit stack (the body's nesting is bounded, but this
 * runs on client data).
 */
function protoKeyPath(value: unknown): (string | number)[] | undefined {
  // Each object is visited once and its path is spelled out only when the key is found: copying a path per value
  // would cost (values × depth), seconds on a 6 MB body nested 100 levels.
  type Visit = { value: object; key?: string | number; parent?: Visit };
  const pathOf = (visit: Visit, last: string): (string | number)[] => {
    const path: (string | number)[] = [last];
    for (let v: Visit | undefined = visit; v?.key !== undefined; v = v.parent) path.unshift(v.key);
    return path;
  };
  if (value === null || typeof value !== 'object') return undefined;
  const stack: Visit[] = [{ value }];
  while (stack.length > 0) {
    const visit = stack.pop()!;
    const push = (key: string | number, child: unknown) => {
      if (child !== null && typeof child === 'object') stack.push({ value: child, key, parent: visit });
    };
    if (Array.isArray(visit.value)) for (let i = 0; i < visit.value.length; i++) push(i, visit.value[i]);
    else
      for (const [key, child] of Object.entries(visit.value)) {
        if (key === '__proto__') return pathOf(visit, key);
        push(key, child);
      }
  }
  return undefined;
}

/** `schema`, refusing a `__proto__` key anywhere in the value (with its path) before it is parsed, and so copied. */
function plainData<S extends z.ZodType>(schema: S) {
  return z.preprocess((value, ctx) => {
    const path = protoKeyPath(value);
    if (path) ctx.addIssue({ code: 'custom', path, message: notDataKey('a key')('__proto__') });
    return value;
  }, schema);
}

/** A remote HTTP tool the gateway runs: the input is POSTed as JSON to `url`, the response text is the result. */
export const HttpTool = z.strictObject({
  name: z.string().regex(TOOL_NAME, 'tool names are 1–128 letters, digits, "_" or "-"'),
  description: z.string().optional(),
  input_schema: z.looseObject({ type: z.literal('object', { error: 'input_schema.type must be "object"' }) }),
  url: z.string({ error: 'url must be a string' }).url('url must be an absolute http(s) URL'),
  headers: Headers.optional(),
});

/**
 * An Anthropic server tool (`web_search_…`, `code_execution_…`, …): Anthropic runs it, so it passes through to
 * Claude models unchanged, with whatever fields Anthropic defines for it.
 */
export const ServerTool = z.looseObject({
  type: z.string().regex(/^[a-z_]+_\d{8}$/, 'a server tool names its versioned type, e.g. "web_search_20250305"'),
  name: z.string(),
});

/**
 * Parses `value` with `schema` inside a transform, reporting the schema's own issues (with their paths) as the
 * transform's: the option schemas pick a shape by looking at the value first, to say precisely what is wrong.
 */
function parseWithin<S extends z.ZodType>(schema: S, value: unknown, ctx: z.RefinementCtx): z.infer<S> {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  for (const issue of parsed.error.issues) ctx.addIssue({ ...issue, code: 'custom', message: issue.message });
  return z.NEVER;
}

/**
 * A client-side tool (`/ws` only, docs/ws.md): declared by the client and run by it — the model's call goes to the
 * client as a `tool_use` frame and the turn waits for its `tool_result`.
 */
export const ClientTool = z.strictObject({
  name: HttpTool.shape.name,
  description: z.string().optional(),
  input_schema: HttpTool.shape.input_schema,
});

type ToolOption = z.infer<typeof HttpTool> | z.infer<typeof ServerTool> | z.infer<typeof ClientTool>;

/**
 * One entry of `tools`, told apart by its fields: a `type` without `url` is an Anthropic server tool, a `url` an HTTP
 * tool; neither is a client tool, which only a `/ws` session (`clientTools`) can run.
 */
function toolSchema(clientTools: boolean) {
  const schema = z.unknown().transform((value, ctx): ToolOption => {
    const tool = value as Record<string, unknown> | null;
    if (!tool || typeof tool !== 'object' || Array.isArray(tool)) {
      ctx.addIssue({ code: 'custom', message: 'each tool must be an object' });
      return z.NEVER;
    }
    if (typeof tool.type === 'string' && !('url' in tool)) return parseWithin(ServerTool, tool, ctx);
    if (!('url' in tool)) {
      if (clientTools) return parseWithin(ClientTool, tool, ctx);
      ctx.addIssue({
        code: 'custom',
        message: `tool "${String(tool.name ?? '')}" has no url: it would run in the client, which this endpoint cannot reach; use /ws for client-side tools`,
      });
      return z.NEVER;
    }
    return parseWithin(HttpTool, tool, ctx);
  });
  return documentedAs(schema, clientTools ? [HttpTool, ServerTool, ClientTool] : [HttpTool, ServerTool]);
}

export const RemoteMcpServer = z.strictObject({
  type: z.enum(['http', 'sse'], { error: 'type must be "http" or "sse"' }),
  url: z.string({ error: 'url must be a string' }).url('url must be an absolute http(s) URL'),
  headers: Headers.optional(),
});

/**
 * How the OpenAPI document (lambdas/openapi, docs/openapi.json) shows the shapes the transforms here tell apart: named
 * components, in zod's registry, which the generator reads (and nothing else).
 */
const HTTP_TOOL = 'A remote HTTP tool the gateway runs: the input is POSTed as JSON to `url` with `headers`; the response text is the result.';
const SERVER_TOOL = 'An Anthropic server tool (`web_search_20250305`, …): passed through to Claude models unchanged, with the fields Anthropic defines.';
const CLIENT_TOOL = "A client-side tool (`/ws` sessions only): the model's call goes to the client as a `tool_use` frame.";
const MCP_SERVER = 'A remote MCP server: Streamable HTTP, or SSE for `"sse"`. stdio (a `command`) is refused: nothing is spawned in the gateway.';
z.globalRegistry.add(HttpTool, { id: 'HttpTool', description: HTTP_TOOL, unusedIO: 'input' });
z.globalRegistry.add(ServerTool, { id: 'ServerTool', description: SERVER_TOOL, unusedIO: 'input' });
z.globalRegistry.add(ClientTool, { id: 'ClientTool', description: CLIENT_TOOL, unusedIO: 'input' });
z.globalRegistry.add(RemoteMcpServer, { id: 'RemoteMcpServer', description: MCP_SERVER, unusedIO: 'input' });

/**
 * `schema`, a transform that accepts any of `shapes` (and words its own errors), as the document shows it: one of the
 * shapes' components. zod alone would render a transform's input as "anything".
 */
function documentedAs<S extends z.ZodType>(schema: S, shapes: z.ZodType[]): S {
  const refs = shapes.map((shape) => ({ $ref: `#/components/schemas/${z.globalRegistry.get(shape)?.id}` }));
  z.globalRegistry.add(schema, { override: refs.length === 1 ? refs[0] : { anyOf: refs } });
  return schema;
}

const McpServer = z.unknown().transform((value, ctx) => {
  const server = value as Record<string, unknown> | null;
  if (!server || typeof server !== 'object' || Array.isArray(server)) {
    ctx.addIssue({ code: 'custom', message: 'each MCP server must be an object' });
    return z.NEVER;
  }
  // Nothing is ever spawned in the gateway: a local (stdio) server would run a command on it.
  if (server.type === 'stdio' || 'command' in server) {
    ctx.addIssue({
      code: 'custom',
      message: 'stdio MCP servers (a "command" to run) are not supported: nothing is spawned in the gateway; give a remote server {type: "http" | "sse", url}',
    });
    return z.NEVER;
  }
  return parseWithin(RemoteMcpServer, server, ctx);
});
documentedAs(McpServer, [RemoteMcpServer]);

/**
 * An MCP server's name: it prefixes its tools' names (`mcp__<server>__<tool>`), so it follows the tool-name rule, and
 * it may not contain `__`, the separator — `a__b`'s tools would read as server `a`'s, and `allowedTools` /
 * `disallowedTools` could not tell the two apart.
 */
const McpServerName = z
  .string()
  .regex(TOOL_NAME, 'MCP server names are 1–128 letters, digits, "_" or "-"')
  .refine((name) => !NOT_DATA_KEYS.has(name), { error: (issue) => notDataKey('an MCP server name')(String(issue.input)) })
  .refine((name) => !name.includes(MCP_SEPARATOR), {
    error: (issue) =>
      `MCP server name ${JSON.stringify(issue.input)} contains "__", which separates the server from the tool in mcp__<server>__<tool>: allowedTools and disallowedTools could not tell its tools from another server's`,
  });

function optionsSchema(clientTools: boolean) {
  return z.strictObject({
    model: z.string().min(1, 'model must not be empty').optional().describe('Any model the proxy routes; default DEFAULT_MODEL.'),
    systemPrompt: z.string().optional(),
    tools: plainData(z.array(toolSchema(clientTools), { error: 'tools must be an array' }))
      .optional()
      .describe('Tools the gateway runs (remote HTTP) or Anthropic runs (server tools, Claude models only).'),
    mcpServers: plainData(z.record(McpServerName, McpServer, { error: recordError('mcpServers must be an object of named servers') }))
      .optional()
      .describe('Remote MCP servers by name; their tools are offered as mcp__<name>__<tool>.'),
    allowedTools: z
      .array(z.string(), { error: 'allowedTools must be an array of tool names' })
      .optional()
      .describe('Tool names to offer (mcp__<server> for all of a server’s); the others are not offered.'),
    disallowedTools: z
      .array(z.string(), { error: 'disallowedTools must be an array of tool names' })
      .optional()
      .describe('Tool names never offered; wins over allowedTools.'),
    maxTurns: z
      .number({ error: 'maxTurns must be a number' })
      .int('maxTurns must be a whole number')
      .min(1, 'maxTurns must be at least 1')
      .max(100, 'maxTurns must be at most 100')
      .optional()
      .describe('Model calls at most; default 10.'),
    maxBudgetUsd: z
      .number({ error: 'maxBudgetUsd must be a number' })
      .positive('maxBudgetUsd must be above 0')
      .max(10_000, 'maxBudgetUsd must be at most 10000')
      .optional()
      .describe('The run’s total cost never exceeds this (USD).'),
    maxThinkingTokens: z
      .number({ error: 'maxThinkingTokens must be a number' })
      .int('maxThinkingTokens must be a whole number')
      .min(1_024, 'maxThinkingTokens must be at least 1024 (the smallest thinking budget models accept)')
      .max(128_000, 'maxThinkingTokens must be at most 128000')
      .optional()
      .describe('Extended thinking with this budget.'),
    outputFormat: plainData(
      z.strictObject({
        type: z.literal('json_schema', { error: 'outputFormat.type must be "json_schema"' }),
        schema: z.record(z.string(), z.unknown(), { error: 'outputFormat.schema must be a JSON Schema object' }),
      }),
    )
      .optional()
      .describe('The final answer must be JSON valid against this JSON Schema (draft 2020-12, within the limits of docs/prompt.md).'),
  });
}

/** The options of a `/prompt` run or a vessel: every tool runs in the gateway or at Anthropic. */
export const RunOptions = optionsSchema(false);
export type RunOptions = z.infer<typeof RunOptions>;
/** The options of a `/ws` session (docs/ws.md): `/prompt`'s, with client-side tools too. */
export const SessionOptions = optionsSchema(true);
export type SessionOptions = z.infer<typeof SessionOptions>;
export type HttpToolOption = z.infer<typeof HttpTool>;
export type ClientToolOption = z.infer<typeof ClientTool>;

/** `POST /prompt`'s body: the message, and the options with the caller's token. */
export const PromptBody = z.strictObject({
  message: z.string({ error: 'message is required and must be a string' }).min(1, 'message must not be empty'),
  options: RunOptions.extend({
    token: z.string({ error: 'options.token is required: the JWT goes in the body' }).describe('The user’s token (JWT): on this route it goes here.'),
  }),
});
export type PromptBody = z.infer<typeof PromptBody>;

type AnyTool = NonNullable<SessionOptions['tools']>[number];

export const isHttpTool = (tool: AnyTool): tool is HttpToolOption => 'url' in tool;
/** An Anthropic server tool: Anthropic runs it (Claude models only). */
export const isServerTool = (tool: AnyTool): tool is z.infer<typeof ServerTool> => !('url' in tool) && typeof (tool as { type?: unknown }).type === 'string';
/** A client-side tool (`/ws`): the client runs it. */
export const isClientTool = (tool: AnyTool): tool is ClientToolOption => !('url' in tool) && !('type' in tool);
