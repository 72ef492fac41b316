import { gunzipSync, gzipSync } from 'node:zlib';
import type Anthropic from '@anthropic-ai/sdk';
import type { SessionOptions } from '../agent/options.ts';
import type { RunState } from '../agent/result.ts';
import type { Caller } from '../auth/claims.ts';
import type { SessionState } from './states.ts';

/**
 * The items of the Sessions table (docs/ws.md, "Sessions"): a session — its owner, options, conversation and the
 * state of its turn — and each WebSocket connection, with the caller its token named (none yet for a connection
 * awaiting its `auth` frame) and the session it holds.
 */

/** The conversation is stored gzip-compressed; past this many bytes the item would near DynamoDB's 400 KB. */
export const MAX_CONVERSATION_BYTES = 300 * 1024;

/** A client-side or server-side tool call of a paused turn, as the model made it. */
export interface PausedCall {
  id: string;
  name: string;
  input: unknown;
  /** The client runs it (else the gateway already has its result in `serverResults`). */
  client: boolean;
}

/** A turn paused for client-side tools: where the run stands, without the conversation (stored beside it). */
export interface PausedRun {
  run: Omit<RunState, 'conversation'>;
  calls: PausedCall[];
  serverResults: Anthropic.ToolResultBlockParam[];
  /** How many messages the conversation had before this turn's user message (absent in runs paused before it was kept). */
  turnStart?: number;
  /** The compute seconds charged to the turn's segments so far, for its access line (absent in runs paused before). */
  computeSeconds?: number;
  /** When the turn was queued (its user's message), epoch ms: its access line's total time runs from here. */
  queuedAt?: number;
}

/** What a client answered for one of its tools. */
export interface ClientResult {
  /** Text, or content blocks passed to the model as the client gave them (the Messages API checks them). */
  content: string | Record<string, unknown>[];
  is_error?: boolean;
}

/** Why a running turn is asked to stop. */
export type StopRequest = 'interrupted' | 'disconnected';

export interface TurnRecord {
  id: string;
  /** The connection the turn's frames go to, and the management endpoint that reaches it. */
  connectionId: string;
  callbackUrl: string;
  /** Who the turn runs for: the caller the connection's token named when the turn was asked for. */
  caller: Caller;
  /** The user's message of a turn that has not run yet. */
  message?: string;
  /** A turn paused for client-side tools: its run, as JSON (tool inputs are the model's, kept byte for byte). */
  paused?: string;
  /** The ids of the client-side calls the paused turn waits for. */
  pending?: string[];
  /** The client's results so far, by tool_use_id. */
  clientResults?: Record<string, ClientResult>;
  /** A stop asked for while the turn is queued or runs; the worker sees it within a poll. */
  stop?: StopRequest;
  queuedAt: number;
}

export interface SessionRecord {
  sessionId: string;
  projectId: string;
  userId: string;
  options: SessionOptions & { model: string };
  conversation: Anthropic.MessageParam[];
  state: SessionState;
  turn?: TurnRecord;
  version: number;
  createdAt: number;
  updatedAt: number;
}

interface ConnectionCommon {
  connectionId: string;
  sessionId?: string;
  connectedAt: number;
  lastSeenAt: number;
  /** The `Origin` header of the upgrade (a page's; absent for a server or an app): checked when the token is known. */
  origin?: string;
}

/** A connection whose token is known: given on the upgrade, or by its `auth` frame (docs/ws.md, "Connecting"). */
export interface AuthenticatedConnection extends ConnectionCommon {
  caller: Caller;
  authBy?: undefined;
}

/**
 * A connection opened without a token (a browser's): it has no caller until its `auth` frame, which must come by
 * `authBy` (epoch ms, AUTH_DEADLINE_SECONDS after the connect); every other frame is refused meanwhile.
 */
export interface AwaitingAuthConnection extends ConnectionCommon {
  caller?: undefined;
  authBy: number;
}

/** A connection item: `caller` is absent until the token is known, so every reader of it must handle its absence. */
export type ConnectionRecord = AuthenticatedConnection | AwaitingAuthConnection;

export const isAuthenticated = (connection: ConnectionRecord): connection is AuthenticatedConnection => connection.caller !== undefined;

