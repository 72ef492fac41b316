import { describe, expect, it } from 'vitest';
import { defineStates } from '../../lambdas/store/record-states.ts';

const Vessel = defineStates({
  queued: ['running', 'canceled'],
  running: ['completed', 'failed', 'canceled'],
  completed: [],
  failed: [],
  canceled: [],
});

describe('defineStates', () => {
  it('lists the statuses in declaration order, with the terminal and initial ones', () => {
    expect(Vessel.statuses).toEqual(['queued', 'running', 'completed', 'failed', 'canceled']);
    expect(Vessel.terminal).toEqual(['completed', 'failed', 'canceled']);
    expect(Vessel.initial).toEqual(['queued']);
  });

  it('isTerminal', () => {
    expect(Vessel.statuses.filter((s) => Vessel.isTerminal(s))).toEqual(['completed', 'failed', 'canceled']);
  });

  it('canMove follows the flow and nothing else', () => {
    const allowed = Vessel.statuses.flatMap((from) => Vessel.statuses.filter((to) => Vessel.canMove(from, to)).map((to) => `${from}→${to}`));
    expect(allowed).toEqual(['queued→running', 'queued→canceled', 'running→completed', 'running→failed', 'running→canceled']);
    // an unknown status read from the store moves nowhere
    expect(Vessel.canMove('bogus' as never, 'running')).toBe(false);
    expect(Vessel.isTerminal('bogus' as never)).toBe(false);
  });

  it('sourcesOf and targetsOf are the two directions of the flow', () => {
    expect(Vessel.sourcesOf('canceled')).toEqual(['queued', 'running']);
    expect(Vessel.sourcesOf('running')).toEqual(['queued']);
    expect(Vessel.sourcesOf('completed')).toEqual(['running']);
    expect(Vessel.sourcesOf('queued')).toEqual([]);
    expect(Vessel.targetsOf('running')).toEqual(['completed', 'failed', 'canceled']);
    expect(Vessel.targetsOf('failed')).toEqual([]);
  });

  it('is() recognises stored values', () => {
    expect(Vessel.is('running')).toBe(true);
    expect(Vessel.is('Running')).toBe(false);
    expect(Vessel.is(undefined)).toBe(false);
    expect(Vessel.is(3)).toBe(false);
    expect(Vessel.is('toString')).toBe(false);
  });

  it('refuses a flow naming a target that is not a status, or a target twice', () => {
    expect(() => defineStates({ a: ['b' as never] })).toThrow(new RangeError('Status a moves to b, which is not a status'));
    expect(() => defineStates({ a: ['b', 'b'], b: [] })).toThrow(RangeError);
  });

  it('is frozen', () => {
    expect(Object.isFrozen(Vessel)).toBe(true);
    expect(Object.isFrozen(Vessel.statuses)).toBe(true);
    expect(Object.isFrozen(Vessel.sourcesOf('canceled'))).toBe(true);
  });
});

describe('statusIn', () => {
  it('is the condition fragment "status is one of these", with its placeholders', () => {
    expect(Vessel.statusIn(['queued', 'running'])).toEqual({
      expression: '#status IN (:s0, :s1)',
      names: { '#status': 'status' },
      values: { ':s0': 'queued', ':s1': 'running' },
    });
    expect(Vessel.statusIn(['failed'])).toEqual({ expression: '#status IN (:s0)', names: { '#status': 'status' }, values: { ':s0': 'failed' } });
  });

  it('takes another attribute and other placeholders', () => {
    expect(Vessel.statusIn(['queued'], { attribute: 'state', name: '#st', valuePrefix: ':v' })).toEqual({
      expression: '#st IN (:v0)',
      names: { '#st': 'state' },
      values: { ':v0': 'queued' },
    });
  });

  it('takes a status nested in a map attribute', () => {
    expect(Vessel.statusIn(['queued', 'running'], { within: { attribute: 'job', name: '#j' }, name: '#js', valuePrefix: ':js' })).toEqual({
      expression: '#j.#js IN (:js0, :js1)',
      names: { '#j': 'job', '#js': 'status' },
      values: { ':js0': 'queued', ':js1': 'running' },
    });
  });

  it('refuses an empty list, an unknown status and malformed placeholders', () => {
    expect(() => Vessel.statusIn([])).toThrow('A status condition needs at least one status');
    expect(() => Vessel.statusIn(['nope' as never])).toThrow('Status nope is not a status');
    expect(() => Vessel.statusIn(['queued'], { name: 'status' })).toThrow(RangeError);
    expect(() => Vessel.statusIn(['queued'], { valuePrefix: 's' })).toThrow(RangeError);
    expect(() => Vessel.statusIn(['queued'], { within: { attribute: 'job', name: 'j' } })).toThrow('Name placeholder j must start with #');
    expect(() => Vessel.statusIn(['queued'], { within: { attribute: 'job', name: '#status' } })).toThrow(RangeError);
  });
});

describe('transition', () => {
  it('by default starts from every status the flow allows', () => {
    expect(Vessel.transition('canceled')).toEqual({
      condition: '#status IN (:s0, :s1)',
      set: '#status = :sTo',
      names: { '#status': 'status' },
      values: { ':s0': 'queued', ':s1': 'running', ':sTo': 'canceled' },
    });
  });

  it('from an expected status', () => {
    expect(Vessel.transition('canceled', { from: 'running' })).toEqual({
      condition: '#status IN (:s0)',
      set: '#status = :sTo',
      names: { '#status': 'status' },
      values: { ':s0': 'running', ':sTo': 'canceled' },
    });
    expect(Vessel.transition('canceled', { from: ['running', 'queued'], name: '#st', valuePrefix: ':x', attribute: 'state' })).toEqual({
      condition: '#st IN (:x0, :x1)',
      set: '#st = :xTo',
      names: { '#st': 'state' },
      values: { ':x0': 'running', ':x1': 'queued', ':xTo': 'canceled' },
    });
  });

  it('of a status nested in a map attribute: the condition and the SET name the same path', () => {
    expect(Vessel.transition('running', { within: { attribute: 'job', name: '#j' }, name: '#js', valuePrefix: ':js' })).toEqual({
      condition: '#j.#js IN (:js0)',
      set: '#j.#js = :jsTo',
      names: { '#j': 'job', '#js': 'status' },
      values: { ':js0': 'queued', ':jsTo': 'running' },
    });
  });

  it('refuses a move the flow does not allow', () => {
    expect(() => Vessel.transition('queued')).toThrow('No status moves to queued');
    expect(() => Vessel.transition('completed', { from: 'queued' })).toThrow('Status queued cannot move to completed');
    expect(() => Vessel.transition('running', { from: ['queued', 'failed'] })).toThrow('Status failed cannot move to running');
    expect(() => Vessel.transition('running', { from: [] })).toThrow('No status moves to running');
    expect(() => Vessel.transition('nope' as never)).toThrow('Target status nope is not a status');
  });
});
