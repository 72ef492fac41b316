import type Anthropic from '@anthropic-ai/sdk';
import type { McpServerStatus } from './tools/mcp.ts';

/**
 * What an agent run (run.ts) yields — its events, its result, where it stands between segments — apart from the
 * runtime itself, so what only reads or builds results (the /ws frame handler ending a paused turn, vessel records)
 * does not load the model call and its providers.
 */

export type ResultSubtype =
  | 'success'
  | 'error_max_turns'
  | 'error_max_budget_usd'
  | 'error_max_structured_output_retries'
  | 'error_during_execution'
  | 'error_max_duration'
  /** A `/ws` turn stopped by its user (docs/ws.md, "Interrupt and disconnect"). */
  | 'interrupted';

/** The abort reason that makes a stopped run an `interrupted` one rather than an error. */
export const INTERRUPTED = 'The turn was interrupted';

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

export const MICROS_PER_USD = 1_000_000;

/** Where a run stands between two segments (a /ws turn paused for client-side tools), and at its end. */
export interface RunState {
  /** The whole conversation, ready to send: it never ends with a tool call left without its result. */
  conversation: Anthropic.MessageParam[];
  spentMicros: number;
  usage: { input_tokens: number; output_tokens: number };
  turns: number;
  corrections: number;
  lastText: string;
  /** Milliseconds the run was active in its earlier segments. */
  activeMs: number;
}

/** The result of a run from where it stands: the figures are the whole run's, across its segments. */
export function runResult(
  state: RunState,
  fields: { subtype: ResultSubtype; model: string; text?: string; error?: string; structured_output?: unknown; mcp_servers?: McpServerStatus[] },
): RunResult {
  return {
    type: 'result',
    subtype: fields.subtype,
    is_error: fields.subtype !== 'success',
    text: fields.text ?? state.lastText,
    total_cost_usd: state.spentMicros / MICROS_PER_USD,
    total_cost_microdollars: state.spentMicros,
    duration_secs: Math.round(state.activeMs) / 1000,
    num_turns: state.turns,
    usage: { ...state.usage },
    model: fields.model,
    ...(fields.structured_output === undefined ? {} : { structured_output: fields.structured_output }),
    ...(fields.mcp_servers ? { mcp_servers: fields.mcp_servers } : {}),
    ...(fields.error ? { error: fields.error } : {}),
  };
}
