import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { startReceiver } from '../webhooks/receiver.ts';
import { MODEL, vesselApi, type VesselRecord } from './incubate-client.ts';

/**
 * POST /incubate/vessel/{id}/cancel in every state a vessel can be in (docs/incubate.md, "Cancel"): waiting (PENDING
 * on a queue delay, PENDING on a far schedule, QUEUED behind a full tier) → CANCELED at once; EXECUTING → the run is
 * told, its model call in flight is aborted (the simulated upstream sees the client leave), it is charged what it
 * produced and gives back its lease and reservations, then CANCELED; ended → 409 with its status.
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  api = vesselApi(gw);
});
afterAll(async () => {
  await gw?.stop();
});

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const key = (what: string) => `cancel-${what}-${++seq}`;

const canceledBeforeRun = {
  success: false,
  text: 'The vessel was canceled before it ran',
  result: {
    type: 'result',
    subtype: 'canceled',
    total_cost_usd: 0,
    total_cost_microdollars: 0,
    usage: { input_tokens: 0, output_tokens: 0 },
    num_turns: 0,
    duration_secs: 0,
  },
};

/** The record a waiting vessel has once canceled: ended at once, never started, nothing spent. */
function canceledWaiting(before: VesselRecord): VesselRecord {
  return {
    ...before,
    status: 'CANCELED',
    isCompleted: true,
    isCanceled: true,
    updatedAt: expect.stringMatching(ISO) as unknown as string,
    completedAt: expect.stringMatching(ISO) as unknown as string,
    output: canceledBeforeRun as VesselRecord['output'],
  };
}

/** Whether the simulated upstream was ever asked to answer `marker`. */
const upstreamSaw = (marker: string) => gw.upstreams.anthropic!.requests.some((r) => JSON.stringify(r.body).includes(marker));

