import type { Developer } from './model.ts';
import { recordCache } from './record-cache.ts';
import { getDeveloper } from './registry.ts';

/**
 * Developers read where a run's compute is charged to their month (budgets/ledger.ts: their plan and plan alerts),
 * kept per instance by recordCache (record-cache.ts) as projects are: trusted for SECRET_CACHE_SECONDS, so a burst of
 * runs ending costs one registry read.
 */
const MAX_ENTRIES = 10_000;

export const cachedDeveloper: (developerId: string, opts?: { refresh?: boolean }, now?: number) => Promise<Developer | undefined> = recordCache(
  getDeveloper,
  MAX_ENTRIES,
);
