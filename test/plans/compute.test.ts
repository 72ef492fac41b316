import { describe, expect, it } from 'vitest';
import { developerAllowance } from '../../lambdas/plans/compute.ts';

describe('developer plan compute', () => {
  it('developerAllowance compares with planSeconds + poolSeconds', () => {
    const plan = { planSeconds: 100, poolSeconds: 50 };
    expect(developerAllowance(plan, 0)).toEqual({ allowed: true, used: 0, available: 150, planSeconds: 100, poolSeconds: 50 });
    expect(developerAllowance(plan, 149)).toEqual({ allowed: true, used: 149, available: 1, planSeconds: 100, poolSeconds: 50 });
    expect(developerAllowance(plan, 150)).toEqual({ allowed: false, used: 150, available: 0, planSeconds: 100, poolSeconds: 50 });
    expect(developerAllowance(plan, 400)).toEqual({ allowed: false, used: 400, available: 0, planSeconds: 100, poolSeconds: 50 });
    expect(developerAllowance({ planSeconds: 0, poolSeconds: 0 }, 0).allowed).toBe(false);
  });
});
