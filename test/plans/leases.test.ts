import { randomBytes } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { leaseRenewIntervalMs, leaseTtlMs } from '../../lambdas/config/timing.ts';
import {
  acquireLease,
  giveBackLease,
  keepLeaseAlive,
  liveLeases,
  onCapacityFreed,
  releaseLease,
  renewLease,
  type Lease,
  type LeaseHolder,
} from '../../lambdas/plans/leases.ts';
import { TIERS } from '../../lambdas/plans/tiers.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';

/**
 * Concurrency leases on DynamoDB Local: one conditional write admits at most the tier's number of leases at any
 * concurrency; an expired lease stops counting (time is passed in: a fake clock, no sleeping); renewals and releases
 * are refused cleanly when they should be, and releases are idempotent.
 */
let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const developer = () => `dev-${randomBytes(4).toString('hex')}`;
const T0 = new Date('2031-03-01T12:00:00.000Z');
const at = (ms: number) => new Date(T0.getTime() + ms);
let runs = 0;
const holder = (over: Partial<LeaseHolder> = {}): LeaseHolder => ({ sessionId: `run-${++runs}`, userId: 'u1', projectId: 'prj_a', kind: 'prompt', ...over });

function held(result: Awaited<ReturnType<typeof acquireLease>>): Lease {
  if (!result.ok) throw new Error(`expected a lease, got ${JSON.stringify(result)}`);
  return result.lease;
}

async function storedItem(developerId: string) {
  const out = await documentClient().send(
    new GetCommand({ TableName: env().LEASES_TABLE, Key: { pk: `leases#${developerId}`, sk: 'leases' }, ConsistentRead: true }),
  );
  return out.Item!;
}

describe('acquisition never admits more than the tier allows', () => {
  it.each(TIERS.map((t) => [t.name, t.maxConcurrency] as const))('%s: 100 parallel acquisitions admit exactly %i', async (_name, max) => {
    const dev = developer();
    const results = await Promise.all(Array.from({ length: 100 }, () => acquireLease(dev, holder(), max, T0)));
    const admitted = results.filter((r) => r.ok);
    expect(admitted).toHaveLength(max);
    // Every refusal lists exactly the live leases (at most max), and the store agrees with the count.
    for (const r of results) if (!r.ok) expect(r).toMatchObject({ max, live: expect.any(Array) });
    const item = await storedItem(dev);
    expect(item.held).toBe(max);
    expect(Object.keys(item.leases)).toHaveLength(max);
    expect(await liveLeases(dev, T0)).toHaveLength(max);
  });

  it('acquire, release and expiry racing for a while: never more than max held at once, and the count matches the leases', async () => {
    const dev = developer();
    const max = 3;
    let holding = 0;
    let peak = 0;
    let admittedTotal = 0;
    // 20 workers × 6 rounds; a few never release (crashed holders), expiring under a clock that moves forward.
    let clock = T0.getTime();
    const worker = async (w: number) => {
      for (let round = 0; round < 6; round++) {
        clock += 7_000;
        const result = await acquireLease(dev, holder({ sessionId: `w${w}-${round}` }), max, new Date(clock));
        if (!result.ok) continue;
        admittedTotal++;
        peak = Math.max(peak, ++holding);
        await new Promise((r) => setTimeout(r, 1 + (w % 5)));
        holding--;
        if (w % 7 !== 3) await releaseLease(result.lease);
      }
    };
    await Promise.all(Array.from({ length: 20 }, (_, w) => worker(w)));
    expect(peak).toBeLessThanOrEqual(max);
    expect(admittedTotal).toBeGreaterThan(max);
    const item = await storedItem(dev);
    expect(item.held).toBe(Object.keys(item.leases).length);
    expect(item.held).toBeLessThanOrEqual(max);
  });

  it('two developers never affect each other', async () => {
    const [a, b] = [developer(), developer()];
    await Promise.all([
      ...Array.from({ length: 20 }, () => acquireLease(a, holder(), 2, T0)),
      ...Array.from({ length: 20 }, () => acquireLease(b, holder(), 2, T0)),
    ]);
    expect(await liveLeases(a, T0)).toHaveLength(2);
    expect(await liveLeases(b, T0)).toHaveLength(2);
  });
});

