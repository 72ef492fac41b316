/**
 * The gateway's request and answer shapes, as its docs state them (docs/prompt.md, incubate.md, api.md, ws.md).
 * Fields the gateway may add later pass through untyped.
 */

/** A JSON Schema object (tools' `input_schema`, `outputFormat.schema`). */
export type JsonSchema = { [key: string]: unknown };

/** A remote HTTP tool: the gateway POSTs the model's input to `url` and gives the answer to the model. */
export interface HttpTool {
  name: string;
  description?: string;
  input_schema: JsonSchema;
  url: string;
  headers?: Record<string, string>;
}

/** An Anthropic server tool (`{"type":"web_search_20250305","name":"web_search",…}`), passed to Claude models. */
export interface ServerTool {
  type: string;
  name: string;
  [key: string]: unknown;
}

/** A client tool (/ws only): the gateway sends you the model's call, your `onToolUse` answers it. */
export interface ClientTool {
  name: string;
  description?: string;
  input_schema: JsonSchema;
}

export interface McpServer {
  type: 'http' | 'sse';
  url: string;
  headers?: Record<string, string>;
}

/** `/prompt`'s options (docs/prompt.md, "Options"), without `token`: the client adds it. */
export interface PromptOptions {
  model?: string;
  systemPrompt?: string;
  tools?: (HttpTool | ServerTool)[];
  mcpServers?: Record<string, McpServer>;
  allowedTools?: string[];
  disallowedTools?: string[];
  /** Model calls at most, 1–100 (default 10). */
  maxTurns?: number;
  /** The run's total cost never exceeds this. */
  maxBudgetUsd?: number;
  /** Extended thinking with this budget (≥ 1,024). */
  maxThinkingTokens?: number;
  outputFormat?: { type: 'json_schema'; schema: JsonSchema };
}

/** A /ws session's options: `/prompt`'s, where a tool without `url` or `type` is a client tool. */
export interface SessionRunOptions extends Omit<PromptOptions, 'tools'> {
  tools?: (HttpTool | ServerTool | ClientTool)[];
}

export type ResultSubtype =
  | 'success'
  | 'error_max_turns'
  | 'error_max_budget_usd'
  | 'error_max_structured_output_retries'
  | 'error_during_execution'
  | 'error_max_duration'
  | (string & {});

/** The end of a run (docs/prompt.md, "JSON answer"). */
export interface PromptResult {
  type: 'result';
  subtype: ResultSubtype;
  is_error: boolean;
  /** The final answer's text (for an error subtype, the last turn's). */
  text: string;
  total_cost_usd: number;
  /** The same cost as an exact integer. */
  total_cost_microdollars: number;
  duration_secs: number;
  num_turns: number;
  usage: { input_tokens: number; output_tokens: number };
  model: string;
  /** With `outputFormat`: the answer, parsed and valid against the schema. */
  structured_output?: unknown;
  /** With `mcpServers`: each server's status. */
  mcp_servers?: unknown;
  /** What ended the run, for an error subtype. */
  error?: string;
  [key: string]: unknown;
}

export interface AssistantText {
  type: 'assistant';
  subtype: 'text';
  /** A chunk of the model's text (SSE, /ws) or a whole turn's (JSON). */
  text: string;
}

export interface ToolUseMessage {
  type: 'tool_use';
  subtype: 'http' | 'mcp' | 'client';
  id: string;
  name: string;
  input: unknown;
}

export interface ToolResultMessage {
  type: 'tool_result';
  subtype: 'http' | 'mcp';
  tool_use_id: string;
  name: string;
  is_error: boolean;
  text: string;
}

/** The interface's message objects: what `/prompt` streams, and what its JSON answer lists. */
export type PromptMessage = AssistantText | ToolUseMessage | ToolResultMessage | PromptResult;

/** `/prompt`'s JSON answer, with the response's `request-id`. */
export interface PromptResponse {
  result: PromptResult;
  messages: PromptMessage[];
  sessionId: string;
  requestId: string | undefined;
}

export interface WebhookCallback {
  /** Where the result is POSTed when the vessel ends (https in a deployed gateway). */
  url: string;
  /** Signs the deliveries (both signatures); verify them with `verifyWebhook(body, headers, secret)`. */
  secret?: string;
}

/** When a vessel is due: `ttl` seconds from now (0–31,536,000), or `executeAt` (wins when both are given). */
export interface VesselTiming {
  ttl?: number;
  executeAt?: Date | string;
}

export interface IncubateRequest extends VesselTiming {
  message: string;
  /** Unique per project, 1–255 characters: the same key and body again is answered with the same vessel. */
  idempotencyKey: string;
  options?: PromptOptions;
  callback?: WebhookCallback;
}

export type VesselStatus = 'PENDING' | 'QUEUED' | 'EXECUTING' | 'COMPLETED' | 'FAILED' | 'CANCELED';

/** `POST /incubate`'s answer. `replayed`: the key was used before with the same body (HTTP 200, `Idempotent-Replayed`). */
export interface QueuedVessel {
  vesselId: string;
  idempotencyKey: string;
  status: 'queued' | (string & {});
  scheduledFor: string;
  replayed: boolean;
  requestId: string | undefined;
}

export interface IncubateBatchRequest extends VesselTiming {
  /** At most 100. */
  items: { message: string; idempotencyKey: string }[];
  options?: PromptOptions;
  callback?: WebhookCallback;
}

export type BatchItem =
  | { index: number; idempotencyKey: string; status: 'queued'; vesselId: string; scheduledFor: string; replayed?: true }
  | { index: number; idempotencyKey: string; status: 'failed'; error: { code: string; message: string } };

export interface IncubateBatchResponse {
  total: number;
  queued: number;
  failed: number;
  items: BatchItem[];
  requestId: string | undefined;
}

export interface WebhookAttempt {
  round: number;
  attempt: number;
  time: string;
  statusCode?: number;
  error?: string;
  durationMs: number;
}

/** `GET /incubate/vessel/{id}` (docs/incubate.md, "The record"). */
export interface VesselRecord {
  vesselId: string;
  status: VesselStatus;
  taskIdentifier: string;
  /** True for every end: a poller stops on it. */
  isCompleted: boolean;
  isSuccess: boolean;
  isFailed: boolean;
  isCanceled: boolean;
  idempotencyKey: string;
  createdAt: string;
  updatedAt: string;
  scheduledFor: string;
  attempts: number;
  startedAt?: string;
  completedAt?: string;
  cancelRequested?: boolean;
  callback?: { url: string; signed: boolean };
  /** Once ended. */
  output?: {
    success: boolean;
    text: string;
    truncated?: true;
    result: Omit<PromptResult, 'is_error' | 'text'> & { subtype: string };
    structured_output?: unknown;
  };
  webhook?: {
    status: 'pending' | 'delivered' | 'failed';
    failure?: 'exhausted' | 'gone' | 'refused';
    nextAttemptAt?: string;
    attempts: WebhookAttempt[];
  };
  [key: string]: unknown;
}

/** `GET /usage`: the caller's current budget window (docs/api.md). Money in microdollars, compute in seconds. */
export interface Usage {
  user_id: string;
  issuer_id: string;
  window: 'hour' | 'day' | 'week' | 'month' | 'lifetime';
  window_start: string;
  /** True while both meters have something left. */
  allowed: boolean;
  ai: { used: number; remaining: number; budget: number; reserved: number; overrun: number };
  compute: { used: number; remaining: number; budget: number; reserved: number };
}
