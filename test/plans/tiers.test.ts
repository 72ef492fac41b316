import { describe, expect, it } from 'vitest';
import { tierFor } from '../../lambdas/plans/tiers.ts';

describe('tiers', () => {
  it('tierFor follows the plan-seconds thresholds', () => {
    expect(tierFor(0)).toMatchObject({ name: 'hobby', maxConcurrency: 2 });
    expect(tierFor(3_499_999)).toMatchObject({ name: 'hobby', maxConcurrency: 2 });
    expect(tierFor(3_500_000)).toMatchObject({ name: 'starter', maxConcurrency: 5 });
    expect(tierFor(14_999_999)).toMatchObject({ name: 'starter', maxConcurrency: 5 });
    expect(tierFor(15_000_000)).toMatchObject({ name: 'pro', maxConcurrency: 10 });
    expect(tierFor(1e12)).toMatchObject({ name: 'pro', maxConcurrency: 10 });
  });
});
