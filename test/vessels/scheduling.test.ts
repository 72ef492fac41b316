import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { TOKEN_CLOCK_TOLERANCE_SECONDS } from '../../lambdas/config/timing.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { setClock } from '../support/clock.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { MODEL, msBetween, runQueueCounts, vesselApi, type VesselRecord } from './incubate-client.ts';

/**
 * When a vessel runs (docs/incubate.md, "Scheduling"), on the in-process local runtime: a `ttl` and a near `executeAt`
 * ride an SQS delay and are PENDING until due; a far `executeAt` (beyond SQS's 15 minutes) is a schedule of the
 * scheduler stand-in, firing 60 s before the vessel is due, after which the executor puts the early message back with
 * the exact remaining delay. Every one starts within 1 s of its time (startedAt − scheduledFor in [0, 1000) ms).
 *
 * The far path needs two hours to pass: the whole gateway runs in this process (handlers, fauxqs, the scheduler
 * stand-in), so a fake clock — only `Date` faked, advancing with real time — moves all of them at once. Timers stay
 * real, so the queue's long polls, the executor's wait and the upstream behave as they do.
 *
 * (Not vi.useFakeTimers({ toFake: ['Date'], shouldAdvanceTime: true }): its clock advances by fixed steps on a real
 * interval, so it falls behind real time — a real 950 ms wait moved it ~900 ms — and a vessel then "starts" before
 * its time on the fake clock though it waited exactly right. The clock here is real time plus an offset.)
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let seq = 0;

beforeAll(async () => {
  // The reconciler runs once at start-up and then only when a test asks: a clock moved two hours ahead must not make
  // it re-drive a vessel behind the test's back.
  gw = await startTestGateway({ scheduleIntervalMs: 3_600_000 });
  api = vesselApi(gw);
});
afterEach(() => {
  vi.unstubAllGlobals();
});
afterAll(async () => {
  await gw?.stop();
});

const key = (what: string) => `sched-${what}-${++seq}`;

/** Status every 100 ms until the vessel has started; every status seen before it started, and the record then. */
async function watchUntilStarted(vesselId: string, token: string): Promise<{ before: { at: number; status: string }[]; started: VesselRecord }> {
  const before: { at: number; status: string }[] = [];
  for (;;) {
    const at = Date.now();
    const res = await api.status(vesselId, token);
    expect(res.status).toBe(200);
    if (res.body.startedAt !== undefined) return { before, started: res.body };
    before.push({ at, status: res.body.status });
    await new Promise((r) => setTimeout(r, 100));
  }
}

