/**
 * The names tools are offered to the model under. Anthropic's Messages API accepts a tool name only if it matches
 * `^[a-zA-Z0-9_-]{1,128}$`; a request carrying any other name is refused as a whole, so a name that breaks the rule
 * must be caught here, before it is offered, not discovered as a failed run.
 */
export const TOOL_NAME = /^[a-zA-Z0-9_-]{1,128}$/;

const MCP_PREFIX = 'mcp__';
/** Between an MCP tool's server and tool names; a server name may not contain it (agent/options.ts). */
export const MCP_SEPARATOR = '__';

/** The name an MCP server's tool is offered under (the convention Claude Code uses too). */
export function mcpToolName(server: string, tool: string): string {
  return `${MCP_PREFIX}${server}${MCP_SEPARATOR}${tool}`;
}

/** The `allowedTools` / `disallowedTools` rule that covers every tool of a configured MCP server: `mcp__<server>`. */
export function mcpServerRule(server: string): string {
  return `${MCP_PREFIX}${server}`;
}

/**
 * Why a server name cannot prefix tool names, or undefined if it can. Checked once per server so a bad name fails
 * that server with one clear reason instead of skipping every tool it has: it must use only the allowed characters
 * and leave room for at least a one-character tool name within the 128, and must not contain the separator (`__`): the
 * tools of `a__b` would read as server `a`'s.
 */
export function serverNameProblem(server: string): string | undefined {
  const longest = 128 - MCP_PREFIX.length - MCP_SEPARATOR.length - 1;
  if (!/^[a-zA-Z0-9_-]+$/.test(server)) return 'server name must use only letters, digits, "_" and "-"';
  if (server.includes(MCP_SEPARATOR)) return `server name must not contain "${MCP_SEPARATOR}", which separates the server from the tool`;
  if (server.length > longest) return `server name is longer than ${longest} characters`;
  return undefined;
}

/** Why a tool of a (valid) server cannot be offered under its prefixed name, or undefined if it can. */
export function toolNameProblem(server: string, tool: string): string | undefined {
  if (!/^[a-zA-Z0-9_-]+$/.test(tool)) return 'tool name must use only letters, digits, "_" and "-"';
  if (!TOOL_NAME.test(mcpToolName(server, tool))) return 'prefixed tool name is longer than 128 characters';
  return undefined;
}
