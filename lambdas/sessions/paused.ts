import { INTERRUPTED, runResult, type RunState } from '../agent/result.ts';
import { clock } from '../config/clock.ts';
import { writeAccessLog, type WsTurnAccess } from '../observability/access-log.ts';
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
 * Ended, the turn's access line is written, with what its segments charged.
 */
export async function endPausedTurn(session: SessionRecord, turn: TurnRecord, paused: PausedRun): Promise<ServerFrame | undefined> {
  const state: RunState = { ...paused.run, conversation: conversationWithoutTurn(session, turn) ?? session.conversation };
  // Only from the session as read: a client result recorded meanwhile must not be overwritten by "interrupted".
  const ended = await endTurn(session.sessionId, turn.id, state.conversation, { from: ['awaiting_tools'], version: session.version });
  if (!ended.ok) return undefined;
  writeTurnLine(turnLine(session, turn, paused), 'interrupted', turnQueuedAt(turn, paused));
  return interruptedResult(state, session);
}

/**
 * The access line of a /ws turn (observability/access-log.ts), opened with what the turn's earlier segments charged
 * (a turn resumed after client tools): each model call of this segment adds its charge, and its run its compute.
 */
export function turnLine(session: SessionRecord, turn: TurnRecord, paused: PausedRun | undefined): WsTurnAccess {
  return {
    unit: 'ws_turn',
    sessionId: session.sessionId,
    turnId: turn.id,
    project: turn.caller.projectId,
    user: turn.caller.userId,
    model: session.options.model,
    costMicrodollars: paused?.run.spentMicros ?? 0,
    computeSeconds: paused?.computeSeconds ?? 0,
  };
}

/** When the turn was queued by its user's message (a resumed turn's record says when it was queued last). */
export function turnQueuedAt(turn: TurnRecord, paused: PausedRun | undefined): number {
  return paused?.queuedAt ?? turn.queuedAt;
}

/** Writes a turn's line once it has ended with `outcome`, its total time counted from `queuedAt`. */
export function writeTurnLine(line: WsTurnAccess, outcome: string, queuedAt: number): void {
  line.outcome = outcome;
  line.totalMs = clock.now() - queuedAt;
  writeAccessLog(line);
}
