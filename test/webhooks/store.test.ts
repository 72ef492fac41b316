import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { conditionalPut } from '../../lambdas/store/conditional.ts';
import { vesselKey, type StoredVessel } from '../../lambdas/vessels/record.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { WEBHOOK_STATUS_PLACEHOLDERS, WebhookStates, type StoredAttempt, type StoredWebhook } from '../../lambdas/deliveries/record.ts';
import { claimAttempt, recordAttempt, startRound, vesselDelivery } from '../../lambdas/webhooks/store.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The delivery record's writes (lambdas/webhooks/store.ts) against DynamoDB Local: every change of its status is a
 * transition of its flow (WebhookStates, lambdas/deliveries/record.ts), on the vessel's `webhook.status`.
 */

describe('WebhookStates', () => {
  it('an attempt settles or keeps a pending round; a redelivery starts a pending one from any status', () => {
    const allowed = WebhookStates.statuses.flatMap((from) => WebhookStates.targetsOf(from).map((to) => `${from}→${to}`));
    expect(allowed).toEqual(['pending→pending', 'pending→delivered', 'pending→failed', 'delivered→pending', 'failed→pending']);
  });

  it('refuses to build a move the flow forbids', () => {
    expect(() => WebhookStates.transition('failed', { ...WEBHOOK_STATUS_PLACEHOLDERS, from: 'delivered' })).toThrow('Status delivered cannot move to failed');
    expect(() => WebhookStates.transition('delivered', { ...WEBHOOK_STATUS_PLACEHOLDERS, from: 'failed' })).toThrow(RangeError);
  });

  it("names the vessel's `webhook.status`, with placeholders apart from the vessel's own status", () => {
    expect(WebhookStates.transition('delivered', { ...WEBHOOK_STATUS_PLACEHOLDERS, from: 'pending' })).toEqual({
      condition: '#w.#wstatus IN (:ws0)',
      set: '#w.#wstatus = :wsTo',
      names: { '#w': 'webhook', '#wstatus': 'status' },
      values: { ':ws0': 'pending', ':wsTo': 'delivered' },
    });
  });
});

describe('the delivery record moves along its flow only', () => {
  let gw: TestGateway;
  beforeAll(async () => {
    gw = await startTestGateway();
  });
  afterAll(async () => {
    await gw?.stop();
  });

  /** An ended vessel with a callback and the delivery record `webhook` (only what the writes read). */
  async function vesselWith(webhook: StoredWebhook): Promise<StoredVessel> {
    const vesselId = `ves_${randomUUID()}`;
    const item = { ...vesselKey(vesselId), vesselId, status: 'COMPLETED', callback: { url: 'https://hooks.test/x' }, webhook };
    await conditionalPut({ TableName: env().VESSELS_TABLE, Item: item, ConditionExpression: 'attribute_not_exists(pk)' });
    return item as unknown as StoredVessel;
  }
  const attempt = (n: number): StoredAttempt => ({ round: 1, attempt: n, at: Date.now(), durationMs: 1, statusCode: 500 });
  const claimed = (status: StoredWebhook['status']): StoredWebhook => ({
    status,
    round: 1,
    tried: 0,
    attempts: [],
    claim: { attempt: 1, at: Date.now(), by: 'sender-1' },
  });

  it('pending → pending, then → delivered: each attempt recorded under its claim', async () => {
    const vessel = await vesselWith({ status: 'pending', round: 1, tried: 0, attempts: [] });
    expect(await claimAttempt(vesselDelivery(vessel.vesselId), vessel.webhook, { round: 1, attempt: 1 }, 'sender-1', Date.now())).toBe(true);
    const retry = await recordAttempt(vesselDelivery(vessel.vesselId), { round: 1, attempt: 1 }, 'sender-1', attempt(1), {
      status: 'pending',
      nextAttemptAt: Date.now() + 1000,
    });
    expect(retry).toMatchObject({ status: 'pending', tried: 1 });
    const seen = (await getVessel(vessel.vesselId))!;
    expect(await claimAttempt(vesselDelivery(seen.vesselId), seen.webhook, { round: 1, attempt: 2 }, 'sender-2', Date.now())).toBe(true);
    const done = await recordAttempt(vesselDelivery(vessel.vesselId), { round: 1, attempt: 2 }, 'sender-2', attempt(2), { status: 'delivered' });
    expect(done).toMatchObject({ status: 'delivered', tried: 2 });
    expect(done?.claim).toBeUndefined();
  });

  it('an attempt of a delivery no longer pending is neither claimed nor recorded', async () => {
    for (const status of ['delivered', 'failed'] as const) {
      const vessel = await vesselWith({ status, round: 1, tried: 0, attempts: [] });
      expect(await claimAttempt(vesselDelivery(vessel.vesselId), vessel.webhook, { round: 1, attempt: 1 }, 'sender-1', Date.now()), status).toBe(false);
      // Even under a claim (a record no writer leaves: a move out of pending drops the claim), the flow refuses it.
      const record = claimed(status);
      const held = await vesselWith(record);
      expect(
        await recordAttempt(vesselDelivery(held.vesselId), { round: 1, attempt: 1 }, 'sender-1', attempt(1), { status: 'delivered' }),
        status,
      ).toBeUndefined();
      expect((await getVessel(held.vesselId))!.webhook).toEqual(record);
    }
  });

  it('a redelivery starts the next round, pending, from every status', async () => {
    for (const status of WebhookStates.statuses) {
      const vessel = await vesselWith({ status, round: 2, tried: 3, attempts: [], ...(status === 'failed' ? { failure: 'gone' } : {}) });
      const started = await startRound(vessel, Date.now());
      expect(started?.webhook, status).toEqual({ status: 'pending', round: 3, tried: 0, attempts: [] });
      // The round seen is gone: a second redelivery of it starts nothing.
      expect(await startRound(vessel, Date.now()), status).toBeUndefined();
    }
  });
});