describe('a waiting vessel is CANCELED at once', () => {
  it('PENDING on a queue delay: CANCELED in the answer; when its message arrives it is dropped, never run', async () => {
    const token = await gw.token({ user: `c-pending-${++seq}` });
    const marker = `pending-${randomBytes(4).toString('hex')}`;
    const res = await api.incubate({ message: `${marker} [[words:1]]`, idempotencyKey: key('pending'), options: { token, model: MODEL }, ttl: 2 });
    expect(res.status).toBe(202);
    const before = await api.status(res.body.vesselId, token);
    expect(before.body.status).toBe('PENDING');

    const canceled = await api.cancel(res.body.vesselId, token);
    expect(canceled.status).toBe(200);
    expect(canceled.body).toEqual(canceledWaiting(before.body));
    expect((await api.status(res.body.vesselId, token)).body).toEqual(canceled.body);

    // Past its time (the delayed message has come and gone: nothing running, nothing due for 3 s): still CANCELED,
    // never sent upstream.
    await drained(gw, { quietMs: 3_000 });
    expect((await api.status(res.body.vesselId, token)).body).toEqual(canceled.body);
    expect(upstreamSaw(marker)).toBe(false);
  });

  it('PENDING with a callback: the canceled result is POSTed to it within seconds, by the REST function itself', async () => {
    // The conjure function hands the callback to the webhook queue (its manifest entry grants the queue; the local
    // runtime refuses a send the grants do not allow, as IAM would). Without it the callback would wait for the
    // reconciler's re-drive (VESSEL_REDRIVE_AFTER_SECONDS, two minutes).
    const receiver = await startReceiver();
    try {
      const token = await gw.token({ user: `c-callback-${++seq}` });
      const res = await api.incubate({
        message: 'Canceled with a callback',
        idempotencyKey: key('callback'),
        options: { token, model: MODEL },
        ttl: 600,
        callback: { url: receiver.url },
      } as Parameters<typeof api.incubate>[0]);
      expect(res.status).toBe(202);
      expect((await api.cancel(res.body.vesselId, token)).status).toBe(200);
      const [delivery] = await receiver.waitFor(1, 10_000);
      expect(JSON.parse(delivery!.text)).toMatchObject({ vesselId: res.body.vesselId, status: 'CANCELED' });
    } finally {
      await receiver.close();
    }
  });

  it('PENDING on a far schedule: CANCELED, and its schedule is removed from the scheduler', async () => {
    const token = await gw.token({ user: `c-far-${++seq}` });
    const executeAt = new Date(Math.ceil((Date.now() + 2 * 3_600_000) / 1_000) * 1_000).toISOString();
    const res = await api.incubate({ message: 'Far away', idempotencyKey: key('far'), options: { token, model: MODEL }, executeAt });
    expect(res.status).toBe(202);
    const mine = () => gw.scheduler.pending().filter((s) => s.name.startsWith(`vessel-${res.body.vesselId}-`));
    expect(mine()).toHaveLength(1);
    const before = await api.status(res.body.vesselId, token);
    expect(before.body).toMatchObject({ status: 'PENDING', scheduledFor: executeAt });

    const canceled = await api.cancel(res.body.vesselId, token);
    expect(canceled.status).toBe(200);
    expect(canceled.body).toEqual(canceledWaiting(before.body));
    expect(mine()).toEqual([]);
  });

  it("QUEUED behind a hobby developer's two running vessels: CANCELED at once, never run; the two complete", async () => {
    const developerId = `dev-cq-${randomBytes(4).toString('hex')}`;
    await createDeveloper({ developerId, planSeconds: 1_000 });
    const project = await createProject({ developerId });
    const token = (userId: string) =>
      mintToken({
        projectId: project.projectId,
        userId,
        secret: project.secret,
        budget: { ai: 5_000_000, compute: 3_600, window: 'day' },
        expiresInSeconds: 3_600,
      });
    const [a, b, c] = [await token('qa'), await token('qb'), await token('qc')];

    const slow = await Promise.all(
      [a, b].map((t, i) =>
        api.incubate({ message: `Slow ${i} [[latency:3000]] [[words:1]]`, idempotencyKey: key('slow'), options: { token: t, model: MODEL } }),
      ),
    );
    await expect.poll(async () => (await liveLeases(developerId)).length, { timeout: 5_000, interval: 50 }).toBe(2);

    const marker = `queued-${randomBytes(4).toString('hex')}`;
    const third = await api.incubate({ message: `${marker} [[words:1]]`, idempotencyKey: key('queued'), options: { token: c, model: MODEL } });
    expect(third.status).toBe(202);
    // The executor has seen it and found no room: QUEUED, not started.
    await new Promise((r) => setTimeout(r, 500));
    const before = await api.status(third.body.vesselId, c);
    expect(before.body).toMatchObject({ status: 'QUEUED', attempts: 0 });
    expect(before.body.startedAt).toBeUndefined();

    const canceled = await api.cancel(third.body.vesselId, c);
    expect(canceled.status).toBe(200);
    expect(canceled.body).toEqual(canceledWaiting(before.body));

    for (const [i, t] of [a, b].entries()) expect((await api.ended(slow[i]!.body.vesselId, t)).status).toBe('COMPLETED');
    // Room again, and its back-off message has come back meanwhile (nothing running, nothing due for 2.5 s): it stays
    // CANCELED, never run.
    await drained(gw, { quietMs: 2_500 });
    expect((await api.status(third.body.vesselId, c)).body).toEqual(canceled.body);
    expect(upstreamSaw(marker)).toBe(false);
    expect(await liveLeases(developerId)).toEqual([]);
  });
});

