import * as z from 'zod';
import type { RunEvent, RunResult } from '../agent/result.ts';
import { MAX_TOKEN_BYTES } from '../auth/tokens.ts';
import { conjureRefusalFrame } from '../refusals/conjure.ts';
import { describeIssue } from '../refusals/describe.ts';
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

/*
 * What a client tool's result may hold: the Messages API's tool_result content (the SDK's ToolResultBlockParam), a
 * string or blocks of the kinds it lists, each with the fields the API requires; other fields (cache_control,
 * citations, title…) pass as given. Checked here because a result is stored in the session's conversation: a block the
 * model's API refuses would fail this turn and every later one.
 */
const text = (what: string) => z.string({ error: `${what} must be a string` });
const TextBlock = z.looseObject({ type: z.literal('text'), text: text('a text block\'s "text"') });
const ImageSource = z.discriminatedUnion(
  'type',
  [
    z.looseObject({
      type: z.literal('base64'),
      media_type: z.enum(['image/jpeg', 'image/png', 'image/gif', 'image/webp'], {
        error: "an image's media_type is image/jpeg, image/png, image/gif or image/webp",
      }),
      data: text('an image\'s "data"'),
    }),
    z.looseObject({ type: z.literal('url'), url: text('an image\'s "url"') }),
    z.looseObject({ type: z.literal('file'), file_id: text('an image\'s "file_id"') }),
  ],
  { error: 'an image\'s source is {"type":"base64","media_type","data"}, {"type":"url","url"} or {"type":"file","file_id"}' },
);
const ImageBlock = z.looseObject({ type: z.literal('image'), source: ImageSource });
const DocumentSource = z.discriminatedUnion(
  'type',
  [
    z.looseObject({
      type: z.literal('base64'),
      media_type: z.literal('application/pdf', { error: "a base64 document's media_type is application/pdf" }),
      data: text('a document\'s "data"'),
    }),
    z.looseObject({
      type: z.literal('text'),
      media_type: z.literal('text/plain', { error: "a text document's media_type is text/plain" }),
      data: text('a document\'s "data"'),
    }),
    z.looseObject({
      type: z.literal('content'),
      content: z.union([z.string(), z.array(z.union([TextBlock, ImageBlock]))], {
        error: 'a content document\'s "content" is a string or text and image blocks',
      }),
    }),
    z.looseObject({ type: z.literal('url'), url: text('a document\'s "url"') }),
    z.looseObject({ type: z.literal('file'), file_id: text('a document\'s "file_id"') }),
  ],
  { error: "a document's source type is base64, text, content, url or file" },
);
const TOOL_RESULT_BLOCKS = {
  text: TextBlock,
  image: ImageBlock,
  document: z.looseObject({ type: z.literal('document'), source: DocumentSource }),
  search_result: z.looseObject({
    type: z.literal('search_result'),
    source: text('a search_result\'s "source"'),
    title: text('a search_result\'s "title"'),
    content: z.array(TextBlock, { error: 'a search_result\'s "content" is an array of text blocks' }),
  }),
  tool_reference: z.looseObject({ type: z.literal('tool_reference'), tool_name: text('a tool_reference\'s "tool_name"') }),
  browser_state: z.looseObject({ type: z.literal('browser_state'), tabs: z.array(z.unknown(), { error: 'a browser_state\'s "tabs" is an array' }) }),
} as const;
export type ToolResultBlockType = keyof typeof TOOL_RESULT_BLOCKS;

const ToolResultBlock = z.looseObject({ type: z.string({ error: 'every content block has a string "type"' }) }).superRefine((block, ctx) => {
  const schema = Object.hasOwn(TOOL_RESULT_BLOCKS, block.type) ? TOOL_RESULT_BLOCKS[block.type as ToolResultBlockType] : undefined;
  if (!schema) {
    ctx.addIssue({ code: 'custom', message: `a tool result holds ${Object.keys(TOOL_RESULT_BLOCKS).join(', ')} blocks, not "${block.type}"`, path: ['type'] });
    return;
  }
  const checked = schema.safeParse(block);
  if (!checked.success) for (const issue of checked.error.issues) ctx.addIssue({ code: 'custom', message: issue.message, path: issue.path });
});

const ToolResultContent = z.union([z.string(), z.array(ToolResultBlock)], { error: 'content must be a string or an array of content blocks' });

const ToolResult = z.object({
  type: z.literal('tool_result'),
  tool_use_id: z.string({ error: 'tool_use_id is required and must be a string' }).min(1, 'tool_use_id must not be empty'),
  content: ToolResultContent,
  is_error: z.boolean({ error: 'is_error must be a boolean' }).optional(),
});

const Interrupt = z.object({ type: z.literal('interrupt') });

/**
 * The token of a connection opened without one (a browser's: docs/ws.md, "The auth frame"), as its first frame. As
 * large as a token may be (auth/tokens.ts MAX_TOKEN_BYTES; tokens are ASCII, so characters are bytes).
 */
