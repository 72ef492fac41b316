import { afterAll, beforeAll, expect, it } from 'vitest';
import { reconcileShardOf } from '../../lambdas/vessels/store.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { reconcileVessels } from '../../lambdas/vessels/reconciler.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil } from '../support/vessels.ts';
import { startReceiver, type Receiver } from './receiver.ts';

/**
 * The vessel is the source of truth for a delivery, the queue only its trigger: while a delivery is pending its vessel
 * stays in the reconcile index, looked at once the next attempt is overdue, so an attempt whose message was lost (a
 * local runtime killed with its in-memory queue, a schedule that never fired) is still made (docs/webhooks.md). Once
 * settled, the vessel leaves the index.
 */

const REDRIVE_SECONDS = 2;
let gw: TestGateway;
let rx: Receiver;
let token: string;

beforeAll(async () => {
  // One retry, 20 minutes after the first attempt: a schedule, which the test then loses.
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1200', VESSEL_REDRIVE_AFTER_SECONDS: String(REDRIVE_SECONDS) } });
  rx = await startReceiver();
  token = await gw.token();
});
afterAll(async () => {
  await rx?.close();
  await gw?.stop();
});

const stored = async (vesselId: string) => (await getVessel(vesselId))!;

it('a settled delivery takes its vessel out of the reconcile index', async () => {
  const q = await incubate(gw.url, { message: 'Quick [[words:2]]', idempotencyKey: 'settled-1', options: { token }, callback: { url: rx.url, secret: 's' } });
  const v = await pollUntil(
    () => stored(q.vesselId),
    (s) => s?.webhook?.status === 'delivered',
    { timeoutMs: 30_000, what: 'delivered' },
  );
  expect(v.webhook).toMatchObject({ status: 'delivered', round: 1, tried: 1 });
  expect(v).not.toHaveProperty('reconcileShard');
  expect(v).not.toHaveProperty('reconcileAt');
});

it('an attempt whose message was lost is asked for again by the reconciler once overdue, and delivered', async () => {
  const before = rx.requests.length;
  rx.answer({ status: 500 });
  const q = await incubate(gw.url, { message: 'Lost retry [[words:2]]', idempotencyKey: 'lost-1', options: { token }, callback: { url: rx.url, secret: 's' } });
  const pending = await pollUntil(
    () => stored(q.vesselId),
    (s) => s?.webhook?.tried === 1,
    { timeoutMs: 30_000, what: 'attempt 1 recorded' },
  );
  const next = pending.webhook!.nextAttemptAt!;
  expect(pending.webhook).toMatchObject({ status: 'pending', round: 1, tried: 1, attempts: [expect.objectContaining({ statusCode: 500 })] });
  // Watched until the retry is overdue by VESSEL_REDRIVE_AFTER_SECONDS.
  expect(pending).toMatchObject({ reconcileShard: reconcileShardOf(q.vesselId), reconcileAt: next + REDRIVE_SECONDS * 1000 });

  // The retry's schedule is lost.
  const name = `webhook-${q.vesselId}-1-2`;
  await pollUntil(
    async () => gw.scheduler.pending().map((s) => s.name),
    (names) => names.includes(name),
    { timeoutMs: 10_000, what: 'the retry scheduled' },
  );
  await gw.scheduler.cancel(name);

  // Not overdue yet: nothing happens.
  expect((await reconcileVessels(new Date(next))).deliveriesRedriven).toBe(0);
  // Overdue: attempt 2 is asked for, made at once, and delivered; the vessel leaves the index.
  expect((await reconcileVessels(new Date(next + REDRIVE_SECONDS * 1000 + 1))).deliveriesRedriven).toBe(1);
  const done = await pollUntil(
    () => stored(q.vesselId),
    (s) => s?.webhook?.status === 'delivered',
    { timeoutMs: 30_000, what: 'delivered by the re-asked attempt' },
  );
  expect(done.webhook!.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([
    [1, 1, 500],
    [1, 2, 204],
  ]);
  expect(done).not.toHaveProperty('reconcileAt');
  const mine = rx.requests.slice(before).filter((r) => r.headers['webhook-id'] === `msg_${q.vesselId}`);
  expect(mine).toHaveLength(2);
});
