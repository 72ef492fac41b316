import { randomBytes } from 'node:crypto';
import type Anthropic from '@anthropic-ai/sdk';
import type OpenAI from 'openai';
import type { Dialect } from './dialect.ts';
import { anthropicUsage, messageIdOf, stopForFinish, toolUseOf, type AnthropicUsage, type StopReason } from './mapping.ts';
import type { ToolNames } from './request.ts';

export { anthropicUsage, parseArguments, type AnthropicUsage, type StopReason } from './mapping.ts';

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

export type Block =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: unknown };

/** `chatcmpl-abc` → `msg_abc`, `gen-123-xyz` → `msg_123-xyz`. */
export function messageId(upstreamId: string | undefined): string {
  return messageIdOf(upstreamId, () => randomBytes(12).toString('hex'));
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
  const mapped = stopForFinish(finish);
  if (mapped && mapped !== 'end_turn') return { stop_reason: mapped, stop_sequence: null };
  if (opts.hasToolCalls) return { stop_reason: 'tool_use', stop_sequence: null };
  if (typeof opts.matched === 'string' && opts.stopSequences.includes(opts.matched)) {
    return { stop_reason: 'stop_sequence', stop_sequence: opts.matched };
  }
  return { stop_reason: 'end_turn', stop_sequence: null };
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
    content.push(toolUseOf({ id: call.id, function: { ...call.function, name: ctx.names.restore(call.function.name) } }));
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
