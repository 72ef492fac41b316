import type Anthropic from '@anthropic-ai/sdk';
import { clock } from '../config/clock.ts';
import type { Caller } from '../auth/claims.ts';
import { env } from '../config/env.ts';
import { meteredCall, type CallCharge } from '../metering/call.ts';
import type { MessagesRequest } from '../providers/types.ts';
import { messageOf } from '../refusals/describe.ts';
import { isInvalidRequest, type Refusal } from '../refusals/refusal.ts';
import { onFirstUse, structuredOutput } from './on-demand.ts';
import { isClientTool, isHttpTool, isServerTool, type SessionOptions } from './options.ts';
import { INTERRUPTED, MICROS_PER_USD, runResult, type ResultSubtype, type RunEvent, type RunResult, type RunState } from './result.ts';
import { httpTool } from './tools/http.ts';
import { MAX_PARALLEL_TOOL_CALLS, MAX_TOOL_CALLS_PER_TURN } from './tools/limits.ts';
import { mcpServerRule } from './tools/names.ts';
import type { AgentTool, ToolOutcome } from './tools/types.ts';

/**
 * The agent runtime (docs/prompt.md): one message in, then turns — one metered model call each (metering/call.ts,
 * reserved and settled like any proxied request) — running the tools the model asks for, concurrently, and sending
 * their results back, until the model answers. No HTTP and no AWS here: `/prompt` renders the events and the result
 * as JSON or SSE, and vessels and `/ws` turns run the same loop. A `/ws` turn may also continue a conversation
 * (`history`) and pause when the model calls client-side tools (`runAgentSegment`), to be resumed with their results.
 * What a run yields — its events, its result, where it stands — is in result.ts, which its readers load without it.
 */

export interface RunInput {
  caller: Caller;
  /** A new user message, or the results of a paused run's tool calls (in the order the model made them). */
  message: string | { resume: RunState; toolResults: Anthropic.ToolResultBlockParam[] };
  /** The conversation before a new message (a /ws session's); none for a one-shot run. */
  history?: Anthropic.MessageParam[];
  options: SessionOptions;
  /** Epoch milliseconds by which the run must have ended (the user's compute, the invocation's limit). */
  deadline: number;
  /** Stops the run: the model call in flight is charged for what was produced, tools are abandoned. */
  signal: AbortSignal;
  onEvent?: (event: RunEvent) => void;
  /**
   * Told once the run's first model call has been admitted (no argument), or refused for the user's budget before
   * any model call (the refusal): `/prompt` holds its answer's status until then, so such a run is its 429.
   */
  onFirstCall?: (refused?: Refusal) => void;
  /**
   * The clock (epoch milliseconds) the deadline and the run's duration are read on: the gateway's clock
   * (config/clock.ts) unless a test injects one.
   */
  now?: () => number;
}

/** The MCP client (tools/mcp.ts), loaded by the first run with `mcpServers` (on-demand.ts). */
const mcpClient = onFirstUse(() => import('./tools/mcp.ts'));

/** What one answer may hold when the caller sets no thinking budget. */
export const DEFAULT_MAX_TOKENS = 8_192;
export const DEFAULT_MAX_TURNS = 10;
/** Corrections asked for when the final answer does not match `outputFormat`, before the run gives up. */
export const MAX_STRUCTURED_OUTPUT_RETRIES = 2;

export type RunOutcome =
  | {
      kind: 'ended';
      result: RunResult;
      events: RunEvent[];
      state: RunState;
      /**
       * The model's API refused a call as invalid (HTTP 400, 413 or 422, or a request its translation cannot carry):
       * what the conversation holds is what it refused, so a /ws session must not keep it.
       */
      refusedAsInvalid?: true;
      /**
       * The run's first model call was refused for the user's budget (spent, or held by their calls in flight): no
       * model call was made, and the run is refused as a whole — /prompt's 429, a vessel's error_user_budget_exhausted,
       * a /ws turn's error frame — with nothing charged, its compute included (agent/admitted-run.ts).
       */
      refusedForBudget?: Refusal;
    }
  /**
   * The model called client-side tools: `calls` are all the tool calls of its message, in order; `results` those
   * the gateway ran meanwhile (server-side tools). The run resumes with every call's result in `calls`' order.
   */
  | { kind: 'paused'; events: RunEvent[]; state: RunState; calls: (Anthropic.ToolUseBlock & { client: boolean })[]; results: Anthropic.ToolResultBlockParam[] };