describe('an executing vessel', () => {
  it('is stopped: the model call in flight is aborted (the upstream sees it), charged what it produced, nothing left held; then CANCELED', async () => {
    const token = await gw.token({ user: `c-exec-${++seq}` });
    const marker = `exec-${randomBytes(4).toString('hex')}`;
    const res = await api.incubate({ message: `${marker} [[words:400]] [[delay:20]]`, idempotencyKey: key('exec'), options: { token, model: MODEL } });
    expect(res.status).toBe(202);
    const { vesselId } = res.body;
    const executing = await api.until(vesselId, token, (r) => r.status === 'EXECUTING', { timeout: 5_000 });
    // The model is streaming its answer.
    const call = await vi.waitFor(
      () => {
        const found = gw.upstreams.anthropic!.requests.find((r) => JSON.stringify(r.body).includes(marker));
        if (!found) throw new Error('the upstream has not been called yet');
        return found;
      },
      { timeout: 5_000, interval: 20 },
    );
    await new Promise((r) => setTimeout(r, 600));
    expect(call.outcome).toBeUndefined();

    const asked = Date.now();
    const canceled = await api.cancel(vesselId, token);
    const answeredIn = Date.now() - asked;
    expect(canceled.status).toBe(200);
    // The run looks for the cancel every second and stops at once; the endpoint waited for that.
    expect(answeredIn).toBeLessThan(5_000);
    const result = canceled.body.output?.result;
    expect(canceled.body).toEqual({
      ...executing,
      status: 'CANCELED',
      isCompleted: true,
      isCanceled: true,
      updatedAt: canceled.body.completedAt,
      completedAt: expect.stringMatching(ISO),
      output: {
        success: false,
        text: 'The vessel was canceled while it ran',
        result: {
          type: 'result',
          subtype: 'canceled',
          total_cost_usd: result!.total_cost_microdollars / 1_000_000,
          total_cost_microdollars: expect.any(Number),
          usage: { input_tokens: expect.any(Number), output_tokens: expect.any(Number) },
          num_turns: 1,
          duration_secs: expect.any(Number),
          model: MODEL,
        },
      },
    });
    // Some of the 400 words were produced (and paid for), not all of them.
    expect(result!.usage.output_tokens).toBeGreaterThan(0);
    expect(result!.usage.output_tokens).toBeLessThan(400);
    expect(result!.total_cost_microdollars).toBeGreaterThan(0);

    // The upstream saw the gateway leave mid-answer.
    await expect.poll(() => call.outcome, { timeout: 5_000, interval: 50 }).toBe('client_closed');
    // The lease is given back and nothing stays reserved; the ledger holds exactly the vessel's cost.
    expect(await liveLeases(gw.developerId)).toEqual([]);
    const usage = await api.usage(token);
    expect(usage.ai).toMatchObject({ used: result!.total_cost_microdollars, reserved: 0 });
    expect(usage.compute.reserved).toBe(0);
    expect(usage.compute.used).toBeGreaterThanOrEqual(1);
    expect((await api.status(vesselId, token)).body).toEqual(canceled.body);
  });

  it('canceled before the upstream answered at all: charged the input bound, and the result reports those very tokens', async () => {
    const token = await gw.token({ user: `c-early-${++seq}` });
    const marker = `early-${randomBytes(4).toString('hex')}`;
    // The upstream keeps the call waiting for 20 s before it sends anything.
    const res = await api.incubate({ message: `${marker} [[words:5]] [[latency:20000]]`, idempotencyKey: key('early'), options: { token, model: MODEL } });
    expect(res.status).toBe(202);
    const { vesselId } = res.body;
    await api.until(vesselId, token, (r) => r.status === 'EXECUTING', { timeout: 5_000 });
    await vi.waitFor(
      () => {
        if (!upstreamSaw(marker)) throw new Error('the upstream has not been called yet');
      },
      { timeout: 5_000, interval: 20 },
    );
    const canceled = await api.cancel(vesselId, token);
    expect(canceled.status).toBe(200);
    expect(canceled.body.status).toBe('CANCELED');
    const result = canceled.body.output!.result!;
    // The provider may have read (and billed) the input, so the input bound is charged: the result says so in tokens,
    // and its cost is exactly those tokens × price (it used to report 0/0 tokens beside a charge).
    expect(result.usage.output_tokens).toBe(0);
    expect(result.usage.input_tokens).toBeGreaterThan(0);
    expect(result.total_cost_microdollars).toBe(
      charge(priceFor(MODEL, 'anthropic')!, { input_tokens: result.usage.input_tokens, output_tokens: 0 }).microdollars,
    );
    const usage = await api.usage(token);
    expect(usage.ai).toMatchObject({ used: result.total_cost_microdollars, reserved: 0 });
  });
});

describe('an ended vessel', () => {
  it('409 vessel_not_cancelable with its status, for COMPLETED, FAILED and CANCELED; the record is unchanged', async () => {
    const token = await gw.token({ user: `c-ended-${++seq}` });
    const broke = await gw.token({ user: `c-ended-${++seq}`, budget: { ai: 0 } });
    const completed = await api.incubate({ message: 'Done [[words:1]]', idempotencyKey: key('done'), options: { token, model: MODEL } });
    const failed = await api.incubate({ message: 'No budget', idempotencyKey: key('failed'), options: { token: broke, model: MODEL } });
    const waiting = await api.incubate({ message: 'Later', idempotencyKey: key('later'), options: { token, model: MODEL }, ttl: 600 });
    expect((await api.cancel(waiting.body.vesselId, token)).status).toBe(200);

    for (const [vesselId, t, status] of [
      [completed.body.vesselId, token, 'COMPLETED'],
      [failed.body.vesselId, broke, 'FAILED'],
      [waiting.body.vesselId, token, 'CANCELED'],
    ] as const) {
      const ended = await api.ended(vesselId, t);
      expect(ended.status).toBe(status);
      const res = await api.cancel(vesselId, t);
      expect(res.status).toBe(409);
      expect(res.body).toEqual({
        error: 'vessel_not_cancelable',
        status,
        message: `Vessel ${vesselId} has already ended (${status}); only a waiting or executing vessel can be canceled`,
      });
      expect((await api.status(vesselId, t)).body).toEqual(ended);
    }
  });
});
