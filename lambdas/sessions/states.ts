import { defineStates, type PlaceholderOptions } from '../store/record-states.ts';

/**
 * A session's states and what each allows, in one place (docs/ws.md, "How a turn runs"):
 *
 *   idle ──user──▶ queued ──worker claims──▶ running ──answer──▶ idle
 *                    ▲                          │
 *                    └──last tool_result── awaiting_tools ◀──client tool call
 *
 * Every state with a turn also goes back to idle when the turn ends without running on: refused or interrupted while
 * queued, given up or freed by the sweeper, a paused turn interrupted. Every move is one conditional write on the
 * session item (lambdas/sessions/store.ts), so two frames, two workers or a worker and the sweeper can never both
 * move it.
 */
export const SessionStates = defineStates({
  idle: ['queued'],
  queued: ['running', 'idle'],
  running: ['awaiting_tools', 'idle'],
  awaiting_tools: ['queued', 'idle'],
});

export type SessionState = (typeof SessionStates.statuses)[number];

/** The session's state is its attribute `state`, not the `status` record-states assumes. */
export const STATE_PLACEHOLDERS = { attribute: 'state', name: '#state' } as const satisfies PlaceholderOptions;

/** A turn exists: it is waiting for a worker, running, or waiting for the client's tools. */
export const hasTurn = (state: SessionState): boolean => state !== 'idle';

/** A worker is (or is about to be) on the turn: the sweeper watches its heartbeat, an interrupt is a flag it polls. */
export const isTurnActive = (state: SessionState): boolean => state === 'queued' || state === 'running';

/** What a client sees of a state (`session` frame): a queued turn is as good as running. */
export function visibleState(state: SessionState): 'idle' | 'running' | 'awaiting_tools' {
  return state === 'queued' ? 'running' : state;
}
