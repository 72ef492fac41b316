import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage, reserve, settle, sweepExpired, windowFor, type Reservation } from '../../lambdas/budgets/ledger.ts';
import { developerComputeUsed } from '../../lambdas/budgets/developer-month.ts';
import { env } from '../../lambdas/config/env.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

/** A fresh user (hence a fresh usage window) for each case. */
function caller(budget: Partial<BudgetClaim> = {}) {
  return {
    projectId: gw.projectId,
    userId: `u-${randomBytes(4).toString('hex')}`,
    budget: { ai: 1_000_000, compute: 3600, window: 'day' as const, ...budget },
  };
}

function expectAdmitted(r: Awaited<ReturnType<typeof reserve>>): Reservation {
  if (!r.ok) throw new Error(`expected admission, got refusal: ${JSON.stringify(r)}`);
  return r.reservation;
}

describe('windowFor', () => {
  it('keys usage by project, user, window kind and window start', () => {
    const c = { projectId: 'prj_x', userId: 'alice', budget: { ai: 1, compute: 1, window: 'week' as const } };
    expect(windowFor(c, new Date('2024-03-10T12:00:00Z'))).toEqual({
      pk: 'usage#prj_x#alice#week#2024-03-04T00:00:00.000Z',
      projectId: 'prj_x',
      userId: 'alice',
      window: 'week',
      windowStart: '2024-03-04T00:00:00.000Z',
    });
  });
});

describe('reserve under concurrency (the hard cap, docs/contract.md "Budgets and money")', () => {
  it('200 parallel reservations of 7 µ$ against 500 µ$ admit exactly floor(500/7) = 71, then settle exactly', async () => {
    const c = caller({ ai: 500 });
    const results = await Promise.all(Array.from({ length: 200 }, () => reserve({ caller: c, amounts: { ai: 7, compute: 0 }, enforce: ['ai'] })));
    const admitted = results.filter((r) => r.ok).map((r) => (r as { reservation: Reservation }).reservation);
    const refused = results.filter((r) => !r.ok);

    // admitted only while used + reserved + 7 ≤ budget: 70 × 7 = 490 admits the 71st (497), which stops the 72nd (504)
    expect(admitted.length).toBe(Math.floor(500 / 7));
    expect(admitted.length).toBe(71);
    expect(admitted.length * 7).toBeLessThanOrEqual(500);
    expect(refused.length).toBe(129);
    expect(new Set(admitted.map((r) => r.id)).size).toBe(71);
    for (const r of refused) {
      if (r.ok) continue;
      expect(r.exhausted).toEqual(['ai']);
      expect(r.usage.used.ai + r.usage.reserved.ai + 7).toBeGreaterThan(500);
    }

    const during = await readUsage(c);
    expect(during.used).toEqual({ ai: 0, compute: 0 });
    expect(during.reserved).toEqual({ ai: 497, compute: 0 });
    expect(during.openHolds).toBe(71);

    // settle every one at a smaller actual cost, concurrently too
    const outcomes = await Promise.all(admitted.map((r) => settle(r, { ai: 3, compute: 0 })));
    expect(outcomes.every((o) => o.settled)).toBe(true);
    const after = await readUsage(c);
    expect(after.used).toEqual({ ai: 71 * 3, compute: 0 });
    expect(after.reserved).toEqual({ ai: 0, compute: 0 });
    expect(after.openHolds).toBe(0);

    // the freed headroom admits again: 213 + 41 × 7 = 500 fits exactly, a 42nd would not
    const second = await Promise.all(Array.from({ length: 60 }, () => reserve({ caller: c, amounts: { ai: 7, compute: 0 }, enforce: ['ai'] })));
    expect(second.filter((r) => r.ok).length).toBe(41);
    expect((await readUsage(c)).reserved.ai + (await readUsage(c)).used.ai).toBe(500);
  });

  it('a worst case bigger than the whole budget is never admitted, not even on an empty window (the hard cap)', async () => {
    const c = caller({ ai: 10 });
    const results = await Promise.all(Array.from({ length: 20 }, () => reserve({ caller: c, amounts: { ai: 11, compute: 0 }, enforce: ['ai'] })));
    expect(results.filter((r) => r.ok).length).toBe(0);
    // exactly the whole budget fits once
    const exact = await Promise.all(Array.from({ length: 20 }, () => reserve({ caller: c, amounts: { ai: 10, compute: 0 }, enforce: ['ai'] })));
    expect(exact.filter((r) => r.ok).length).toBe(1);
  });

  it('a zero budget admits nothing', async () => {
    const c = caller({ ai: 0 });
    const r = await reserve({ caller: c, amounts: { ai: 1, compute: 0 }, enforce: ['ai'] });
    expect(r.ok).toBe(false);
  });

  it('refuses amounts that are not non-negative integers', async () => {
    const c = caller();
    await expect(reserve({ caller: c, amounts: { ai: 1.5, compute: 0 }, enforce: ['ai'] })).rejects.toThrow(RangeError);
    await expect(reserve({ caller: c, amounts: { ai: -1, compute: 0 }, enforce: ['ai'] })).rejects.toThrow('amounts.ai must be a non-negative integer, got -1');
    await expect(reserve({ caller: c, amounts: { ai: 0, compute: Number.NaN }, enforce: ['ai'] })).rejects.toThrow(RangeError);
  });
});

