import type { WindowKind } from '../auth/claims.ts';

const LIFETIME_START = new Date(0);

/** Start of the UTC calendar window that contains `now` (docs/contract.md, "Budgets and money"). Weeks start on Monday. */
export function windowStart(kind: WindowKind, now: Date): Date {
  const y = now.getUTCFullYear();
  const m = now.getUTCMonth();
  const d = now.getUTCDate();
  switch (kind) {
    case 'hour':
      return new Date(Date.UTC(y, m, d, now.getUTCHours()));
    case 'day':
      return new Date(Date.UTC(y, m, d));
    case 'week': {
      const sinceMonday = (now.getUTCDay() + 6) % 7;
      return new Date(Date.UTC(y, m, d - sinceMonday));
    }
    case 'month':
      return new Date(Date.UTC(y, m, 1));
    case 'lifetime':
      return LIFETIME_START;
  }
}

/** End (exclusive) of the window that starts at `start`; undefined for lifetime. */
export function windowEnd(kind: WindowKind, start: Date): Date | undefined {
  const y = start.getUTCFullYear();
  const m = start.getUTCMonth();
  const d = start.getUTCDate();
  switch (kind) {
    case 'hour':
      return new Date(start.getTime() + 3_600_000);
    case 'day':
      return new Date(Date.UTC(y, m, d + 1));
    case 'week':
      return new Date(Date.UTC(y, m, d + 7));
    case 'month':
      return new Date(Date.UTC(y, m + 1, 1));
    case 'lifetime':
      return undefined;
  }
}

/** Calendar month of `now` as YYYY-MM, the period of a developer's plan. */
export function monthOf(now: Date): string {
  return now.toISOString().slice(0, 7);
}
