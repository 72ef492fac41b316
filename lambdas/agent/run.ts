import type Anthropic from '@anthropic-ai/sdk';
import type { Caller } from '../auth/claims.ts';
import { env } from '../config/env.ts';
import { meteredCall, type CallCharge } from '../metering/call.ts';
import type { MessagesRequest } from '../providers/types.ts';
import { messageOf } from '../refusals/anthropic.ts';
import type { Refusal } from '../refusals/refusal.ts';
import { isHttpTool, type RunOptions } from './options.ts';
import { structuredOutputCheck } from './structured-output.ts';
import { httpTool } from './tools/http.ts';
import { connectMcpServers, type McpServerStatus } from './tools/mcp.ts';
import type { AgentTool } from './tools/types.ts';

/**
 * The agent runtime (docs/prompt.md): one message in, then turns — one metered model call each (metering/call.ts,
 * reserved and settled like any proxied request) — running the tools the model asks for, concurrently, and sending
 * their results back, until the model answers. No HTTP and no AWS here: `/prompt` renders the events and the result
 * as JSON or SSE, and vessels and `/ws` turns run the same loop.
 */

export type ResultSubtype =
  | 'success'
  | 'error_max_turns'
  | 'error_max_budget_usd'
  | 'error_max_structured_output_retries'
  | 'error_during_execution'
  | 'error_max_duration';

/** What happens during a run, in order: text as the model produces it, each tool call and its result. */
export type RunEvent =
  | { type: 'assistant'; subtype: 'text'; text: string }
  | { type: 'tool_use'; subtype: 'http' | 'mcp'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; subtype: 'http' | 'mcp'; tool_use_id: string; name: string; is_error: boolean; text: string };

export interface RunResult {
  type: 'result';
  subtype: ResultSubtype;
  is_error: boolean;
  /** The final answer's text (thinking excluded); for an error subtype, what was said so far or the error. */
  text: string;
  total_cost_usd: number;
  /** Exact integer form of total_cost_usd. */
  total_cost_microdollars: number;
  duration_secs: number;
  num_turns: number;
  usage: { input_tokens: number; output_tokens: number };
  model: string;
  structured_output?: unknown;
  mcp_servers?: McpServerStatus[];
  /** Why an error subtype ended the run. */
  error?: string;
}

export interface RunInput {
  caller: Caller;
  message: string;
  options: RunOptions;
  /** Epoch milliseconds by which the run must have ended (the user's compute, the invocation's limit). */
  deadline: number;
  /** Stops the run: the model call in flight is charged for what was produced, tools are abandoned. */
  signal: AbortSignal;
  onEvent?: (event: RunEvent) => void;
}

/** What one answer may hold when the caller sets no thinking budget. */
export const DEFAULT_MAX_TOKENS = 8_192;
export const DEFAULT_MAX_TURNS = 10;
/** Corrections asked for when the final answer does not match `outputFormat`, before the run gives up. */
export const MAX_STRUCTURED_OUTPUT_RETRIES = 2;

const MICROS_PER_USD = 1_000_000;