describe('expiry, renewal and release', () => {
  it('a holder that stops renewing loses its lease after the expiry, and a new acquisition then succeeds', async () => {
    const dev = developer();
    const first = held(await acquireLease(dev, holder({ sessionId: 'crashed' }), 1, T0));
    // Just before the expiry it still counts.
    const early = await acquireLease(dev, holder(), 1, at(leaseTtlMs() - 1));
    expect(early).toEqual({ ok: false, max: 1, live: [{ sessionId: 'crashed', userId: 'u1', ageMs: leaseTtlMs() - 1, projectId: 'prj_a' }] });
    // At the expiry it no longer counts: swept, and the slot is taken.
    const next = held(await acquireLease(dev, holder({ sessionId: 'next' }), 1, at(leaseTtlMs())));
    expect(await liveLeases(dev, at(leaseTtlMs()))).toEqual([{ sessionId: 'next', userId: 'u1', ageMs: 0 }]);
    // The crashed holder cannot come back.
    expect(await renewLease(first, at(leaseTtlMs() + 1))).toEqual({ ok: false, reason: 'not_held' });
    expect(await releaseLease(first)).toEqual({ released: false });
    expect(await liveLeases(dev, at(leaseTtlMs()))).toHaveLength(1);
    expect(next.sessionId).toBe('next');
  });

  it('renewing extends the expiry from the renewal; an expired lease cannot be renewed', async () => {
    const dev = developer();
    const lease = held(await acquireLease(dev, holder({ sessionId: 'steady' }), 1, T0));
    const renewed = await renewLease(lease, at(leaseRenewIntervalMs()));
    expect(renewed).toEqual({ ok: true, lease: { ...lease, expiresAt: T0.getTime() + leaseRenewIntervalMs() + leaseTtlMs() } });
    // Past the first expiry, still held thanks to the renewal: a competitor is refused.
    expect((await acquireLease(dev, holder(), 1, at(leaseTtlMs() + 1))).ok).toBe(false);
    // Not renewed again: gone at renewal + TTL.
    const late = at(leaseRenewIntervalMs() + leaseTtlMs());
    expect(await renewLease(lease, late)).toEqual({ ok: false, reason: 'expired' });
    expect((await acquireLease(dev, holder(), 1, late)).ok).toBe(true);
  });

  it('a foreign lease (another holder, another developer) can be neither renewed nor released', async () => {
    const [dev, other] = [developer(), developer()];
    const lease = held(await acquireLease(dev, holder({ sessionId: 'mine' }), 2, T0));
    expect(await renewLease({ ...lease, sessionId: 'thief' }, at(1))).toEqual({ ok: false, reason: 'not_held' });
    expect(await releaseLease({ ...lease, sessionId: 'thief' })).toEqual({ released: false });
    expect(await renewLease({ ...lease, developerId: other }, at(1))).toEqual({ ok: false, reason: 'not_held' });
    expect(await releaseLease({ ...lease, developerId: other })).toEqual({ released: false });
    expect(await liveLeases(dev, at(1))).toEqual([{ sessionId: 'mine', userId: 'u1', ageMs: 1 }]);
  });

  it('release is idempotent and frees the slot at once', async () => {
    const dev = developer();
    const lease = held(await acquireLease(dev, holder(), 1, T0));
    const releases = await Promise.all([releaseLease(lease), releaseLease(lease), releaseLease(lease)]);
    expect(releases.filter((r) => r.released)).toHaveLength(1);
    expect(await releaseLease(lease)).toEqual({ released: false });
    expect((await storedItem(dev)).held).toBe(0);
    expect((await acquireLease(dev, holder(), 1, at(1))).ok).toBe(true);
  });

  it('the 429 figures: live leases oldest first with their projects (whose ids the 429 may show), ages growing with the clock', async () => {
    const dev = developer();
    held(await acquireLease(dev, holder({ sessionId: 'a', userId: 'alice' }), 2, T0));
    held(await acquireLease(dev, holder({ sessionId: 'b', userId: 'bob', projectId: 'prj_b' }), 2, at(250)));
    const refused = await acquireLease(dev, holder(), 2, at(1_000));
    expect(refused).toEqual({
      ok: false,
      max: 2,
      live: [
        { sessionId: 'a', userId: 'alice', ageMs: 1_000, projectId: 'prj_a' },
        { sessionId: 'b', userId: 'bob', ageMs: 750, projectId: 'prj_b' },
      ],
    });
    expect(await liveLeases(dev, at(5_000))).toEqual([
      { sessionId: 'a', userId: 'alice', ageMs: 5_000 },
      { sessionId: 'b', userId: 'bob', ageMs: 4_750 },
    ]);
  });
});

