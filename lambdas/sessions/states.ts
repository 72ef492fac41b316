/**
 * A session's states and what each allows, in one place (docs/ws.md, "Session states"):
 *
 *   idle ──user──▶ queued ──worker claims──▶ running ──answer──▶ idle
 *                    ▲                          │
 *                    └──last tool_result── awaiting_tools ◀──client tool call
 *
 * Every move is one conditional write on the session item (lambdas/sessions/store.ts), so two frames, two workers or
 * a worker and the sweeper can never both move it.
 */
export const SESSION_STATES = ['idle', 'queued', 'running', 'awaiting_tools'] as const;
export type SessionState = (typeof SESSION_STATES)[number];

/** A turn exists: it is waiting for a worker, running, or waiting for the client's tools. */
export const hasTurn = (state: SessionState): boolean => state !== 'idle';

/** A worker is (or is about to be) on the turn: the sweeper watches its heartbeat, an interrupt is a flag it polls. */
export const isTurnActive = (state: SessionState): boolean => state === 'queued' || state === 'running';

/** What a client sees of a state (`session` frame): a queued turn is as good as running. */
export function visibleState(state: SessionState): 'idle' | 'running' | 'awaiting_tools' {
  return state === 'queued' ? 'running' : state;
}
