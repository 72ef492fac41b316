import * as z from 'zod';
import { TOOL_NAME } from './tools/names.ts';

/**
 * The options of an agent run, the one schema `/prompt` validates (and `/incubate` and `/ws` reuse): every option of
 * the interface, strict — an unknown key is a 400 naming it, so a typo (`maxTurn`) never passes silently
 * (docs/prompt.md, "Options").
 */

const Headers = z.record(z.string(), z.string({ error: 'header values must be strings' }));

/** A remote HTTP tool the gateway runs: the input is POSTed as JSON to `url`, the response text is the result. */
const HttpTool = z.strictObject({
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
const ServerTool = z.looseObject({
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
const ClientTool = z.strictObject({
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
  return z.unknown().transform((value, ctx): ToolOption => {
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
}

const RemoteMcpServer = z.strictObject({
  type: z.enum(['http', 'sse'], { error: 'type must be "http" or "sse"' }),
  url: z.string({ error: 'url must be a string' }).url('url must be an absolute http(s) URL'),
  headers: Headers.optional(),
});

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

function optionsSchema(clientTools: boolean) {
  return z.strictObject({
    model: z.string().min(1, 'model must not be empty').optional(),
    systemPrompt: z.string().optional(),
    tools: z.array(toolSchema(clientTools), { error: 'tools must be an array' }).optional(),
    mcpServers: z
      .record(z.string().regex(TOOL_NAME, 'MCP server names are 1–128 letters, digits, "_" or "-"'), McpServer, {
        error: 'mcpServers must be an object of named servers',
      })
      .optional(),
    allowedTools: z.array(z.string(), { error: 'allowedTools must be an array of tool names' }).optional(),
    disallowedTools: z.array(z.string(), { error: 'disallowedTools must be an array of tool names' }).optional(),
    maxTurns: z
      .number({ error: 'maxTurns must be a number' })
      .int('maxTurns must be a whole number')
      .min(1, 'maxTurns must be at least 1')
      .max(100, 'maxTurns must be at most 100')
      .optional(),
    maxBudgetUsd: z
      .number({ error: 'maxBudgetUsd must be a number' })
      .positive('maxBudgetUsd must be above 0')
      .max(10_000, 'maxBudgetUsd must be at most 10000')
      .optional(),
    maxThinkingTokens: z
      .number({ error: 'maxThinkingTokens must be a number' })
      .int('maxThinkingTokens must be a whole number')
      .min(1_024, 'maxThinkingTokens must be at least 1024 (the smallest thinking budget models accept)')
      .max(128_000, 'maxThinkingTokens must be at most 128000')
      .optional(),
    outputFormat: z
      .strictObject({
        type: z.literal('json_schema', { error: 'outputFormat.type must be "json_schema"' }),
        schema: z.record(z.string(), z.unknown(), { error: 'outputFormat.schema must be a JSON Schema object' }),
      })
      .optional(),
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
  options: RunOptions.extend({ token: z.string({ error: 'options.token is required: the JWT goes in the body' }) }),
});
export type PromptBody = z.infer<typeof PromptBody>;

type AnyTool = NonNullable<SessionOptions['tools']>[number];

export const isHttpTool = (tool: AnyTool): tool is HttpToolOption => 'url' in tool;
/** An Anthropic server tool: Anthropic runs it (Claude models only). */
export const isServerTool = (tool: AnyTool): tool is z.infer<typeof ServerTool> => !('url' in tool) && typeof (tool as { type?: unknown }).type === 'string';
/** A client-side tool (`/ws`): the client runs it. */
export const isClientTool = (tool: AnyTool): tool is ClientToolOption => !('url' in tool) && !('type' in tool);