describe('near: an SQS delay', () => {
  it('ttl 2 s: PENDING until due, then started within 1 s of its time, and run to COMPLETED', async () => {
    const token = await gw.token({ user: 'ttl-user' });
    const idempotencyKey = key('ttl');
    const sent = Date.now();
    const res = await api.incubate({ message: 'Later [[words:2]]', idempotencyKey, options: { token, model: MODEL }, ttl: 2 });
    const received = Date.now();
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ vesselId: expect.any(String), idempotencyKey, status: 'queued', scheduledFor: expect.any(String) });
    const due = new Date(res.body.scheduledFor).getTime();
    expect(due).toBeGreaterThanOrEqual(sent + 2_000);
    expect(due).toBeLessThanOrEqual(received + 2_000);

    const { before, started } = await watchUntilStarted(res.body.vesselId, token);
    // Seen PENDING from the first look until shortly before it was due, never anything else.
    expect(before.length).toBeGreaterThanOrEqual(5);
    expect(new Set(before.map((b) => b.status))).toEqual(new Set(['PENDING']));
    expect(before.at(-1)!.at).toBeGreaterThan(due - 1_000);
    const lateness = msBetween(started.scheduledFor, started.startedAt!);
    expect(lateness).toBeGreaterThanOrEqual(0);
    expect(lateness).toBeLessThan(1_000);

    const ended = await api.ended(res.body.vesselId, token);
    expect(ended).toMatchObject({ status: 'COMPLETED', attempts: 1, startedAt: started.startedAt, output: { success: true, text: 'word1 word2' } });
  });

  it('executeAt 3 s ahead (milliseconds and another zone): PENDING until due, then started within 1 s of its time', async () => {
    const token = await gw.token({ user: 'at-user' });
    const idempotencyKey = key('at');
    const due = Date.now() + 3_000;
    // The same instant written at +02:00, with milliseconds: scheduledFor is that instant in UTC.
    const local = new Date(due + 2 * 3_600_000).toISOString().replace('Z', '+02:00');
    const res = await api.incubate({ message: 'At [[words:1]]', idempotencyKey, options: { token, model: MODEL }, executeAt: local, ttl: 600 });
    expect(res.status).toBe(202);
    // executeAt wins over ttl.
    expect(res.body).toEqual({ vesselId: expect.any(String), idempotencyKey, status: 'queued', scheduledFor: new Date(due).toISOString() });

    const { before, started } = await watchUntilStarted(res.body.vesselId, token);
    expect(new Set(before.map((b) => b.status))).toEqual(new Set(['PENDING']));
    expect(before.at(-1)!.at).toBeGreaterThan(due - 1_000);
    const lateness = msBetween(started.scheduledFor, started.startedAt!);
    expect(lateness).toBeGreaterThanOrEqual(0);
    expect(lateness).toBeLessThan(1_000);
    expect(await api.ended(res.body.vesselId, token)).toMatchObject({ status: 'COMPLETED', output: { text: 'word1' } });
  });

  it('a past executeAt means now: scheduledFor is the time of the request, and the vessel is QUEUED at once', async () => {
    const token = await gw.token({ user: 'past-user' });
    const idempotencyKey = key('past');
    const sent = Date.now();
    const res = await api.incubate({
      message: 'Now [[words:1]] [[latency:800]]',
      idempotencyKey,
      options: { token, model: MODEL },
      executeAt: '2020-01-01T00:00:00Z',
    });
    const received = Date.now();
    expect(res.status).toBe(202);
    const scheduledFor = new Date(res.body.scheduledFor).getTime();
    expect(scheduledFor).toBeGreaterThanOrEqual(sent);
    expect(scheduledFor).toBeLessThanOrEqual(received);
    const first = await api.status(res.body.vesselId, token);
    expect(['QUEUED', 'EXECUTING']).toContain(first.body.status);
    const ended = await api.ended(res.body.vesselId, token);
    expect(ended.status).toBe('COMPLETED');
    expect(msBetween(ended.scheduledFor, ended.startedAt!)).toBeLessThan(1_000);
  });

  it('a token that has expired by the time the vessel runs still authorises that run (the caller was captured at enqueue)', async () => {
    const reader = await gw.token({ user: 'short-lived' });
    // Tokens are accepted up to TOKEN_CLOCK_TOLERANCE_SECONDS past their exp: this one is past it about 2 s from now.
    const shortLived = await mintToken({
      projectId: gw.projectId,
      userId: 'short-lived',
      secret: gw.secret,
      budget: { ai: 10_000_000, compute: 3_600, window: 'day' },
      expiresInSeconds: 3,
      now: Date.now() - TOKEN_CLOCK_TOLERANCE_SECONDS * 1_000 - 500,
    });
    const res = await api.incubate({
      message: 'After expiry [[words:2]]',
      idempotencyKey: key('expiring'),
      options: { token: shortLived, model: MODEL },
      ttl: 4,
    });
    expect(res.status).toBe(202);
    await new Promise((r) => setTimeout(r, 3_000));
    // Expired now: refused as a token, and not good for reading the record either.
    expect((await api.incubate({ message: 'x', idempotencyKey: key('expired'), options: { token: shortLived } })).body).toEqual({
      error: 'token_expired',
      message: 'Token expired',
    });
    expect((await api.status(res.body.vesselId, shortLived)).status).toBe(404);
    const done = await api.ended(res.body.vesselId, reader);
    expect(done).toMatchObject({ status: 'COMPLETED', output: { success: true, text: 'word1 word2' } });
    expect((await api.usage(reader)).ai.used).toBe(done.output!.result.total_cost_microdollars);
  });
});