describe('settle', () => {
  it('is idempotent: a second settle returns {settled:false} and changes nothing', async () => {
    const c = caller({ ai: 1000, compute: 100 });
    const startedAt = Math.floor(Date.now() / 1000);
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 400, compute: 30 }, enforce: ['ai', 'compute'] }));
    expect(r.held).toEqual({ ai: 400, compute: 30 });
    // (the second may tick between the two clocks)
    expect(r.expiresAt).toBeGreaterThanOrEqual(startedAt + env().RESERVATION_TTL_SECONDS);
    expect(r.expiresAt).toBeLessThanOrEqual(Math.floor(Date.now() / 1000) + env().RESERVATION_TTL_SECONDS);

    const first = await settle(r, { ai: 123, compute: 7 });
    expect(first).toEqual({ settled: true, used: { ai: 123, compute: 7 }, reserved: { ai: 0, compute: 0 }, overrun: 0 });
    const before = await readUsage(c);

    expect(await settle(r, { ai: 123, compute: 7 })).toEqual({ settled: false });
    expect(await settle(r, { ai: 999, compute: 99 })).toEqual({ settled: false });
    const afterRepeat = await readUsage(c);
    expect(afterRepeat).toEqual(before);
    expect(afterRepeat.used).toEqual({ ai: 123, compute: 7 });
    expect(afterRepeat.reserved).toEqual({ ai: 0, compute: 0 });
  });

  it('concurrent duplicate settles of one reservation count it once', async () => {
    const c = caller();
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 50, compute: 0 }, enforce: ['ai'] }));
    const outcomes = await Promise.all(Array.from({ length: 10 }, () => settle(r, { ai: 20, compute: 0 })));
    expect(outcomes.filter((o) => o.settled).length).toBe(1);
    expect((await readUsage(c)).used.ai).toBe(20);
  });

  it('an actual cost above the hold is charged in full, and the excess recorded as overrun', async () => {
    const c = caller({ ai: 100 });
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 60, compute: 0 }, enforce: ['ai'] }));
    expect(await settle(r, { ai: 150, compute: 0 })).toEqual({ settled: true, used: { ai: 150, compute: 0 }, reserved: { ai: 0, compute: 0 }, overrun: 90 });
    const refused = await reserve({ caller: c, amounts: { ai: 1, compute: 0 }, enforce: ['ai'] });
    expect(refused.ok).toBe(false);
    const usage = await readUsage(c);
    expect(usage.overrun).toBe(90);
    // a settle within the bound adds nothing to it
    const c2 = caller({ ai: 100 });
    const within = expectAdmitted(await reserve({ caller: c2, amounts: { ai: 60, compute: 0 }, enforce: ['ai'] }));
    await settle(within, { ai: 60, compute: 0 });
    expect((await readUsage(c2)).overrun).toBe(0);
  });

  it('refuses a bad actual amount', async () => {
    const c = caller();
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 5, compute: 0 }, enforce: ['ai'] }));
    await expect(settle(r, { ai: -5, compute: 0 })).rejects.toThrow('actual.ai must be a non-negative integer, got -5');
    expect((await readUsage(c)).reserved.ai).toBe(5);
  });
});

