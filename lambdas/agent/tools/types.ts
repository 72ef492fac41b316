/**
 * What the agent loop sees of a server-side tool, wherever it runs (a remote HTTP endpoint, a tool of an MCP server):
 * a definition to offer the model and a `run` that always answers. A tool's failure is something the model is told
 * about (an `is_error` tool result), never an exception that would end the run.
 */

/** The text of one tool result, as it goes back to the model in a `tool_result` block. */
export interface ToolOutcome {
  content: string;
  isError: boolean;
}

export interface AgentTool {
  /** The name offered to the model (MCP: `mcp__<server>__<tool>`). */
  name: string;
  /** The configured MCP server it comes from (an MCP tool only): what an `mcp__<server>` rule matches. */
  server?: string;
  description?: string;
  input_schema: Record<string, unknown>;
  /** Never throws: every failure (refused URL, time-out, HTTP error, abort) is an `isError` outcome. */
  run(input: unknown, signal: AbortSignal): Promise<ToolOutcome>;
}
