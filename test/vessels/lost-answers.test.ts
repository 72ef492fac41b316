import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';
import { incubate, pollUntil, vesselRecord } from '../support/vessels.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { MODEL, vesselApi } from './incubate-client.ts';

/**
 * /incubate moves whose answer is lost (a connection dropped after DynamoDB applied the write): the SDK sends the same
 * write again, and that second send meets the first one's result. Each move must read that as its own success
 * (store/conditional.ts), not as another writer's:
 *
 *   the user's cancel of a waiting vessel (→ CANCELED)   else: 409 vessel_not_cancelable for the user's own cancel
 *   the executor's start (→ EXECUTING)                    else: "started by another delivery", the admission withdrawn
 *                                                          and the vessel left EXECUTING with nobody running it
 *   the executor's end (→ COMPLETED)                      else: "moved meanwhile", the callback never handed off
 *
 * The reconciler is kept out of it (VESSEL_REDRIVE_AFTER_SECONDS 600): what ends here ends at once, by itself.
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let rx: Receiver;
let answers: AnswerLoss;

beforeAll(async () => {
  gw = await startTestGateway({ env: { VESSEL_REDRIVE_AFTER_SECONDS: '600' } });
  // Nothing in flight yet: the write client is built again with the step that loses answers.
  answers = loseAnswers();
  api = vesselApi(gw);
  rx = await startReceiver();
});
afterAll(async () => {
  await rx?.close();
  resetInstanceState();
  await gw?.stop();
});

/** A move of a vessel to `status` (VesselStates.transition's `#status = :sTo`), of `vesselId` when given. */
const movingTo = (status: string, vesselId?: string) => (input: WriteInput) =>
  input.TableName === process.env.VESSELS_TABLE &&
  input.ExpressionAttributeValues?.[':sTo']?.S === status &&
  (vesselId === undefined || input.Key?.pk?.S === `vessel#${vesselId}`);

describe('a vessel move whose answer is lost', () => {
  it('the cancel of a PENDING vessel: 200 CANCELED, not 409', async () => {
    const token = await gw.token({ user: 'lost-cancel' });
    const q = await incubate(gw.url, { message: 'Waits ten minutes [[words:2]]', idempotencyKey: 'lost-cancel-1', options: { token, model: MODEL }, ttl: 600 });
    const before = await vesselRecord(gw.url, token, q.vesselId);
    expect(before).toMatchObject({ status: 'PENDING', attempts: 0 });
    const lostBefore = answers.lost.length;

    answers.loseNext('cancel', movingTo('CANCELED', q.vesselId));
    const canceled = await api.cancel(q.vesselId, token);
    expect(answers.pending()).toEqual([]);
    expect(answers.lost.slice(lostBefore)).toEqual(['cancel']);
    expect(canceled.status, JSON.stringify(canceled.body)).toBe(200);
    expect(canceled.body).toMatchObject({
      vesselId: q.vesselId,
      status: 'CANCELED',
      isCompleted: true,
      isCanceled: true,
      attempts: 0,
      output: { success: false, text: 'The vessel was canceled before it ran', result: { subtype: 'canceled' } },
    });
    expect(canceled.body).not.toHaveProperty('startedAt');
    // The record says the same; the vessel's schedule (if it had one) is gone; a second cancel finds it ended.
    expect(await vesselRecord(gw.url, token, q.vesselId)).toEqual(canceled.body);
    expect(gw.scheduler.pending().filter((s) => s.name.startsWith(`vessel-${q.vesselId}-`))).toEqual([]);
    const again = await api.cancel(q.vesselId, token);
    expect(again.status).toBe(409);
    expect(again.body).toMatchObject({ error: 'vessel_not_cancelable', status: 'CANCELED' });
    // The write token stays in the table: not in the record the user reads.
    expect(canceled.body).not.toHaveProperty('writeToken');
  });

  it("the executor's start and end: completes at once, one attempt, a success output, its callback delivered once", async () => {
    const token = await gw.token({ user: 'lost-run' });
    const lostBefore = answers.lost.length;
    // The vessel's id is not known before it is queued, and its run may start before the 202 arrives: these match the
    // next start and end of any vessel (this file's only other vessel is canceled already).
    answers.loseNext('start', movingTo('EXECUTING'));
    answers.loseNext('end', movingTo('COMPLETED'));
    const queuedAt = Date.now();
    const q = await incubate(gw.url, {
      message: 'Lost start and end [[words:2]]',
      idempotencyKey: 'lost-run-1',
      options: { token, model: MODEL },
      callback: { url: rx.url, secret: 's' },
    });

    const done = await pollUntil(
      () => vesselRecord(gw.url, token, q.vesselId),
      (v) => v.isCompleted,
      { timeoutMs: 15_000, everyMs: 100, what: 'the vessel ended' },
    );
    const took = Date.now() - queuedAt;
    expect(answers.pending()).toEqual([]);
    expect(answers.lost.slice(lostBefore)).toEqual(['start', 'end']);
    expect(done).toMatchObject({
      status: 'COMPLETED',
      isCompleted: true,
      isSuccess: true,
      attempts: 1,
      output: { success: true, text: 'word1 word2', result: { subtype: 'success', num_turns: 1 } },
    });
    expect(done.startedAt).toBeDefined();
    // By itself, not by the reconciler (it would not look before 600 s).
    expect(took).toBeLessThan(10_000);

    // The callback was handed off by the end and delivered, once.
    const stored = await pollUntil(
      () => getVessel(q.vesselId),
      (v) => v?.webhook?.status === 'delivered',
      { timeoutMs: 10_000, everyMs: 100, what: 'the callback delivered' },
    );
    expect(stored!.webhook).toMatchObject({ status: 'delivered', round: 1, tried: 1 });
    expect(stored!.callbackHandedOffAt).toBeDefined();
    // A second delivery would have shown up: nothing running, nothing due for 500 ms.
    await drained(gw, { quietMs: 500 });
    const mine = rx.requests.filter((r) => r.headers['webhook-id'] === `msg_${q.vesselId}`);
    expect(mine).toHaveLength(1);
    expect(JSON.parse(mine[0]!.text)).toMatchObject({ vesselId: q.vesselId, status: 'COMPLETED', success: true, text: 'word1 word2' });
    expect(mine[0]!.text).not.toContain('writeToken');
    expect(done).not.toHaveProperty('writeToken');

    // The run gave its slot back: no lease left behind.
    await expect.poll(() => liveLeases(gw.developerId), { timeout: 5_000, interval: 100 }).toEqual([]);
  });
});