describe('expired reservations', () => {
  const ttl = () => env().RESERVATION_TTL_SECONDS;

  it('are swept exactly once, at the worst case they held, even by 5 concurrent sweeps', async () => {
    // lifetime window: the past `now` and the present fall in the same window
    const c = caller({ ai: 10_000, window: 'lifetime' });
    const past = new Date(Date.now() - (ttl() + 60) * 1000);
    const stale = expectAdmitted(await reserve({ caller: c, amounts: { ai: 777, compute: 5 }, enforce: ['ai'], now: past }));
    const fresh = expectAdmitted(await reserve({ caller: c, amounts: { ai: 100, compute: 1 }, enforce: ['ai'] }));
    expect(stale.expiresAt).toBeLessThan(Date.now() / 1000);
    expect(stale.key.pk).toBe(fresh.key.pk);

    const counts = await Promise.all(Array.from({ length: 5 }, () => sweepExpired(stale.key)));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(1);

    const u = await readUsage(c);
    expect(u.used).toEqual({ ai: 777, compute: 5 });
    expect(u.reserved).toEqual({ ai: 100, compute: 1 }); // the live hold is untouched
    expect(u.openHolds).toBe(1);

    // the crashed run reporting late changes nothing
    expect(await settle(stale, { ai: 1, compute: 0 })).toEqual({ settled: false });
    expect((await readUsage(c)).used).toEqual({ ai: 777, compute: 5 });
    // a sweep with nothing expired settles nothing
    expect(await sweepExpired(stale.key)).toBe(0);
    // the live one still settles normally
    expect((await settle(fresh, { ai: 40, compute: 1 })).settled).toBe(true);
    expect((await readUsage(c)).used).toEqual({ ai: 817, compute: 6 });
  });

  it('a hold expires exactly at expiresAt', async () => {
    const c = caller({ window: 'lifetime' });
    const now = new Date();
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 9, compute: 0 }, enforce: ['ai'], now }));
    expect(await sweepExpired(r.key, new Date((r.expiresAt - 1) * 1000))).toBe(0);
    expect(await sweepExpired(r.key, new Date(r.expiresAt * 1000))).toBe(1);
  });

  it('readUsage sweeps first, so its figures are honest', async () => {
    const c = caller({ window: 'lifetime' });
    const past = new Date(Date.now() - (ttl() + 5) * 1000);
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 33, compute: 0 }, enforce: ['ai'], now: past }));
    const u = await readUsage(c);
    expect(u.used.ai).toBe(33);
    expect(u.reserved.ai).toBe(0);
    expect(u.openHolds).toBe(0);
  });
});

describe('a run\'s compute hold names its developer (docs/contract.md, "Abandoned reservations")', () => {
  const ttl = () => env().RESERVATION_TTL_SECONDS;
  const developer = () => `dev-${randomBytes(4).toString('hex')}`;

  it('settling it adds the seconds used to the developer month, once', async () => {
    const c = caller({ window: 'lifetime' });
    const dev = developer();
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 60 }, enforce: ['compute'], developerId: dev }));
    expect(r.developerId).toBe(dev);
    expect(await settle(r, { ai: 0, compute: 7 })).toMatchObject({ settled: true });
    expect(await settle(r, { ai: 0, compute: 7 })).toEqual({ settled: false });
    expect(await developerComputeUsed(dev)).toBe(7);
    expect((await readUsage(c)).used.compute).toBe(7);
  });

  it('a crashed run (never settled) is charged to the user and the developer at the seconds it held, by exactly one of 5 sweeps', async () => {
    const c = caller({ window: 'lifetime' });
    const dev = developer();
    const past = new Date(Date.now() - (ttl() + 60) * 1000);
    const stale = expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 870 }, enforce: ['compute'], now: past, developerId: dev }));
    const counts = await Promise.all(Array.from({ length: 5 }, () => sweepExpired(stale.key)));
    expect(counts.reduce((a, b) => a + b, 0)).toBe(1);
    expect(await developerComputeUsed(dev)).toBe(870);
    expect((await readUsage(c)).used.compute).toBe(870);
    // the run reporting late changes neither
    expect(await settle(stale, { ai: 0, compute: 3 })).toEqual({ settled: false });
    expect(await developerComputeUsed(dev)).toBe(870);
  });

  it('a hold without a developer (a model call), or settled at 0 s (a withdrawn admission), adds nothing to any month', async () => {
    const c = caller({ window: 'lifetime' });
    const dev = developer();
    const withdrawn = expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 60 }, enforce: ['compute'], developerId: dev }));
    await settle(withdrawn, { ai: 0, compute: 0 });
    expect(await developerComputeUsed(dev)).toBe(0);
    const call = expectAdmitted(await reserve({ caller: c, amounts: { ai: 50, compute: 0 }, enforce: ['ai'] }));
    expect(call.developerId).toBeUndefined();
    expect((await settle(call, { ai: 20, compute: 0 })).settled).toBe(true);
  });
});

