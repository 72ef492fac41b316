import { describe, expect, it } from 'vitest';
import { monthOf, windowEnd, windowStart } from '../../lambdas/budgets/windows.ts';
import type { WindowKind } from '../../lambdas/auth/claims.ts';

const at = (iso: string) => new Date(iso);
const start = (kind: WindowKind, iso: string) => windowStart(kind, at(iso)).toISOString();
const end = (kind: WindowKind, iso: string) => windowEnd(kind, at(iso))?.toISOString();

describe('UTC calendar windows (docs/contract.md, "Budgets and money")', () => {
  it('hour: top of the hour, one hour long', () => {
    expect(start('hour', '2024-03-10T14:37:12.345Z')).toBe('2024-03-10T14:00:00.000Z');
    expect(start('hour', '2024-03-10T14:00:00.000Z')).toBe('2024-03-10T14:00:00.000Z');
    expect(start('hour', '2024-03-10T14:59:59.999Z')).toBe('2024-03-10T14:00:00.000Z');
    expect(end('hour', '2024-03-10T14:00:00.000Z')).toBe('2024-03-10T15:00:00.000Z');
    // across midnight, the month and the year
    expect(start('hour', '2024-12-31T23:30:00.000Z')).toBe('2024-12-31T23:00:00.000Z');
    expect(end('hour', '2024-12-31T23:00:00.000Z')).toBe('2025-01-01T00:00:00.000Z');
  });

  it('hour ignores the local time zone (UTC, not the machine clock zone)', () => {
    // 00:30 UTC is still the previous day in every American zone: the window must stay on the UTC date.
    expect(start('hour', '2024-06-01T00:30:00.000Z')).toBe('2024-06-01T00:00:00.000Z');
    expect(start('day', '2024-06-01T00:30:00.000Z')).toBe('2024-06-01T00:00:00.000Z');
    expect(start('day', '2024-05-31T23:59:59.999Z')).toBe('2024-05-31T00:00:00.000Z');
  });

  it('day: 00:00 UTC, ends the next midnight, rolls over months, years and leap days', () => {
    expect(start('day', '2024-03-10T14:37:12.345Z')).toBe('2024-03-10T00:00:00.000Z');
    expect(end('day', '2024-03-10T00:00:00.000Z')).toBe('2024-03-11T00:00:00.000Z');
    expect(end('day', '2024-01-31T00:00:00.000Z')).toBe('2024-02-01T00:00:00.000Z');
    expect(end('day', '2024-02-28T00:00:00.000Z')).toBe('2024-02-29T00:00:00.000Z');
    expect(end('day', '2024-02-29T00:00:00.000Z')).toBe('2024-03-01T00:00:00.000Z');
    expect(end('day', '2023-02-28T00:00:00.000Z')).toBe('2023-03-01T00:00:00.000Z');
    expect(end('day', '2024-12-31T00:00:00.000Z')).toBe('2025-01-01T00:00:00.000Z');
  });

  it('week: starts on Monday 00:00 UTC (a Sunday belongs to the week before)', () => {
    // 2024-03-10 is a Sunday, 2024-03-11 a Monday.
    expect(at('2024-03-10T12:00:00.000Z').getUTCDay()).toBe(0);
    expect(at('2024-03-11T12:00:00.000Z').getUTCDay()).toBe(1);
    expect(start('week', '2024-03-10T23:59:59.999Z')).toBe('2024-03-04T00:00:00.000Z');
    expect(start('week', '2024-03-11T00:00:00.000Z')).toBe('2024-03-11T00:00:00.000Z');
    expect(start('week', '2024-03-11T18:00:00.000Z')).toBe('2024-03-11T00:00:00.000Z');
    expect(start('week', '2024-03-13T09:00:00.000Z')).toBe('2024-03-11T00:00:00.000Z'); // Wednesday
    expect(start('week', '2024-03-16T09:00:00.000Z')).toBe('2024-03-11T00:00:00.000Z'); // Saturday
    expect(end('week', '2024-03-11T00:00:00.000Z')).toBe('2024-03-18T00:00:00.000Z');
  });

  it('week: across a month and a year boundary', () => {
    // Wednesday 2025-01-01 belongs to the week of Monday 2024-12-30.
    expect(start('week', '2025-01-01T10:00:00.000Z')).toBe('2024-12-30T00:00:00.000Z');
    expect(end('week', '2024-12-30T00:00:00.000Z')).toBe('2025-01-06T00:00:00.000Z');
    // Sunday 2024-09-01 belongs to the week of Monday 2024-08-26.
    expect(start('week', '2024-09-01T23:00:00.000Z')).toBe('2024-08-26T00:00:00.000Z');
    expect(end('week', '2024-02-26T00:00:00.000Z')).toBe('2024-03-04T00:00:00.000Z'); // through a leap day
  });

  it('month: the 1st 00:00 UTC, ends on the next 1st, rolls over the year', () => {
    expect(start('month', '2024-03-10T14:37:12.345Z')).toBe('2024-03-01T00:00:00.000Z');
    expect(start('month', '2024-03-31T23:59:59.999Z')).toBe('2024-03-01T00:00:00.000Z');
    expect(start('month', '2024-04-01T00:00:00.000Z')).toBe('2024-04-01T00:00:00.000Z');
    expect(end('month', '2024-01-01T00:00:00.000Z')).toBe('2024-02-01T00:00:00.000Z');
    expect(end('month', '2024-02-01T00:00:00.000Z')).toBe('2024-03-01T00:00:00.000Z');
    expect(start('month', '2024-12-15T08:00:00.000Z')).toBe('2024-12-01T00:00:00.000Z');
    expect(end('month', '2024-12-01T00:00:00.000Z')).toBe('2025-01-01T00:00:00.000Z');
  });

  it('lifetime: starts at the epoch and never ends', () => {
    expect(start('lifetime', '2024-03-10T14:37:12.345Z')).toBe('1970-01-01T00:00:00.000Z');
    expect(start('lifetime', '2099-12-31T23:59:59.999Z')).toBe('1970-01-01T00:00:00.000Z');
    expect(windowEnd('lifetime', new Date(0))).toBeUndefined();
  });

  it('every window contains the instant it was computed for', () => {
    const kinds: WindowKind[] = ['hour', 'day', 'week', 'month'];
    for (const iso of ['2024-02-29T23:59:59.999Z', '2024-12-31T23:59:59.999Z', '2025-01-01T00:00:00.000Z', '2024-03-10T00:00:00.000Z']) {
      for (const kind of kinds) {
        const s = windowStart(kind, at(iso));
        const e = windowEnd(kind, s)!;
        expect(s.getTime()).toBeLessThanOrEqual(at(iso).getTime());
        expect(e.getTime()).toBeGreaterThan(at(iso).getTime());
      }
    }
  });

  it('monthOf is the UTC calendar month', () => {
    expect(monthOf(at('2024-12-31T23:59:59.999Z'))).toBe('2024-12');
    expect(monthOf(at('2025-01-01T00:00:00.000Z'))).toBe('2025-01');
  });
});
