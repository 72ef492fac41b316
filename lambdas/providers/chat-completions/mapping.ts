import type OpenAI from 'openai';

/**
 * One table per concept shared by Anthropic's Messages format and OpenAI's Chat Completions format, read in both
 * directions: the translation to OpenAI and OpenRouter (request.ts, response.ts, stream.ts here) and the
 * OpenAI-compatible ingress (lambdas/openai-ingress, docs/openai.md) use these and nothing else for roles, stop
 * reasons, tool choices, image sources, usage, ids and reasoning effort.
 */

// ---------------------------------------------------------------------------------------------------------------
// Stop reasons
// ---------------------------------------------------------------------------------------------------------------

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal' | 'pause_turn' | 'model_context_window_exceeded';
export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter';

/**
 * Pairs of (OpenAI finish_reason, Anthropic stop_reason). The first pair for a finish reason is what it maps to; the
 * first pair for a stop reason is what it maps back to. OpenAI has no separate "stop sequence matched" nor "paused"
 * reason: both are a plain `stop`; running out of context is `length`.
 */
const STOP_PAIRS: ReadonlyArray<readonly [FinishReason | 'function_call', StopReason]> = [
  ['stop', 'end_turn'],
  ['length', 'max_tokens'],
  ['tool_calls', 'tool_use'],
  ['function_call', 'tool_use'],
  ['content_filter', 'refusal'],
  ['stop', 'stop_sequence'],
  ['stop', 'pause_turn'],
  ['length', 'model_context_window_exceeded'],
];

/** OpenAI finish_reason → Anthropic stop_reason (undefined for an unknown or missing reason). */
export function stopForFinish(finish: string | null | undefined): StopReason | undefined {
  return STOP_PAIRS.find(([f]) => f === finish)?.[1];
}

/** Anthropic stop_reason → OpenAI finish_reason (an unknown or missing reason is `stop`). */
export function finishForStop(stop: string | null | undefined): FinishReason {
  const finish = STOP_PAIRS.find(([, s]) => s === stop)?.[0] ?? 'stop';
  return finish === 'function_call' ? 'tool_calls' : finish;
}

// ---------------------------------------------------------------------------------------------------------------
// Tool choice
// ---------------------------------------------------------------------------------------------------------------

/** Anthropic tool_choice type ↔ OpenAI's string tool_choice; Anthropic's `tool` is OpenAI's named function. */
const TOOL_CHOICE_PAIRS = [
  ['auto', 'auto'],
  ['any', 'required'],
  ['none', 'none'],
] as const;
export type AnthropicToolChoiceType = (typeof TOOL_CHOICE_PAIRS)[number][0];
export type OpenAIToolChoiceMode = (typeof TOOL_CHOICE_PAIRS)[number][1];

export function openaiToolChoiceMode(type: string): OpenAIToolChoiceMode | undefined {
  return TOOL_CHOICE_PAIRS.find(([a]) => a === type)?.[1];
}
export function anthropicToolChoiceType(mode: string): AnthropicToolChoiceType | undefined {
  return TOOL_CHOICE_PAIRS.find(([, o]) => o === mode)?.[0];
}

// ---------------------------------------------------------------------------------------------------------------
// Tools and tool calls
// ---------------------------------------------------------------------------------------------------------------

export interface AnthropicTool {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
}

/** An Anthropic custom tool ↔ an OpenAI function tool: name, description, and the JSON schema of its input. */
export function functionTool(tool: AnthropicTool): OpenAI.Chat.ChatCompletionFunctionTool {
  const fn: OpenAI.FunctionDefinition = { name: tool.name, parameters: tool.input_schema as OpenAI.FunctionParameters };
  if (tool.description !== undefined) fn.description = tool.description;
  return { type: 'function', function: fn };
}
export function anthropicTool(fn: { name: string; description?: string; parameters?: unknown }): AnthropicTool {
  const tool: AnthropicTool = { name: fn.name, input_schema: (fn.parameters ?? { type: 'object', properties: {} }) as Record<string, unknown> };
  if (fn.description !== undefined) tool.description = fn.description;
  return tool;
}

/** An Anthropic tool_use (id, name, input object) ↔ an OpenAI tool call (`arguments` as JSON text). */
export function toolCallOf(use: { id: string; name: string; input: unknown }): OpenAI.Chat.ChatCompletionMessageFunctionToolCall {
  return { id: use.id, type: 'function', function: { name: use.name, arguments: JSON.stringify(use.input ?? {}) } };
}
export function toolUseOf(call: { id: string; function: { name: string; arguments?: string } }): {
  type: 'tool_use';
  id: string;
  name: string;
  input: Record<string, unknown>;
} {
  return { type: 'tool_use', id: call.id, name: call.function.name, input: parseArguments(call.function.arguments) };
}