const Auth = z.object({
  type: z.literal('auth'),
  token: z
    .string({ error: 'token is required and must be a string' })
    .min(1, 'token must not be empty')
    .max(MAX_TOKEN_BYTES, `token is at most ${MAX_TOKEN_BYTES} characters`),
});

/** The most parts one message may be sent in (docs/ws.md, "Large messages"). */
export const MAX_PARTS = 64;
/** A part's id: the client's name of its message, unique on the connection (it is part of the stored parts' keys). */
const PART_ID = /^[A-Za-z0-9._:-]{1,64}$/;

/** A slice of a message over API Gateway's 32 KB frame (http/websocket.ts PartFrame; sessions/parts.ts joins them). */
const Part = z
  .object({
    type: z.literal('part'),
    id: z.string({ error: 'id is required and must be a string' }).regex(PART_ID, 'id is 1 to 64 characters among A-Z a-z 0-9 . _ : -'),
    index: z.number({ error: 'index is required and must be a number' }).int('index must be a whole number').min(0, 'index must be 0 or more'),
    count: z
      .number({ error: 'count is required and must be a number' })
      .int('count must be a whole number')
      .min(1, 'count must be 1 or more')
      .max(MAX_PARTS, `count is at most ${MAX_PARTS}: a message is sent in at most ${MAX_PARTS} parts`),
    data: z.string({ error: 'data is required and must be a string' }),
  })
  .refine((p) => p.index < p.count, { message: 'index must be below count (parts are numbered from 0)', path: ['index'] });

const FRAMES = { auth: Auth, 'session.start': SessionStart, user: User, tool_result: ToolResult, interrupt: Interrupt, part: Part } as const;

export type PartFrame = z.infer<typeof Part>;
export type AuthFrame = z.infer<typeof Auth>;
export type ClientFrame = AuthFrame | z.infer<typeof SessionStart> | z.infer<typeof User> | z.infer<typeof ToolResult> | z.infer<typeof Interrupt> | PartFrame;
export type ClientFrameType = keyof typeof FRAMES;

/**
 * A client's frame, or what is wrong with it: an `invalid_frame` error, `invalid_part` for a `part` frame out of
 * shape (with its `id` when it has a string one), or `unauthorized` for an `auth` frame out of shape (its token
 * missing, not a string, empty or too long: the connection's auth fails).
 */
export function parseClientFrame(
  data: string | Uint8Array,
): { ok: true; frame: ClientFrame } | { ok: false; message: string; code: 'invalid_frame' | 'invalid_part' | 'unauthorized'; id?: string } {
  const invalid = (message: string) => ({ ok: false as const, message, code: 'invalid_frame' as const });
  if (typeof data !== 'string') return invalid('Frames are JSON text; a binary frame was received');
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    return invalid('The frame is not JSON');
  }
  if (!json || typeof json !== 'object' || Array.isArray(json)) return invalid('A frame is a JSON object with a "type"');
  const type = (json as { type?: unknown }).type;
  const schema = typeof type === 'string' && Object.hasOwn(FRAMES, type) ? FRAMES[type as ClientFrameType] : undefined;
  if (!schema) {
    return invalid(
      `Unknown frame type ${JSON.stringify(type ?? null)}: the client sends ${Object.keys(FRAMES)
        .map((t) => `"${t}"`)
        .join(', ')}`,
    );
  }
  const parsed = schema.safeParse(json);
  if (!parsed.success) {
    if (type === 'auth') return { ok: false, message: `auth: ${describeIssue(parsed.error)}`, code: 'unauthorized' };
    if (type !== 'part') return invalid(`${type}: ${describeIssue(parsed.error)}`);
    const id = (json as { id?: unknown }).id;
    return { ok: false, message: `part: ${describeIssue(parsed.error)}`, code: 'invalid_part', ...(typeof id === 'string' ? { id } : {}) };
  }
  return { ok: true, frame: parsed.data as ClientFrame };
}

/** The error codes of `error` frames other than refusals (docs/ws.md, "Errors"). */
export type SessionErrorCode =
  | 'invalid_frame'
  | 'invalid_part'
  | 'message_too_large'
  | 'invalid_request'
  | 'session_not_found'
  | 'no_session'
  | 'turn_in_progress'
  | 'awaiting_tool_results'
  | 'unknown_tool_use_id'
  | 'no_turn_running'
  | 'rate_limited'
  | 'idle_timeout'
  | 'unauthorized'
  | 'token_expired'
  | 'token_revoked'
  | 'session_too_large'
  | 'turn_lost'
  | 'internal_error';

export type ServerFrame =
  /** The answer to a good `auth` frame: the token's user and its `exp` (unix seconds), when the connection ends. */
  | { type: 'authenticated'; userId: string; expiresAt: number }
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
  return conjureRefusalFrame(refusal, { status: true });
}

/** A run's event as a frame: text deltas, and the gateway's own tool calls (which the client must not answer). */
export function eventFrame(event: RunEvent): ServerFrame {
  return event;
}

export const encodeFrame = (frame: ServerFrame): string => JSON.stringify(frame);
