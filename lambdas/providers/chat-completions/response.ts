import { randomBytes } from 'node:crypto';
import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import type { Dialect } from './dialect.ts';
import type { ToolNames } from './request.ts';

/**
 * OpenAI Chat Completion → Anthropic Message. The shapes produced here are Anthropic's wire shapes as its API sends
 * them (the fields newer SDK types add — container, citations, caller… — are simply absent, as they are in most
 * real answers), so the one cast to `Anthropic.Message` lives in `anthropicMessage`.
 */

export interface AnswerContext {
  /** The model name the client asked for (`or:…`, `gpt-4o`): the answer names it, not the upstream's. */
  requestedModel: string;
  names: ToolNames;
  dialect: Dialect;
  stopSequences: string[];
}

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal';

/** Anthropic's four usage counters. OpenAI's prompt_tokens include the cached ones; Anthropic's input_tokens do not. */
export interface AnthropicUsage {
  input_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  output_tokens: number;
}

export type Block =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown };

/** `chatcmpl-abc` → `msg_abc`, `gen-123-xyz` → `msg_123-xyz`. */
export function messageId(upstreamId: string | undefined): string {
  if (!upstreamId) return `msg_${randomBytes(12).toString('hex')}`;
  return `msg_${upstreamId.replace(/^[A-Za-z]+[-_]/, '')}`;
}

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

/**
 * finish_reason → stop_reason. OpenAI reports a matched stop sequence as a plain "stop" and drops it from the text;
 * only servers that name the match (vLLM-style `stop_reason: "<sequence>"` on the choice) let us say stop_sequence.
 * Some OpenAI-compatible servers (behind OpenRouter) finish a tool call with "stop": tool calls win.
 */
export function stopReason(
  finish: string | null | undefined,
  opts: { hasToolCalls: boolean; matched?: unknown; stopSequences: string[] },
): { stop_reason: StopReason; stop_sequence: string | null } {
  switch (finish) {
    case 'length':
      return { stop_reason: 'max_tokens', stop_sequence: null };
    case 'tool_calls':
    case 'function_call':
      return { stop_reason: 'tool_use', stop_sequence: null };
    case 'content_filter':
      return { stop_reason: 'refusal', stop_sequence: null };
  }
  if (opts.hasToolCalls) return { stop_reason: 'tool_use', stop_sequence: null };
  if (typeof opts.matched === 'string' && opts.stopSequences.includes(opts.matched)) {
    return { stop_reason: 'stop_sequence', stop_sequence: opts.matched };
  }
  return { stop_reason: 'end_turn', stop_sequence: null };
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

export function anthropicMessage(fields: {
  id: string;
  model: string;
  content: Block[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: AnthropicUsage;
}): Anthropic.Message {
  return {
    id: fields.id,
    type: 'message',
    role: 'assistant',
    model: fields.model,
    content: fields.content,
    stop_reason: fields.stop_reason,
    stop_sequence: fields.stop_sequence,
    usage: fields.usage,
  } as unknown as Anthropic.Message;
}

/** The reasoning text of a message or delta, in the dialect's field. */
export function reasoningOf(source: unknown, dialect: Dialect): string | undefined {
  const value = (source as Record<string, unknown> | null | undefined)?.[dialect.reasoningField];
  return typeof value === 'string' && value !== '' ? value : undefined;
}

export function translateResponse(completion: OpenAI.Chat.ChatCompletion, ctx: AnswerContext): Anthropic.Message {
  const choice = completion.choices?.[0];
  const message = choice?.message;
  const content: Block[] = [];
  const reasoning = reasoningOf(message, ctx.dialect);
  if (reasoning) content.push({ type: 'thinking', thinking: reasoning, signature: '' });
  const text = message?.content ?? message?.refusal ?? '';
  if (text) content.push({ type: 'text', text });
  const calls = (message?.tool_calls ?? []).filter((c): c is OpenAI.Chat.ChatCompletionMessageFunctionToolCall => c.type === 'function');
  for (const call of calls) {
    content.push({ type: 'tool_use', id: call.id, name: ctx.names.restore(call.function.name), input: parseArguments(call.function.arguments) });
  }
  const finish = message?.refusal && !message.content ? 'content_filter' : choice?.finish_reason;
  const stop = stopReason(finish, {
    hasToolCalls: calls.length > 0,
    matched: (choice as { stop_reason?: unknown } | undefined)?.stop_reason,
    stopSequences: ctx.stopSequences,
  });
  return anthropicMessage({
    id: messageId(completion.id),
    model: ctx.requestedModel,
    content,
    ...stop,
    usage: anthropicUsage(completion.usage),
  });
}
