import { beforeAll, describe, expect, it, vi } from 'vitest';
import { installAwsLambdaShim } from '../../bin/local/awslambda-shim.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';

/**
 * Giving a lease back wakes the vessels parked for the slot (plans/leases.ts `giveBackLease`) in a process that has
 * loaded vessels/park.ts, which registers the wake (`onCapacityFreed`): plans cannot import vessels. Each function is
 * bundled on its own, so each function that takes and gives back leases — the manifest's, with the Leases table
 * read-write — must load it from its own entry. The in-process local runtime loads every entry in one process, so
 * only this test would notice one that does not.
 */
const givesLeasesBack = FUNCTIONS.filter((f) => (f.access.tables as Record<string, string | undefined>).Leases === 'readwrite');

// A streaming entry asks the Lambda runtime's `awslambda` global for streamifyResponse when it is loaded.
beforeAll(() => installAwsLambdaShim());

describe('every function that gives leases back wakes the parked vessels', () => {
  it('the manifest names the functions that run agents', () => {
    expect(givesLeasesBack.map((f) => f.id)).toEqual(['Prompt', 'VesselExecutor', 'SessionTurn']);
  });

  it.each(givesLeasesBack.map((f) => [f.id, f.entry]))('%s: its entry (%s) alone registers the wake', async (_id, entry) => {
    vi.resetModules();
    await import(`../../${entry}`);
    const { capacityListenerCount } = await import('../../lambdas/plans/leases.ts');
    expect(capacityListenerCount()).toBe(1);
  });
});
