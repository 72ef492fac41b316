import { INTERRUPTED, runResult, type RunState } from '../agent/result.ts';
import type { ServerFrame } from './frames.ts';
import { conversationWithoutTurn, type PausedRun, type SessionRecord, type TurnRecord } from './record.ts';
import { endTurn } from './store.ts';

/**
 * The end of an interrupted turn, without the agent runtime: the frame handler ends a turn paused for client tools
 * itself (no worker holds it), and the worker ends one interrupted before it ran.
 */

export function interruptedResult(state: RunState, session: SessionRecord): ServerFrame {
  return { ...runResult(state, { subtype: 'interrupted', model: session.options.model, error: INTERRUPTED }), sessionId: session.sessionId };
}

/**
 * Ends a turn paused for client tools that its user interrupted: the calls the client has not answered are answered
 * as interrupted, so the conversation goes on from there. Answers the `result` frame, or undefined when the session
 * changed since it was read (a result recorded, or the turn resumed by its last one): the caller reads it again.
 */
export async function endPausedTurn(session: SessionRecord, turn: TurnRecord, paused: PausedRun): Promise<ServerFrame | undefined> {
  const state: RunState = { ...paused.run, conversation: conversationWithoutTurn(session, turn) ?? session.conversation };
  // Only from the session as read: a client result recorded meanwhile must not be overwritten by "interrupted".
  const ended = await endTurn(session.sessionId, turn.id, state.conversation, { from: ['awaiting_tools'], version: session.version });
  return ended.ok ? interruptedResult(state, session) : undefined;
}