describe('keepLeaseAlive', () => {
  it('renews on its interval while the run lives, and reports a lost lease once', async () => {
    const dev = developer();
    const lease = held(await acquireLease(dev, holder({ sessionId: 'beating' }), 1));
    const heartbeat = keepLeaseAlive(lease, { intervalMs: 30 });
    await vi.waitFor(() => expect(heartbeat.current().expiresAt).toBeGreaterThan(lease.expiresAt), { timeout: 1_000 });
    heartbeat.stop();
    // A heartbeat for a lease that was taken away stops and says so.
    await releaseLease(heartbeat.current());
    const lost = vi.fn();
    const orphan = keepLeaseAlive(heartbeat.current(), { intervalMs: 30, onLost: lost });
    await vi.waitFor(() => expect(lost).toHaveBeenCalledWith('not_held'), { timeout: 1_000 });
    await new Promise((r) => setTimeout(r, 100));
    expect(lost).toHaveBeenCalledTimes(1);
    orphan.stop();
  });
});

describe('giveBackLease', () => {
  it("removes the lease, then tells those waiting for the developer's capacity, even when it was gone already", async () => {
    const dev = developer();
    const told: number[] = [];
    const listening = [
      // What a listener sees when it is told: the slot is free already.
      onCapacityFreed(async (d) => {
        if (d === dev) told.push((await liveLeases(dev)).length);
      }),
      // One listener that fails (it must not) keeps neither the others nor the caller from going on.
      onCapacityFreed(async () => {
        throw new Error('a listener that fails');
      }),
    ];
    try {
      const lease = held(await acquireLease(dev, holder(), 1));
      expect(await giveBackLease(lease)).toEqual({ released: true });
      expect(told).toEqual([0]);
      expect(await giveBackLease(lease)).toEqual({ released: false });
      expect(told).toEqual([0, 0]);
    } finally {
      for (const stop of listening) stop();
    }
  });

  it('releaseLease alone removes the lease and tells no one', async () => {
    const dev = developer();
    const told = vi.fn(async () => undefined);
    const stop = onCapacityFreed(async (d) => (d === dev ? told() : undefined));
    try {
      const lease = held(await acquireLease(dev, holder(), 1));
      expect(await releaseLease(lease)).toEqual({ released: true });
      expect(told).not.toHaveBeenCalled();
    } finally {
      stop();
    }
  });
});

describe('an acquisition the SDK sends twice (its first answer lost) takes one slot (store/conditional.ts)', () => {
  let loss: AnswerLoss;
  beforeAll(() => {
    loss = loseAnswers();
  });
  const isAcquire = (input: WriteInput) => input.UpdateExpression?.includes('leases.#id = :lease') === true;

  it('the last free slot is granted, not refused over its own lease; released, the slot is free again', async () => {
    const dev = developer();
    loss.loseNext('acquire', isAcquire);
    const lease = held(await acquireLease(dev, holder(), 1, T0));
    expect(loss.lost.at(-1)).toBe('acquire');
    expect(await storedItem(dev)).toMatchObject({ held: 1 });
    expect(await releaseLease(lease)).toEqual({ released: true });
    expect(await storedItem(dev)).toMatchObject({ held: 0, leases: {} });
    held(await acquireLease(dev, holder(), 1, T0));
  });

  it('… even when another acquisition landed between the two sends (the lease is its own key)', async () => {
    const dev = developer();
    let other: Lease | undefined;
    loss.loseNext('acquire', isAcquire, async () => {
      other = held(await acquireLease(dev, holder(), 3, T0));
    });
    const lease = held(await acquireLease(dev, holder(), 3, T0));
    expect(await storedItem(dev)).toMatchObject({ held: 2 });
    await releaseLease(lease);
    await releaseLease(other!);
    expect(await storedItem(dev)).toMatchObject({ held: 0, leases: {} });
  });
});
