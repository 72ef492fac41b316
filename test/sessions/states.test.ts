import { describe, expect, it } from 'vitest';
import { hasTurn, isTurnActive, SessionStates, STATE_PLACEHOLDERS, visibleState } from '../../lambdas/sessions/states.ts';

/** A session's status flow (lambdas/sessions/states.ts), as record-states reads it. */
describe('SessionStates', () => {
  it('allows exactly the moves of a turn, and every state with a turn back to idle', () => {
    const allowed = SessionStates.statuses.flatMap((from) => SessionStates.targetsOf(from).map((to) => `${from}→${to}`));
    expect(allowed.sort()).toEqual(
      ['idle→queued', 'queued→running', 'queued→idle', 'running→awaiting_tools', 'running→idle', 'awaiting_tools→queued', 'awaiting_tools→idle'].sort(),
    );
    // A session never ends: no state is terminal.
    expect(SessionStates.terminal).toEqual([]);
  });

  it('refuses to build the write of a move the flow forbids', () => {
    const forbidden = SessionStates.statuses.flatMap((from) =>
      SessionStates.statuses.filter((to) => !SessionStates.canMove(from, to)).map((to) => [from, to] as const),
    );
    expect(forbidden).toHaveLength(16 - 7);
    for (const [from, to] of forbidden) {
      expect(() => SessionStates.transition(to, { ...STATE_PLACEHOLDERS, from }), `${from}→${to}`).toThrow(RangeError);
    }
  });

  it("names the session's `state` attribute in its fragments", () => {
    expect(SessionStates.transition('running', { ...STATE_PLACEHOLDERS, from: 'queued' })).toEqual({
      condition: '#state IN (:s0)',
      set: '#state = :sTo',
      names: { '#state': 'state' },
      values: { ':s0': 'queued', ':sTo': 'running' },
    });
  });

  it('reads a turn from a state', () => {
    expect(SessionStates.statuses.filter(hasTurn)).toEqual(['queued', 'running', 'awaiting_tools']);
    expect(SessionStates.statuses.filter(isTurnActive)).toEqual(['queued', 'running']);
    expect(SessionStates.statuses.map(visibleState)).toEqual(['idle', 'running', 'running', 'awaiting_tools']);
  });
});