describe('far: the scheduler stand-in', () => {
  it('executeAt 2 h ahead: a schedule at due − 60 s; fired there (fake clock), the message is put back with the rest of the delay; started within 1 s of its time', async () => {
    // The token outlives the fake two hours, so the record can be read with it then (the run itself needs no token).
    const token = await gw.token({ user: 'far-user', expiresInSeconds: 6 * 3_600 });
    const idempotencyKey = key('far');
    const due = Math.ceil((Date.now() + 2 * 3_600_000) / 1_000) * 1_000;
    const executeAt = new Date(due).toISOString();
    const res = await api.incubate({ message: 'Far [[words:3]]', idempotencyKey, options: { token, model: MODEL }, executeAt });
    expect(res.status).toBe(202);
    expect(res.body).toEqual({ vesselId: expect.any(String), idempotencyKey, status: 'queued', scheduledFor: executeAt });
    const { vesselId } = res.body;

    // One schedule, named after the vessel and its trigger, firing a minute early, delivering the run message.
    const mine = () => gw.scheduler.pending().filter((s) => s.name.startsWith(`vessel-${vesselId}-`));
    expect(mine()).toEqual([
      {
        name: expect.stringMatching(new RegExp(`^vessel-${vesselId}-[0-9a-f]{8}$`)),
        at: new Date(due - 60_000).toISOString(),
        body: expect.any(String),
        queueUrl: gw.queues.urls.RUN_QUEUE_URL,
      },
    ]);
    expect(JSON.parse(mine()[0]!.body)).toEqual({ vesselId, driveId: expect.any(String) });
    expect((await api.status(vesselId, token)).body).toMatchObject({ status: 'PENDING', scheduledFor: executeAt, attempts: 0 });
    // Nothing on the run queue for it (nor anything else, once earlier tests' messages are gone).
    await vi.waitFor(async () => expect(await runQueueCounts(gw)).toEqual({ visible: 0, inFlight: 0, delayed: 0 }), { timeout: 5_000, interval: 100 });

    // A second before its time, the schedule does not fire.
    expect(await gw.scheduler.fireDue(new Date(due - 61_000))).toBe(0);
    expect(mine()).toHaveLength(1);

    // Two hours later: the clock reads due − 60 s, and the schedule fires (by this call, or by the stand-in's own tick
    // that reads the same clock).
    setClock(due - 60_000);
    let fired = await gw.scheduler.fireDue(new Date());
    await vi.waitFor(async () => {
      fired += await gw.scheduler.fireDue(new Date());
      expect(mine()).toEqual([]);
    });
    expect(fired).toBeLessThanOrEqual(1);

    // The executor got the message a minute early and put it back with the remaining delay: one delayed message, the
    // vessel still PENDING and not started.
    await vi.waitFor(async () => expect(await runQueueCounts(gw)).toEqual({ visible: 0, inFlight: 0, delayed: 1 }), { timeout: 5_000, interval: 50 });
    expect((await api.status(vesselId, token)).body).toMatchObject({ status: 'PENDING', attempts: 0 });
    expect((await api.status(vesselId, token)).body.startedAt).toBeUndefined();

    // Three seconds before its time the message is still delayed (nothing running, nothing due for 500 ms); from there
    // real time runs to the end.
    setClock(due - 3_000);
    await drained(gw, { quietMs: 500 });
    expect(await runQueueCounts(gw)).toEqual({ visible: 0, inFlight: 0, delayed: 1 });
    expect((await api.status(vesselId, token)).body.status).toBe('PENDING');

    const started = await api.until(vesselId, token, (r) => r.startedAt !== undefined, { timeout: 8_000 });
    const lateness = msBetween(started.scheduledFor, started.startedAt!);
    expect(lateness).toBeGreaterThanOrEqual(0);
    expect(lateness).toBeLessThan(1_000);
    const ended = await api.ended(vesselId, token);
    expect(ended).toMatchObject({ status: 'COMPLETED', attempts: 1, output: { success: true, text: 'word1 word2 word3' } });
    expect(await runQueueCounts(gw)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
    expect(await liveLeases(gw.developerId)).toEqual([]);
  });
});