export const sessionKey = (sessionId: string) => ({ pk: `session#${sessionId}` });
export const connectionKey = (connectionId: string) => ({ pk: `connection#${connectionId}` });

export class SessionTooLarge extends Error {
  override readonly name = 'SessionTooLarge';
}

/** The conversation as stored: gzip of its JSON. Throws SessionTooLarge past MAX_CONVERSATION_BYTES. */
export function encodeConversation(conversation: Anthropic.MessageParam[]): Uint8Array {
  const bytes = gzipSync(JSON.stringify(conversation));
  if (bytes.byteLength > MAX_CONVERSATION_BYTES) {
    throw new SessionTooLarge(
      `The session's conversation would take ${bytes.byteLength} bytes compressed, above the ${MAX_CONVERSATION_BYTES} a session may hold: start a new session`,
    );
  }
  return new Uint8Array(bytes);
}

export function decodeConversation(stored: unknown): Anthropic.MessageParam[] {
  if (!(stored instanceof Uint8Array)) return [];
  return JSON.parse(gunzipSync(stored).toString('utf8')) as Anthropic.MessageParam[];
}

/** A session item as read from the table. */
export function sessionFromItem(item: Record<string, unknown>): SessionRecord {
  return {
    sessionId: item.sessionId as string,
    projectId: item.projectId as string,
    userId: item.userId as string,
    options: JSON.parse(item.options as string) as SessionRecord['options'],
    conversation: decodeConversation(item.conversation),
    state: item.state as SessionState,
    ...(item.turn ? { turn: item.turn as TurnRecord } : {}),
    version: item.version as number,
    createdAt: item.createdAt as number,
    updatedAt: item.updatedAt as number,
  };
}

export function connectionFromItem(item: Record<string, unknown>): ConnectionRecord {
  const common: ConnectionCommon = {
    connectionId: item.connectionId as string,
    ...(typeof item.sessionId === 'string' ? { sessionId: item.sessionId } : {}),
    connectedAt: item.connectedAt as number,
    lastSeenAt: item.lastSeenAt as number,
    ...(typeof item.origin === 'string' ? { origin: item.origin } : {}),
  };
  if (item.caller !== undefined && item.caller !== null) return { ...common, caller: item.caller as Caller };
  // A connection without a caller and without a deadline is not one this code writes: its deadline has passed.
  return { ...common, authBy: typeof item.authBy === 'number' ? item.authBy : common.connectedAt };
}

export function pausedRunOf(turn: TurnRecord): PausedRun | undefined {
  return turn.paused ? (JSON.parse(turn.paused) as PausedRun) : undefined;
}

/** The calls of a paused turn the client has not answered yet, in the order the model made them. */
export function missingResults(turn: TurnRecord): PausedCall[] {
  const paused = pausedRunOf(turn);
  if (!paused) return [];
  return paused.calls.filter((c) => c.client && !turn.clientResults?.[c.id]);
}

/**
 * The conversation a session goes back to when its turn does not run on (refused, interrupted before it ran, given
 * up): a turn resumed after client tools keeps its calls' results, so every call stays answered; a new turn's
 * message is dropped (undefined: the stored conversation as it is).
 */
export function conversationWithoutTurn(session: { conversation: Anthropic.MessageParam[] }, turn: TurnRecord): Anthropic.MessageParam[] | undefined {
  const paused = pausedRunOf(turn);
  return paused ? [...session.conversation, { role: 'user', content: resumeResults(paused, turn.clientResults) }] : undefined;
}

/**
 * Every call's result in the order the model made them, for the run to resume with: the gateway's own, then the
 * client's; a call with neither (the turn was interrupted first) is answered as stopped.
 */
export function resumeResults(paused: PausedRun, clientResults: Record<string, ClientResult> = {}): Anthropic.ToolResultBlockParam[] {
  const server = new Map(paused.serverResults.map((r) => [r.tool_use_id, r]));
  return paused.calls.map((call) => {
    const own = server.get(call.id);
    if (own) return own;
    const given = clientResults[call.id];
    if (given)
      return {
        type: 'tool_result',
        tool_use_id: call.id,
        content: given.content,
        ...(given.is_error ? { is_error: true } : {}),
      } as Anthropic.ToolResultBlockParam;
    return { type: 'tool_result', tool_use_id: call.id, content: 'The turn was interrupted before this tool returned', is_error: true };
  });
}
