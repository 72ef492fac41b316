import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { MAX_RETRY_AFTER_SECONDS } from '../../lambdas/config/timing.ts';
import { attemptsPerRound, nextAttemptAt, parseRetryAfter, retryWaits } from '../../lambdas/webhooks/schedule.ts';

/**
 * The retry schedule (issue 15, "Delivery"): the first attempt at once, then retries after 5 s, 5 min, 30 min, 2 h,
 * 5 h, 10 h and 10 h; Retry-After on 429/503 lengthens a wait, never shortens it. WEBHOOK_RETRY_WAITS replaces the
 * waits (tests); the environment is read per instance, so each change is followed by resetInstanceState().
 */

const original = process.env.WEBHOOK_RETRY_WAITS;
function setWaits(value: string | undefined): void {
  if (value === undefined) delete process.env.WEBHOOK_RETRY_WAITS;
  else process.env.WEBHOOK_RETRY_WAITS = value;
  resetInstanceState();
}
afterAll(() => setWaits(original));

const NOW = Date.UTC(2030, 0, 1, 0, 0, 0);
const S = 1000;

describe('the default schedule (WEBHOOK_RETRY_WAITS unset)', () => {
  beforeEach(() => setWaits(undefined));

  it('waits 5 s, 5 min, 30 min, 2 h, 5 h, 10 h, 10 h: 1 + 7 attempts', () => {
    expect(retryWaits()).toEqual([5, 300, 1800, 7200, 18000, 36000, 36000]);
    expect(attemptsPerRound()).toBe(8);
  });

  it('nextAttemptAt after attempts 1..7, and none after attempt 8', () => {
    const next = [1, 2, 3, 4, 5, 6, 7, 8].map((attempt) => nextAttemptAt(attempt, NOW));
    expect(next).toEqual([NOW + 5 * S, NOW + 300 * S, NOW + 1800 * S, NOW + 7200 * S, NOW + 18000 * S, NOW + 36000 * S, NOW + 36000 * S, undefined]);
    expect(nextAttemptAt(9, NOW)).toBeUndefined();
  });

  it('counts from the given time', () => {
    expect(nextAttemptAt(1, NOW + 123)).toBe(NOW + 123 + 5 * S);
  });

  it('the whole round spans about 27.6 hours', () => {
    const total = retryWaits().reduce((a, b) => a + b, 0);
    expect(total).toBe(99_305);
    expect(total / 3600).toBeCloseTo(27.58, 2);
  });

  describe('Retry-After', () => {
    it('lengthens a shorter wait', () => {
      expect(nextAttemptAt(1, NOW, 7)).toBe(NOW + 7 * S);
      expect(nextAttemptAt(1, NOW, 120)).toBe(NOW + 120 * S);
      expect(nextAttemptAt(2, NOW, 3600)).toBe(NOW + 3600 * S);
    });

    it('never shortens a longer wait', () => {
      expect(nextAttemptAt(1, NOW, 0)).toBe(NOW + 5 * S);
      expect(nextAttemptAt(1, NOW, 4)).toBe(NOW + 5 * S);
      expect(nextAttemptAt(2, NOW, 60)).toBe(NOW + 300 * S);
      expect(nextAttemptAt(6, NOW, 1)).toBe(NOW + 36000 * S);
    });

    it(`is capped at ${MAX_RETRY_AFTER_SECONDS} s`, () => {
      expect(MAX_RETRY_AFTER_SECONDS).toBe(36000);
      expect(nextAttemptAt(1, NOW, 36000)).toBe(NOW + 36000 * S);
      expect(nextAttemptAt(1, NOW, 36001)).toBe(NOW + 36000 * S);
      expect(nextAttemptAt(1, NOW, 10 * 365 * 86400)).toBe(NOW + 36000 * S);
      expect(nextAttemptAt(7, NOW, 1_000_000)).toBe(NOW + 36000 * S);
    });

    it('does not add an attempt after the last', () => {
      expect(nextAttemptAt(8, NOW, 60)).toBeUndefined();
    });
  });
});

describe('parseRetryAfter', () => {
  it('delta seconds', () => {
    expect(parseRetryAfter('120', NOW)).toBe(120);
    expect(parseRetryAfter(' 7 ', NOW)).toBe(7);
    expect(parseRetryAfter('0', NOW)).toBe(0);
  });

  it('an HTTP date in the future: the seconds until it', () => {
    expect(parseRetryAfter(new Date(NOW + 90 * S).toUTCString(), NOW)).toBe(90);
    expect(parseRetryAfter('Tue, 01 Jan 2030 01:00:00 GMT', NOW)).toBe(3600);
    // Rounded up: a receiver is never asked again before the moment it gave.
    expect(parseRetryAfter(new Date(NOW + 90 * S).toUTCString(), NOW - 400)).toBe(91);
  });

  it('an HTTP date in the past: 0', () => {
    expect(parseRetryAfter(new Date(NOW - 90 * S).toUTCString(), NOW)).toBe(0);
    expect(parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', NOW)).toBe(0);
    expect(parseRetryAfter(new Date(NOW).toUTCString(), NOW)).toBe(0);
  });

  it('garbage, empty or absent: undefined', () => {
    for (const value of ['soon', 'abc', '120 seconds', '12abc', '', '   ', '0x10', '1e3']) expect(parseRetryAfter(value, NOW), value).toBeUndefined();
    expect(parseRetryAfter(null, NOW)).toBeUndefined();
    expect(parseRetryAfter(undefined, NOW)).toBeUndefined();
  });
});

describe('WEBHOOK_RETRY_WAITS', () => {
  afterEach(() => setWaits(undefined));

  it('"1,2": two retries, 3 attempts', () => {
    setWaits('1,2');
    expect(retryWaits()).toEqual([1, 2]);
    expect(attemptsPerRound()).toBe(3);
    expect([1, 2, 3].map((a) => nextAttemptAt(a, NOW))).toEqual([NOW + 1 * S, NOW + 2 * S, undefined]);
  });

  it('tolerates spaces around the numbers', () => {
    setWaits(' 3 , 4 ');
    expect(retryWaits()).toEqual([3, 4]);
  });

  it('a single wait: 2 attempts', () => {
    setWaits('60');
    expect(attemptsPerRound()).toBe(2);
    expect(nextAttemptAt(1, NOW, 10)).toBe(NOW + 60 * S);
    expect(nextAttemptAt(2, NOW)).toBeUndefined();
  });

  it('is read again after resetInstanceState()', () => {
    setWaits('1,2');
    expect(attemptsPerRound()).toBe(3);
    process.env.WEBHOOK_RETRY_WAITS = '1,2,3,4';
    expect(attemptsPerRound()).toBe(3); // still the parsed instance value
    resetInstanceState();
    expect(attemptsPerRound()).toBe(5);
  });

  it.each(['a,b', '1,,2', '1.5', '-1', '5s', ',', ''])('an invalid value %j makes env() throw, naming WEBHOOK_RETRY_WAITS', (value) => {
    setWaits(value);
    expect(() => env()).toThrow(/WEBHOOK_RETRY_WAITS/);
    expect(() => env()).toThrow(/must be whole seconds separated by commas/);
    expect(() => retryWaits()).toThrow(/WEBHOOK_RETRY_WAITS/);
    expect(() => nextAttemptAt(1, NOW)).toThrow(/WEBHOOK_RETRY_WAITS/);
  });
});