describe('refusal', () => {
  it('returns ok:false with exhausted meters and the usage figures', async () => {
    const c = caller({ ai: 10 });
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 10, compute: 0 }, enforce: ['ai'] }));
    const refused = await reserve({ caller: c, amounts: { ai: 1, compute: 0 }, enforce: ['ai'] });
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.exhausted).toEqual(['ai']);
    expect(refused.usage.used).toEqual({ ai: 0, compute: 0 });
    expect(refused.usage.reserved).toEqual({ ai: 10, compute: 0 });
    expect(refused.usage.openHolds).toBe(1);
    expect(refused.usage.key).toEqual(r.key);

    // settling below the budget frees room again, for what fits in it and no more
    await settle(r, { ai: 4, compute: 0 });
    const tooBig = await reserve({ caller: c, amounts: { ai: 7, compute: 0 }, enforce: ['ai'] });
    expect(tooBig.ok === false && tooBig.exhausted).toEqual(['ai']);
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 6, compute: 0 }, enforce: ['ai'] }));
    const again = await reserve({ caller: c, amounts: { ai: 1, compute: 0 }, enforce: ['ai'] });
    expect(again.ok).toBe(false);
    if (!again.ok) expect(again.usage.used.ai + again.usage.reserved.ai).toBe(10);
  });

  it('an expired hold in the way is swept during the refused admission: figures honest, hold charged once', async () => {
    // The sweep charges an abandoned hold its worst case (a crashed run may have been billed by the provider),
    // so it converts reserved into used and frees no budget by itself.
    const c = caller({ ai: 10, window: 'lifetime' });
    const past = new Date(Date.now() - (env().RESERVATION_TTL_SECONDS + 60) * 1000);
    const stale = expectAdmitted(await reserve({ caller: c, amounts: { ai: 10, compute: 0 }, enforce: ['ai'], now: past }));
    const refused = await reserve({ caller: c, amounts: { ai: 1, compute: 0 }, enforce: ['ai'] });
    expect(refused.ok).toBe(false);
    if (refused.ok) return;
    expect(refused.exhausted).toEqual(['ai']);
    expect(refused.usage.used).toEqual({ ai: 10, compute: 0 });
    expect(refused.usage.reserved).toEqual({ ai: 0, compute: 0 });
    expect(refused.usage.openHolds).toBe(0);
    expect(await settle(stale, { ai: 0, compute: 0 })).toEqual({ settled: false });
    expect((await readUsage(c)).used.ai).toBe(10);
  });

  it('an expired hold that is not in the way stays for the sweep: admission remains one write', async () => {
    const c = caller({ ai: 100, window: 'lifetime' });
    const past = new Date(Date.now() - (env().RESERVATION_TTL_SECONDS + 60) * 1000);
    const stale = expectAdmitted(await reserve({ caller: c, amounts: { ai: 60, compute: 0 }, enforce: ['ai'], now: past }));
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 30, compute: 0 }, enforce: ['ai'] }));
    // admission did not sweep it: this sweep is the one that settles it
    expect(await sweepExpired(stale.key)).toBe(1);
    const u = await readUsage(c);
    expect(u.used.ai).toBe(60);
    expect(u.reserved.ai).toBe(30);
    expect(u.openHolds).toBe(1);
  });
});

describe('compute meter', () => {
  it('is enforced independently of ai', async () => {
    const c = caller({ ai: 1_000_000, compute: 10 });
    const first = expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 10 }, enforce: ['ai', 'compute'] }));
    const refused = await reserve({ caller: c, amounts: { ai: 1, compute: 1 }, enforce: ['ai', 'compute'] });
    expect(refused.ok).toBe(false);
    if (!refused.ok) {
      expect(refused.exhausted).toEqual(['compute']);
      expect(refused.usage.reserved).toEqual({ ai: 0, compute: 10 });
    }
    // the proxy enforces only ai, and is admitted with compute exhausted
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 5, compute: 0 }, enforce: ['ai'] }));
    // settling compute at less than held frees compute
    await settle(first, { ai: 0, compute: 4 });
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 6 }, enforce: ['compute'] }));
    const u = await readUsage(c);
    expect(u.used).toEqual({ ai: 0, compute: 4 });
    expect(u.reserved).toEqual({ ai: 5, compute: 6 });
  });

  it('ai exhaustion does not block a compute-only admission, and both can be exhausted at once', async () => {
    const c = caller({ ai: 10, compute: 10 });
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 10, compute: 0 }, enforce: ['ai'] }));
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 3 }, enforce: ['compute'] }));
    const ai = await reserve({ caller: c, amounts: { ai: 0, compute: 0 }, enforce: ['ai', 'compute'] });
    expect(ai.ok === false && ai.exhausted).toEqual(['ai']);
    expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 7 }, enforce: ['compute'] }));
    const both = await reserve({ caller: c, amounts: { ai: 0, compute: 0 }, enforce: ['ai', 'compute'] });
    expect(both.ok === false && both.exhausted).toEqual(['ai', 'compute']);
  });

  it('200 parallel compute reservations admit exactly floor(budget / worst case)', async () => {
    const c = caller({ compute: 100 });
    const results = await Promise.all(Array.from({ length: 200 }, () => reserve({ caller: c, amounts: { ai: 0, compute: 3 }, enforce: ['compute'] })));
    expect(results.filter((r) => r.ok).length).toBe(33); // 33 × 3 = 99 ≤ 100; a 34th would make 102
  });
});

