/**
 * The limits on what a run's tools may cost the gateway (docs/prompt.md, "Limits on tools"): how many tool calls a
 * turn runs and how many at once, how much of an MCP server's answers is read, and how large a tool list and a tool's
 * `input_schema` may be. They are sizes and counts, so they live here beside the tools they bound; the time limits
 * are in config/timing.ts (HTTP_TOOL_TIMEOUT_MS, MCP_TOOL_TIMEOUT_MS, MCP_CONNECT_TIMEOUT_MS).
 */

/**
 * Tool calls of one turn that run at the same time; the others wait for a slot. Eight keeps a turn's fan-out to a
 * tool host to a handful of connections (one /prompt once opened 300 to one host) while a few slow tools still
 * overlap.
 */
export const MAX_PARALLEL_TOOL_CALLS = 8;

/**
 * Tool calls of one turn that are run at all: the model's calls beyond this (in its order) each get an `is_error`
 * result saying the cap was reached, so the model can ask again in a later turn. 64 is far above what a real turn
 * asks for; with `maxTurns` (at most 100) it also bounds a run's calls.
 */
export const MAX_TOOL_CALLS_PER_TURN = 64;

/**
 * The most the gateway reads of one MCP message: a JSON response's whole body, or one event of an event stream (its
 * field lines included). A JSON-RPC message cannot be cut and still parse, so a larger one is an error, not a
 * truncation: a tool call's answer over it is an `is_error` result, a tool list over it fails the server. 4 MiB is
 * forty times a tool result's budget (DEFAULT_MAX_RESULT_BYTES, 100,000 bytes), so an answer the model would read
 * truncated, like an HTTP tool's, is still read.
 */
export const MCP_MAX_MESSAGE_BYTES = 4 * 1024 * 1024;

/**
 * The most the gateway reads of one event stream from an MCP server, all its events together: a server that floods
 * small events (or never ends a POST's answer stream) is cut here. 64 MiB is 16 answers at MCP_MAX_MESSAGE_BYTES, or
 * a run's worth of ordinary ones over the older SSE transport, whose one stream carries every answer.
 */
export const MCP_MAX_STREAM_BYTES = 64 * 1024 * 1024;

/** Tools one MCP server may list: a server listing more fails, with that reason, rather than flood every request. */
export const MAX_MCP_TOOLS_PER_SERVER = 128;

/**
 * How deep a tool's `input_schema` may nest (objects and arrays): a schema deeper than this is skipped with that
 * reason. The model's request nests it three levels down (body → tools → tool), and the proxy's own bodies stop at 100
 * levels (http/limits.ts MAX_JSON_DEPTH); 64 is far beyond any real schema.
 */
export const MAX_TOOL_SCHEMA_DEPTH = 64;

/**
 * How large one tool's `input_schema` may be, as JSON: a larger one is skipped with that reason. Every tool's schema
 * is sent (and paid for as input) with every model call of the run.
 */
export const MAX_TOOL_SCHEMA_BYTES = 64 * 1024;