export async function runAgent(given: RunInput): Promise<{ result: RunResult; events: RunEvent[] }> {
  const started = Date.now();
  // The deadline stops a model call or a tool in flight too, not only the next turn.
  const timeUp = new AbortController();
  const timer = setTimeout(() => timeUp.abort(), Math.max(0, given.deadline - started));
  const input: RunInput = { ...given, signal: AbortSignal.any([given.signal, timeUp.signal]) };
  const stopped = () => (timeUp.signal.aborted ? ('error_max_duration' as const) : ('error_during_execution' as const));
  // Whoever stops a run may say why by aborting with a string (a vessel's cancel); a bare abort is a client gone.
  const stopReason = () =>
    timeUp.signal.aborted
      ? "The run reached its time limit (the user's remaining compute seconds)"
      : typeof given.signal.reason === 'string'
        ? given.signal.reason
        : 'The run was stopped: the client went away';
  const { options } = input;
  const model = options.model ?? env().DEFAULT_MODEL;
  const maxTurns = options.maxTurns ?? DEFAULT_MAX_TURNS;
  const capMicros = options.maxBudgetUsd === undefined ? undefined : Math.floor(options.maxBudgetUsd * MICROS_PER_USD);
  const events: RunEvent[] = [];
  const emit = (event: RunEvent) => {
    events.push(event);
    input.onEvent?.(event);
  };

  // The tools: HTTP tools from the options, MCP servers' tools, filtered by allowedTools / disallowedTools.
  const mcp = options.mcpServers && Object.keys(options.mcpServers).length ? await connectMcpServers(options.mcpServers, { signal: input.signal }) : undefined;
  const serverTools = (options.tools ?? []).filter((t) => !isHttpTool(t)) as Record<string, unknown>[];
  const agentTools = [...(options.tools ?? []).filter(isHttpTool).map((spec) => httpTool(spec)), ...(mcp?.tools ?? [])].filter((t) => allowed(t.name, options));
  const offered = [...serverTools.filter((t) => allowed(String(t.name), options)), ...agentTools.map(({ name, description, input_schema }) => ({ name, ...(description ? { description } : {}), input_schema }))];
  const byName = new Map<string, AgentTool>(agentTools.map((t) => [t.name, t]));
  const checkOutput = options.outputFormat ? structuredOutputCheck(options.outputFormat.schema) : undefined;

  const conversation: Anthropic.MessageParam[] = [{ role: 'user', content: input.message }];
  let spent = 0;
  const usage = { input_tokens: 0, output_tokens: 0 };
  let turns = 0;
  let corrections = 0;
  let lastText = '';

  const finish = (subtype: ResultSubtype, extra: { text?: string; error?: string; structured_output?: unknown } = {}): { result: RunResult; events: RunEvent[] } => {
    const result: RunResult = {
      type: 'result',
      subtype,
      is_error: subtype !== 'success',
      text: extra.text ?? lastText,
      total_cost_usd: spent / MICROS_PER_USD,
      total_cost_microdollars: spent,
      duration_secs: Math.round(Date.now() - started) / 1000,
      num_turns: turns,
      usage,
      model,
      ...(extra.structured_output === undefined ? {} : { structured_output: extra.structured_output }),
      ...(mcp ? { mcp_servers: mcp.servers } : {}),
      ...(extra.error ? { error: extra.error } : {}),
    };
    return { result, events };
  };

  try {
    while (turns < maxTurns) {
      if (input.signal.aborted) return finish(stopped(), { error: stopReason() });
      turns++;
      const turn = await callModel(input, {
        model,
        conversation,
        offered,
        capMicros: capMicros === undefined ? undefined : capMicros - spent,
        emit,
      });
      if (turn.charge) {
        spent += turn.charge.microdollars;
        usage.input_tokens += turn.usage.input_tokens;
        usage.output_tokens += turn.usage.output_tokens;
      }
      if (!turn.ok) {
        if (turn.refusal.kind === 'cost_cap_reached') {
          turns--; // no model call was made
          return finish('error_max_budget_usd', { error: messageOf(turn.refusal) });
        }
        return turn.aborted ? finish(stopped(), { error: stopReason() }) : finish('error_during_execution', { error: messageOf(turn.refusal) });
      }
      const message = turn.message;
      lastText = textOf(message);
      conversation.push({ role: 'assistant', content: message.content as Anthropic.ContentBlockParam[] });

      // An answer cut short because the run's budget lowered max_tokens cannot be used: the budget is what ended it.
      if (message.stop_reason === 'max_tokens' && turn.clamped && capMicros !== undefined) {
        return finish('error_max_budget_usd', { error: `maxBudgetUsd left room for only ${turn.clamped} output tokens, and the answer needed more` });
      }
      const calls = message.content.filter((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
      if (message.stop_reason === 'tool_use' && calls.length > 0) {
        const results = await Promise.all(calls.map((call) => runTool(call, byName, input.signal, emit)));
        conversation.push({ role: 'user', content: results });
        continue;
      }
      if (message.stop_reason === 'max_tokens' && calls.length > 0) {
        return finish('error_during_execution', { error: 'The model ran out of tokens in the middle of a tool call' });
      }

      if (checkOutput) {
        const checked = checkOutput(lastText);
        if (checked.ok) return finish('success', { structured_output: checked.value });
        if (corrections >= MAX_STRUCTURED_OUTPUT_RETRIES) return finish('error_max_structured_output_retries', { error: checked.problem });
        corrections++;
        conversation.push({
          role: 'user',
          content: `Your answer does not match the required JSON Schema: ${checked.problem}. Answer again with only a JSON value that matches the schema, nothing else.`,
        });
        continue;
      }
      return finish('success');
    }
    return finish('error_max_turns', { error: `The run reached maxTurns (${maxTurns}) before a final answer` });
  } finally {
    clearTimeout(timer);
    await mcp?.close();
  }
}

/** Whether a tool may be offered: `disallowedTools` wins; `allowedTools`, when given, lists all that may be. */
function allowed(name: string, options: RunOptions): boolean {
  const matches = (rule: string) => rule === name || (rule.startsWith('mcp__') && !rule.slice(5).includes('__') && name.startsWith(`${rule}__`));
  if (options.disallowedTools?.some(matches)) return false;
  return options.allowedTools === undefined || options.allowedTools.some(matches);
}

interface TurnContext {
  model: string;
  conversation: Anthropic.MessageParam[];
  offered: Record<string, unknown>[];
  capMicros?: number;
  emit: (event: RunEvent) => void;
}

type TurnOutcome =
  | { ok: true; message: Anthropic.Message; charge: CallCharge; usage: { input_tokens: number; output_tokens: number }; clamped?: number }
  | { ok: false; refusal: Refusal; aborted: boolean; charge?: CallCharge; usage: { input_tokens: number; output_tokens: number } };

/** One turn: one metered, streamed model call; text deltas are emitted as they arrive. */
async function callModel(input: RunInput, turn: TurnContext): Promise<TurnOutcome> {
  const thinking = input.options.maxThinkingTokens;
  const body = {
    model: turn.model,
    max_tokens: DEFAULT_MAX_TOKENS + (thinking ?? 0),
    messages: turn.conversation,
    stream: true,
    ...(input.options.systemPrompt ? { system: input.options.systemPrompt } : {}),
    ...(turn.offered.length ? { tools: turn.offered } : {}),
    ...(thinking ? { thinking: { type: 'enabled', budget_tokens: thinking } } : {}),
  } as unknown as MessagesRequest;
  const call = await meteredCall({ caller: input.caller, body, signal: input.signal, ...(turn.capMicros === undefined ? {} : { capMicros: turn.capMicros }) });
  const none = { input_tokens: 0, output_tokens: 0 };
  if (!call.ok) return { ok: false, refusal: call.refusal, aborted: input.signal.aborted, usage: none, ...(call.charge ? { charge: call.charge } : {}) };
  const clamped = call.clampedMaxTokens;
  if (call.kind === 'message') return { ok: true, message: call.message, charge: call.charge, usage: tokensOf(call.charge, call.message), clamped };

  const { stream } = call;
  stream.accumulator.onEvent((event) => {
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta' && event.delta.text) turn.emit({ type: 'assistant', subtype: 'text', text: event.delta.text });
  });
  // Reading the body drives the stream; its bytes are not needed here (the accumulator has decoded them).
  const reader = stream.body.getReader();
  while (!(await reader.read()).done);
  const charge = await stream.settled;
  const message = stream.accumulator.message();
  const usage = tokensOf(charge, message);
  if (input.signal.aborted) return { ok: false, refusal: { kind: 'invalid_request', message: 'The run was stopped' }, aborted: true, charge, usage };
  if (!message || stream.accumulator.errorSeen || !message.stop_reason) {
    const error = stream.accumulator.error?.message ?? 'The model stream ended before its answer was complete';
    return { ok: false, refusal: { kind: 'upstream', status: 500, body: { type: 'error', error: { type: 'api_error', message: error } } }, aborted: false, charge, usage };
  }
  return { ok: true, message, charge, usage, clamped };
}

function tokensOf(charge: CallCharge, message: Anthropic.Message | undefined): { input_tokens: number; output_tokens: number } {
  const t = charge.tokens;
  if (t) return { input_tokens: t.input_tokens + (t.cache_read_input_tokens ?? 0) + (t.cache_creation_input_tokens ?? 0), output_tokens: t.output_tokens };
  return { input_tokens: message?.usage?.input_tokens ?? 0, output_tokens: message?.usage?.output_tokens ?? 0 };
}

/** The answer's text: its text blocks, joined (thinking is not part of it). */
function textOf(message: Anthropic.Message): string {
  return message.content
    .filter((b): b is Anthropic.TextBlock => b.type === 'text')
    .map((b) => b.text)
    .join('');
}

/** Runs one tool call; an unknown tool (never offered, or hallucinated) is an error result the model can read. */
async function runTool(call: Anthropic.ToolUseBlock, tools: Map<string, AgentTool>, signal: AbortSignal, emit: (event: RunEvent) => void): Promise<Anthropic.ToolResultBlockParam> {
  const tool = tools.get(call.name);
  const subtype = call.name.startsWith('mcp__') ? 'mcp' : 'http';
  emit({ type: 'tool_use', subtype, id: call.id, name: call.name, input: call.input });
  const outcome = tool ? await tool.run(call.input, signal) : { content: `No tool named "${call.name}" is available in this run`, isError: true };
  emit({ type: 'tool_result', subtype, tool_use_id: call.id, name: call.name, is_error: outcome.isError, text: outcome.content });
  return { type: 'tool_result', tool_use_id: call.id, content: outcome.content, ...(outcome.isError ? { is_error: true } : {}) };
}