describe('a write the SDK sends twice (its first answer lost) counts once (store/conditional.ts)', () => {
  let loss: AnswerLoss;
  beforeAll(() => {
    loss = loseAnswers();
  });
  const isReserve = (input: WriteInput) => input.UpdateExpression?.includes('SET #writeToken = :writeToken, holds.#id = :hold') === true;
  const isSettle = (input: WriteInput) =>
    input.UpdateExpression?.includes('REMOVE holds.#id') === true && input.ConditionExpression?.startsWith('(attribute_exists(holds.#id))') === true;
  const isMonth = (input: WriteInput) => input.Key?.pk?.S?.startsWith('devcompute#') === true;

  it('a reservation with room left is held once, not twice', async () => {
    const c = caller({ ai: 1000 });
    loss.loseNext('reserve', isReserve);
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 300, compute: 0 }, enforce: ['ai'] }));
    expect(loss.lost.at(-1)).toBe('reserve');
    expect(await readUsage(c)).toMatchObject({ reserved: { ai: 300, compute: 0 }, openHolds: 1 });
    expect(await settle(r, { ai: 120, compute: 0 })).toMatchObject({ settled: true });
    expect(await readUsage(c)).toMatchObject({ used: { ai: 120, compute: 0 }, reserved: { ai: 0, compute: 0 }, openHolds: 0 });
  });

  it('… even when another request reserved between the two sends (the hold is its own key)', async () => {
    const c = caller({ ai: 1000 });
    let other: Reservation | undefined;
    loss.loseNext('reserve', isReserve, async () => {
      other = expectAdmitted(await reserve({ caller: c, amounts: { ai: 200, compute: 0 }, enforce: ['ai'] }));
    });
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 300, compute: 0 }, enforce: ['ai'] }));
    expect(other).toBeDefined();
    expect(await readUsage(c)).toMatchObject({ reserved: { ai: 500, compute: 0 }, openHolds: 2 });
    await settle(r, { ai: 300, compute: 0 });
    await settle(other!, { ai: 200, compute: 0 });
    expect(await readUsage(c)).toMatchObject({ used: { ai: 500, compute: 0 }, reserved: { ai: 0, compute: 0 }, openHolds: 0 });
  });

  it('the reservation that fills the budget is admitted, not refused over its own hold', async () => {
    const c = caller({ ai: 300 });
    loss.loseNext('reserve', isReserve);
    const r = await reserve({ caller: c, amounts: { ai: 300, compute: 0 }, enforce: ['ai'] });
    expect(loss.lost.at(-1)).toBe('reserve');
    expect(r).toMatchObject({ ok: true, committed: { ai: 300, compute: 0 } });
    expect(await readUsage(c)).toMatchObject({ reserved: { ai: 300, compute: 0 }, openHolds: 1 });
  });

  it("a run's settle, and the developer month it adds to: settled, and the month charged once", async () => {
    const c = caller();
    const dev = `dev-${randomBytes(4).toString('hex')}`;
    const r = expectAdmitted(await reserve({ caller: c, amounts: { ai: 0, compute: 60 }, enforce: ['compute'], developerId: dev }));
    loss.loseNext('settle', isSettle);
    loss.loseNext('month', isMonth);
    expect(await settle(r, { ai: 0, compute: 7 })).toMatchObject({ settled: true, used: { ai: 0, compute: 7 } });
    expect(loss.lost.slice(-2)).toEqual(['settle', 'month']);
    expect(await developerComputeUsed(dev)).toBe(7);
    expect(await readUsage(c)).toMatchObject({ used: { ai: 0, compute: 7 }, reserved: { ai: 0, compute: 0 }, openHolds: 0 });
  });
});