/**
 * Tool call arguments → `input`. Anthropic's input is always an object: arguments that are not a JSON object
 * (truncated or malformed by the model) become `{}`, so the client's tool reports the missing arguments and the
 * model can retry, instead of the whole paid turn failing.
 */
export function parseArguments(args: string | undefined): Record<string, unknown> {
  if (!args) return {};
  try {
    const value: unknown = JSON.parse(args);
    return value && typeof value === 'object' && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Image sources
// ---------------------------------------------------------------------------------------------------------------

export type ImageSource = { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string };

/** An Anthropic image source → the URL of an OpenAI `image_url` part (a data: URL for base64); undefined otherwise. */
export function imageUrlOf(source: unknown): string | undefined {
  const s = source as { type?: string; media_type?: string; data?: string; url?: string } | undefined;
  if (s?.type === 'base64' && typeof s.data === 'string' && typeof s.media_type === 'string') return `data:${s.media_type};base64,${s.data}`;
  if (s?.type === 'url' && typeof s.url === 'string') return s.url;
  return undefined;
}

/** An OpenAI `image_url` URL → an Anthropic image source: a base64 data: URL → base64, http(s) → url; undefined otherwise. */
export function imageSourceOf(url: string): ImageSource | undefined {
  const data = /^data:([^;,]+);base64,(.*)$/s.exec(url);
  if (data) return { type: 'base64', media_type: data[1]!, data: data[2]! };
  if (/^https?:\/\//i.test(url)) return { type: 'url', url };
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// Usage
// ---------------------------------------------------------------------------------------------------------------

/** Anthropic's four usage counters. OpenAI's prompt_tokens include the cached ones; Anthropic's input_tokens do not. */
export interface AnthropicUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

/** OpenAI usage → Anthropic usage: cached tokens are cache reads (OpenAI bills no cache writes). */
export function anthropicUsage(usage: OpenAI.CompletionUsage | null | undefined): AnthropicUsage {
  const prompt = usage?.prompt_tokens ?? 0;
  const cached = usage?.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    input_tokens: Math.max(0, prompt - cached),
    cache_creation_input_tokens: 0,
    cache_read_input_tokens: cached,
    // completion_tokens already include the reasoning tokens, as Anthropic's output_tokens include thinking.
    output_tokens: usage?.completion_tokens ?? 0,
  };
}

/** Anthropic usage → OpenAI usage: prompt_tokens counts every input token, cache reads and writes included. */
export function openaiUsage(usage: Partial<AnthropicUsage> | null | undefined): OpenAI.CompletionUsage {
  const cached = usage?.cache_read_input_tokens ?? 0;
  const prompt = (usage?.input_tokens ?? 0) + cached + (usage?.cache_creation_input_tokens ?? 0);
  const completion = usage?.output_tokens ?? 0;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } };
}

// ---------------------------------------------------------------------------------------------------------------
// Ids
// ---------------------------------------------------------------------------------------------------------------

/** `chatcmpl-abc` → `msg_abc`, `gen-123-xyz` → `msg_123-xyz`; `fresh` when there is none. */
export function messageIdOf(completionId: string | undefined, fresh: () => string): string {
  if (!completionId) return `msg_${fresh()}`;
  return `msg_${completionId.replace(/^[A-Za-z]+[-_]/, '')}`;
}
/** `msg_abc` → `chatcmpl-abc`. */
export function completionIdOf(messageId: string): string {
  return `chatcmpl-${messageId.replace(/^msg_/, '')}`;
}

// ---------------------------------------------------------------------------------------------------------------
// Reasoning effort ↔ thinking budget
// ---------------------------------------------------------------------------------------------------------------

export type Effort = 'low' | 'medium' | 'high';

/**
 * The thinking budget each OpenAI effort stands for. The budgets are also the thresholds of the other direction: a
 * budget below the medium one is `low`, below the high one `medium`, else `high` — so each effort maps back to itself.
 * `low` is Anthropic's smallest budget (1,024).
 */
export const EFFORT_BUDGETS: Readonly<Record<Effort, number>> = { low: 1024, medium: 4096, high: 16384 };

/** Anthropic's thinking budget → OpenAI's effort: low < 4096 ≤ medium < 16384 ≤ high. */
export function effortForBudget(budgetTokens: number): Effort {
  if (budgetTokens < EFFORT_BUDGETS.medium) return 'low';
  if (budgetTokens < EFFORT_BUDGETS.high) return 'medium';
  return 'high';
}
