import * as z from 'zod';
import type { RunEvent, RunResult } from '../agent/result.ts';
import { describeIssue } from '../proxy/schema.ts';
import { conjureRefusalParts } from '../refusals/conjure.ts';
import type { Refusal } from '../refusals/refusal.ts';

/**
 * The frames of /ws (docs/ws.md, "Frames"): JSON text, each an object whose `type` names it. The client's frames are
 * parsed here, once; the options of `session.start` are /prompt's schema (agent/options.ts SessionOptions), checked
 * by the session layer so their messages are /prompt's. Unknown fields are ignored, as in an API that may grow.
 */

const SessionStart = z.object({
  type: z.literal('session.start'),
  options: z.unknown().optional(),
  sessionId: z.string({ error: 'sessionId must be a string' }).min(1, 'sessionId must not be empty').max(128, 'sessionId is at most 128 characters').optional(),
});

const User = z.object({
  type: z.literal('user'),
  message: z.string({ error: 'message is required and must be a string' }).min(1, 'message must not be empty'),
});

/** What a tool result may hold, as the Messages API's tool_result content: text, or content blocks. */
const ToolResultContent = z.union([z.string(), z.array(z.looseObject({ type: z.string() }), { error: 'content must be a string or an array of content blocks' })], {
  error: 'content must be a string or an array of content blocks',
});

const ToolResult = z.object({
  type: z.literal('tool_result'),
  tool_use_id: z.string({ error: 'tool_use_id is required and must be a string' }).min(1, 'tool_use_id must not be empty'),
  content: ToolResultContent,
  is_error: z.boolean({ error: 'is_error must be a boolean' }).optional(),
});

const Interrupt = z.object({ type: z.literal('interrupt') });

const FRAMES = { 'session.start': SessionStart, user: User, tool_result: ToolResult, interrupt: Interrupt } as const;

export type ClientFrame = z.infer<typeof SessionStart> | z.infer<typeof User> | z.infer<typeof ToolResult> | z.infer<typeof Interrupt>;
export type ClientFrameType = keyof typeof FRAMES;

/** A client's frame, or what is wrong with it (an `invalid_frame` error). */
export function parseClientFrame(data: string | Uint8Array): { ok: true; frame: ClientFrame } | { ok: false; message: string } {
  if (typeof data !== 'string') return { ok: false, message: 'Frames are JSON text; a binary frame was received' };
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    return { ok: false, message: 'The frame is not JSON' };
  }
  if (!json || typeof json !== 'object' || Array.isArray(json)) return { ok: false, message: 'A frame is a JSON object with a "type"' };
  const type = (json as { type?: unknown }).type;
  const schema = typeof type === 'string' && Object.hasOwn(FRAMES, type) ? FRAMES[type as ClientFrameType] : undefined;
  if (!schema) {
    return { ok: false, message: `Unknown frame type ${JSON.stringify(type ?? null)}: the client sends ${Object.keys(FRAMES).map((t) => `"${t}"`).join(', ')}` };
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) return { ok: false, message: `${type}: ${describeIssue(parsed.error)}` };
  return { ok: true, frame: parsed.data as ClientFrame };
}

/** The error codes of `error` frames other than refusals (docs/ws.md, "Errors"). */
export type SessionErrorCode =
  | 'invalid_frame'
  | 'invalid_request'
  | 'session_not_found'
  | 'no_session'
  | 'turn_in_progress'
  | 'awaiting_tool_results'
  | 'unknown_tool_use_id'
  | 'no_turn_running'
  | 'rate_limited'
  | 'idle_timeout'
  | 'token_expired'
  | 'session_too_large'
  | 'turn_lost'
  | 'internal_error';

export type ServerFrame =
  | { type: 'session'; sessionId: string; resumed: boolean; state: 'idle' | 'running' | 'awaiting_tools'; messages: number }
  | { type: 'assistant'; subtype: 'text'; text: string }
  | { type: 'tool_use'; subtype: 'client' | 'http' | 'mcp'; id: string; name: string; input: unknown }
  | { type: 'tool_result'; subtype: 'http' | 'mcp'; tool_use_id: string; name: string; is_error: boolean; text: string }
  | (RunResult & { sessionId: string })
  | ({ type: 'error'; error: string; message?: string } & Record<string, unknown>);

export function errorFrame(error: SessionErrorCode, message: string, extra: Record<string, unknown> = {}): ServerFrame {
  return { type: 'error', error, message, ...extra };
}

/** A refusal as an `error` frame: the body /prompt answers with, and its HTTP status beside it. */
export function refusalFrame(refusal: Refusal): ServerFrame {
  const { status, body } = conjureRefusalParts(refusal);
  return { type: 'error', error: String(body.error), ...body, status };
}

/** A run's event as a frame: text deltas, and the gateway's own tool calls (which the client must not answer). */
export function eventFrame(event: RunEvent): ServerFrame {
  return event;
}

export const encodeFrame = (frame: ServerFrame): string => JSON.stringify(frame);
