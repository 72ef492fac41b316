import { afterEach, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { leaseRenewIntervalMs, leaseTtlMs, parkCheckMs } from '../../lambdas/config/timing.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';

const saved = process.env.LEASE_TTL_SECONDS;

afterEach(() => {
  if (saved === undefined) delete process.env.LEASE_TTL_SECONDS;
  else process.env.LEASE_TTL_SECONDS = saved;
  resetInstanceState();
});

const withLease = (value: string | undefined) => {
  if (value === undefined) delete process.env.LEASE_TTL_SECONDS;
  else process.env.LEASE_TTL_SECONDS = value;
  resetInstanceState();
};

describe('the lease length and what derives from it (LEASE_TTL_SECONDS)', () => {
  it('60 s by default: renewed every 20 s, a parked vessel checked after 60 s (docs/contract.md, "Concurrency leases")', () => {
    withLease(undefined);
    expect([leaseTtlMs(), leaseRenewIntervalMs(), parkCheckMs()]).toEqual([60_000, 20_000, 60_000]);
  });

  it('shortened for tests and local runs: 3 s, renewed every second', () => {
    withLease('3');
    expect([leaseTtlMs(), leaseRenewIntervalMs(), parkCheckMs()]).toEqual([3_000, 1_000, 3_000]);
  });

  it('read per instance: a reset after the environment changed is what changes it', () => {
    withLease('30');
    expect(leaseTtlMs()).toBe(30_000);
    process.env.LEASE_TTL_SECONDS = '90';
    expect(leaseTtlMs()).toBe(30_000);
    resetInstanceState();
    expect(leaseTtlMs()).toBe(90_000);
  });

  it.each(['2', '0', '1.5', 'soon', '901'])('refuses %s', (value) => {
    withLease(value);
    expect(() => env()).toThrow(/LEASE_TTL_SECONDS/);
  });
});