/** A run to its end: `/prompt` and vessels, whose tools never run in the client. */
export async function runAgent(input: RunInput): Promise<Extract<RunOutcome, { kind: 'ended' }>> {
  const outcome = await runAgentSegment(input);
  if (outcome.kind === 'paused') throw new Error('A run without client-side tools paused for one');
  return outcome;
}

export async function runAgentSegment(given: RunInput): Promise<RunOutcome> {
  const now = given.now ?? clock.now;
  const started = now();
  // The deadline stops a model call or a tool in flight too, not only the next turn.
  const timeUp = new AbortController();
  const timer = setTimeout(() => timeUp.abort(), Math.max(0, given.deadline - started));
  const input: RunInput = { ...given, signal: AbortSignal.any([given.signal, timeUp.signal]) };
  const stopped = (): ResultSubtype =>
    timeUp.signal.aborted ? 'error_max_duration' : given.signal.reason === INTERRUPTED ? 'interrupted' : 'error_during_execution';
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
  // The MCP client and the schema validator are loaded by the first run that needs them (on-demand.ts).
  const mcp =
    options.mcpServers && Object.keys(options.mcpServers).length
      ? await (await mcpClient()).connectMcpServers(options.mcpServers, { signal: input.signal })
      : undefined;
  const serverTools = (options.tools ?? []).filter(isServerTool) as Record<string, unknown>[];
  const agentTools = [...(options.tools ?? []).filter(isHttpTool).map((spec) => httpTool(spec)), ...(mcp?.tools ?? [])].filter((t) => allowed(t, options));
  const clientTools = (options.tools ?? []).filter(isClientTool).filter((t) => allowed(t, options));
  const declared = (t: { name: string; description?: string | undefined; input_schema: unknown }) => ({
    name: t.name,
    ...(t.description ? { description: t.description } : {}),
    input_schema: t.input_schema,
  });
  const offered = [...serverTools.filter((t) => allowed({ name: String(t.name) }, options)), ...agentTools.map(declared), ...clientTools.map(declared)];
  const byName = new Map<string, AgentTool>(agentTools.map((t) => [t.name, t]));
  const clientNames = new Set(clientTools.map((t) => t.name));
  const checkOutput = options.outputFormat ? (await structuredOutput()).structuredOutputCheck(options.outputFormat.schema) : undefined;

  const resumed = typeof input.message === 'string' ? undefined : input.message.resume;
  const conversation: Anthropic.MessageParam[] = [...(resumed?.conversation ?? input.history ?? [])];
  if (typeof input.message === 'string') addUserContent(conversation, input.message);
  else addUserContent(conversation, input.message.toolResults);
  let spent = resumed?.spentMicros ?? 0;
  const usage = { ...(resumed?.usage ?? { input_tokens: 0, output_tokens: 0 }) };
  let turns = resumed?.turns ?? 0;
  let corrections = resumed?.corrections ?? 0;
  let lastText = resumed?.lastText ?? '';
  const activeMs = () => (resumed?.activeMs ?? 0) + (now() - started);
  const state = (): RunState => ({
    conversation: closeToolCalls(conversation),
    spentMicros: spent,
    usage: { ...usage },
    turns,
    corrections,
    lastText,
    activeMs: activeMs(),
  });

  const finish = (
    subtype: ResultSubtype,
    extra: { text?: string; error?: string; structured_output?: unknown } = {},
    refusedAsInvalid = false,
    refusedForBudget?: Refusal,
  ): RunOutcome => {
    const ended = state();
    const result = runResult(ended, { subtype, model, ...extra, ...(mcp ? { mcp_servers: mcp.servers } : {}) });
    return {
      kind: 'ended',
      result,
      events,
      state: ended,
      ...(refusedAsInvalid ? { refusedAsInvalid: true as const } : {}),
      ...(refusedForBudget ? { refusedForBudget } : {}),
    };
  };

  try {
    while (turns < maxTurns) {
      if (input.signal.aborted) return finish(stopped(), { error: stopReason() });
      turns++;
      const first = turns === 1 && !resumed;
      const turn = await callModel(input, {
        model,
        conversation,
        offered,
        capMicros: capMicros === undefined ? undefined : capMicros - spent,
        emit,
        // The first call admitted: /prompt's answer may start (its events stream as the call produces them).
        ...(first && input.onFirstCall ? { onAdmitted: () => input.onFirstCall?.() } : {}),
      });
      if (turn.charge) {
        spent += turn.charge.microdollars;
        usage.input_tokens += turn.usage.input_tokens;
        usage.output_tokens += turn.usage.output_tokens;
      }
      if (!turn.ok && first && !turn.charge && (turn.refusal.kind === 'budget_exhausted' || turn.refusal.kind === 'budget_held')) {
        turns--; // no model call was made
        input.onFirstCall?.(turn.refusal);
        return finish('error_during_execution', { error: messageOf(turn.refusal) }, false, turn.refusal);
      }
      // Refused otherwise (an upstream failure, a client gone): the run ends with its subtype, as a 200.
      if (!turn.ok && first) input.onFirstCall?.();
      if (!turn.ok) {
        if (turn.refusal.kind === 'cost_cap_reached') {
          turns--; // no model call was made
          return finish('error_max_budget_usd', { error: messageOf(turn.refusal) });
        }
        if (!turn.aborted) return finish('error_during_execution', { error: messageOf(turn.refusal) }, isInvalidRequest(turn.refusal));
        // What the model said before it was stopped stays in the conversation (and is the result's text).
        const said = turn.partial ? textOf(turn.partial) : '';
        if (said) {
          lastText = said;
          conversation.push({ role: 'assistant', content: [{ type: 'text', text: said }] });
        }
        return finish(stopped(), { error: stopReason() });
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
        const forClient = calls.filter((call) => clientNames.has(call.name));
        const results = await runTools(
          calls.filter((call) => !clientNames.has(call.name)),
          byName,
          input.signal,
          emit,
        );
        if (input.signal.aborted) return finish(stopped(), { error: stopReason() });
        if (forClient.length > 0) {
          // The client runs these: the run pauses here, holding nothing, until every result is back.
          return {
            kind: 'paused',
            events,
            state: { ...state(), conversation: [...conversation] },
            calls: calls.map((call) => ({ ...call, client: clientNames.has(call.name) })),
            results,
          };
        }
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

/**
 * Adds a user turn. After a user turn already (a conversation whose last turn was stopped before the model answered,
 * or ended on tool results), the content joins it: the Messages API wants user and assistant turns to alternate.
 */
function addUserContent(conversation: Anthropic.MessageParam[], content: string | Anthropic.ContentBlockParam[]): void {
  const last = conversation.at(-1);
  if (last?.role !== 'user') {
    conversation.push({ role: 'user', content });
    return;
  }
  const blocks = (c: string | Anthropic.ContentBlockParam[]): Anthropic.ContentBlockParam[] => (typeof c === 'string' ? [{ type: 'text', text: c }] : c);
  conversation[conversation.length - 1] = { role: 'user', content: [...blocks(last.content), ...blocks(content)] };
}

/**
 * The conversation with an answer for every tool call: a run stopped while tools ran leaves the model's calls
 * without results, which the next turn could not send.
 */
function closeToolCalls(conversation: Anthropic.MessageParam[]): Anthropic.MessageParam[] {
  const last = conversation.at(-1);
  if (last?.role !== 'assistant' || typeof last.content === 'string') return [...conversation];
  const calls = last.content.filter((b): b is Anthropic.ToolUseBlockParam => b.type === 'tool_use');
  if (calls.length === 0) return [...conversation];
  return [
    ...conversation,
    {
      role: 'user',
      content: calls.map((call) => ({
        type: 'tool_result' as const,
        tool_use_id: call.id,
        content: 'The turn was stopped before this tool returned',
        is_error: true,
      })),
    },
  ];
}

/**
 * Whether a tool may be offered: `disallowedTools` wins; `allowedTools`, when given, lists all that may be. A rule is a
 * tool's name, or `mcp__<server>` for every tool of that configured MCP server — matched by the server the tool came
 * from, never by a name's prefix, so no other server's or tool's name can fall under it.
 */
function allowed(tool: { name: string; server?: string }, options: SessionOptions): boolean {
  const matches = (rule: string) => rule === tool.name || (tool.server !== undefined && rule === mcpServerRule(tool.server));
  if (options.disallowedTools?.some(matches)) return false;
  return options.allowedTools === undefined || options.allowedTools.some(matches);
}

interface TurnContext {
  model: string;
  conversation: Anthropic.MessageParam[];
  offered: Record<string, unknown>[];
  capMicros?: number;
  emit: (event: RunEvent) => void;
  /** The call was admitted on the budgets (its reservation taken) and the model has started to answer. */
  onAdmitted?: () => void;
}

type TurnOutcome =
  | { ok: true; message: Anthropic.Message; charge: CallCharge; usage: { input_tokens: number; output_tokens: number }; clamped?: number }
  | { ok: false; refusal: Refusal; aborted: boolean; charge?: CallCharge; usage: { input_tokens: number; output_tokens: number }; partial?: Anthropic.Message };

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
  if (call.ok) turn.onAdmitted?.();
  // A call stopped before its answer may still have been charged (its input bound): the tokens go with the charge.
  if (!call.ok)
    return {
      ok: false,
      refusal: call.refusal,
      aborted: input.signal.aborted,
      usage: call.charge ? tokensOf(call.charge, undefined) : none,
      ...(call.charge ? { charge: call.charge } : {}),
    };
  const clamped = call.clampedMaxTokens;
  if (call.kind === 'message') return { ok: true, message: call.message, charge: call.charge, usage: tokensOf(call.charge, call.message), clamped };

  const { stream } = call;
  stream.accumulator.onEvent((event) => {
    if (event.type === 'content_block_delta' && event.delta.type === 'text_delta' && event.delta.text)
      turn.emit({ type: 'assistant', subtype: 'text', text: event.delta.text });
  });
  // Reading the body drives the stream; its bytes are not needed here (the accumulator has decoded them).
  const reader = stream.body.getReader();
  while (!(await reader.read()).done);
  const charge = await stream.settled;
  const message = stream.accumulator.message();
  const usage = tokensOf(charge, message);
  if (input.signal.aborted) {
    return {
      ok: false,
      refusal: { kind: 'invalid_request', message: 'The run was stopped' },
      aborted: true,
      charge,
      usage,
      ...(message ? { partial: message } : {}),
    };
  }
  if (!message || stream.accumulator.errorSeen || !message.stop_reason) {
    const error = stream.accumulator.error?.message ?? 'The model stream ended before its answer was complete';
    return {
      ok: false,
      refusal: { kind: 'upstream', status: 500, body: { type: 'error', error: { type: 'api_error', message: error } } },
      aborted: false,
      charge,
      usage,
    };
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

/**
 * Runs one turn's gateway-side tool calls (docs/prompt.md, "Limits on tools"): at most MAX_PARALLEL_TOOL_CALLS at a
 * time, the others waiting for a slot in the model's order, and only the first MAX_TOOL_CALLS_PER_TURN of them — each
 * call beyond is answered with an `is_error` result saying so, without running. Results come back in the calls' order.
 */
async function runTools(
  calls: Anthropic.ToolUseBlock[],
  tools: Map<string, AgentTool>,
  signal: AbortSignal,
  emit: (event: RunEvent) => void,
): Promise<Anthropic.ToolResultBlockParam[]> {
  const results: Anthropic.ToolResultBlockParam[] = new Array(calls.length);
  const refusal = {
    content: `Not run: this turn asked for ${calls.length} tool calls, and at most ${MAX_TOOL_CALLS_PER_TURN} are run per turn; ask for this one again in a later turn`,
    isError: true,
  };
  let next = 0;
  const worker = async () => {
    while (next < calls.length) {
      const i = next++;
      const call = calls[i]!;
      results[i] = await runTool(call, tools, signal, emit, i < MAX_TOOL_CALLS_PER_TURN ? undefined : refusal);
    }
  };
  await Promise.all(Array.from({ length: Math.min(MAX_PARALLEL_TOOL_CALLS, calls.length) }, worker));
  return results;
}

/**
 * Runs one tool call, or answers it with `answer` without running it; an unknown tool (never offered, or hallucinated)
 * is an error result the model can read.
 */
async function runTool(
  call: Anthropic.ToolUseBlock,
  tools: Map<string, AgentTool>,
  signal: AbortSignal,
  emit: (event: RunEvent) => void,
  answer?: ToolOutcome,
): Promise<Anthropic.ToolResultBlockParam> {
  const tool = tools.get(call.name);
  const subtype = call.name.startsWith('mcp__') ? 'mcp' : 'http';
  emit({ type: 'tool_use', subtype, id: call.id, name: call.name, input: call.input });
  const outcome = answer ?? (tool ? await tool.run(call.input, signal) : { content: `No tool named "${call.name}" is available in this run`, isError: true });
  emit({ type: 'tool_result', subtype, tool_use_id: call.id, name: call.name, is_error: outcome.isError, text: outcome.content });
  return { type: 'tool_result', tool_use_id: call.id, content: outcome.content, ...(outcome.isError ? { is_error: true } : {}) };
}
