import { randomBytes } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { fireAlert } from '../../lambdas/alerts/fire.ts';
import { alertIdOf } from '../../lambdas/alerts/record.ts';
import { crossedThresholds } from '../../lambdas/alerts/thresholds.ts';
import { readUsage, reserve, settle, sweepExpired } from '../../lambdas/budgets/ledger.ts';
import { env } from '../../lambdas/config/env.ts';
import { getProject } from '../../lambdas/registry/registry.ts';
import { developerComputeUsed } from '../../lambdas/budgets/developer-month.ts';
import { createDeveloper, setDeveloperAlerts, setProjectAlerts } from '../../lambdas/registry/registry.ts';
import { verifyWebhook } from '../../lambdas/webhooks/verify.ts';
import { alertWebhookOf, redeliverAlert } from '../../lambdas/webhooks/redeliver.ts';
import { setClock } from '../support/clock.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { mapLimit } from '../support/vessels.ts';
import { receiverPool, type ReceivedRequest, type Receiver } from '../webhooks/receiver.ts';

/**
 * Budget alerts (issue 30, done-when 2; docs/webhooks.md, "Budget alerts"), end to end through the local gateway
 * (real HTTP, DynamoDB Local, fauxqs, the webhook sender) to a real receiver that verifies every signature:
 * - 300 concurrent /v1/messages requests of one user carry their window across 80 % and then 100 % of the user's AI
 *   budget: the receiver gets exactly two events, one per threshold, with the exact figures;
 * - a second window of the same user crosses them again: two more events, of that window;
 * - a developer's month of compute crossing 50 % and 100 % of the plan under 20 concurrent settlements: one event each.
 *
 * Every answer costs exactly what it reserved (a price with no input rate, `inference_geo: "global"` so no US-only
 * premium in the worst case, and as many output tokens as max_tokens: the simulated upstream's `[[words:N]]`), so all
 * 300 requests are admitted at once, spend the budget to the microdollar, and every crossing is known in advance: the
 * 240th charge reaches 80 %, the 300th 100 %.
 */
const MODEL = 'claude-sonnet-4-6';
const WORDS = 20;
/** $1 per million output tokens: 1 µ$ a token, 20 µ$ an answer. */
const PRICE = { inputUsdPerMtok: 0, outputUsdPerMtok: 1 };
const CHARGE = WORDS;
const REQUESTS = 300;
const SECRET = `whsec-alerts-${randomBytes(6).toString('hex')}`;

let gw: TestGateway;
let rx: Receiver;
const receivers = receiverPool();
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1' } });
  await gw.setPricing(MODEL, PRICE);
  rx = await receivers.start();
  await setProjectAlerts(gw.projectId, { ai: [80, 100], url: rx.url, secret: SECRET });
});
afterEach(() => {
  rx.requests.length = 0;
});
afterAll(async () => {
  await receivers.closeAll();
  await gw?.stop();
});

/** Sends `count` requests of `token` at once (plain fetch: no client retries); every one must be answered 200. */
async function burst(token: string, count: number): Promise<void> {
  const statuses = await Promise.all(
    Array.from({ length: count }, async (_, i) => {
      const res = await fetch(`${gw.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': token, 'anthropic-version': '2023-06-01' },
        // `global`: no US-only premium in the worst case, so the reservation is exactly the charge.
        body: JSON.stringify({
          model: MODEL,
          max_tokens: WORDS,
          inference_geo: 'global',
          messages: [{ role: 'user', content: `Alert ${i} [[words:${WORDS}]]` }],
        }),
      });
      await res.arrayBuffer();
      expect(Number(res.headers.get('x-gateway-cost-microdollars'))).toBe(CHARGE);
      return res.status;
    }),
  );
  expect(statuses.filter((s) => s !== 200)).toEqual([]);
}

/**
 * Every delivery the receiver got, once nothing more is running or due: each verified by its Standard Webhooks
 * signature (our verifyWebhook and the independent `standardwebhooks` package), answered with its parsed body.
 */
async function deliveries(expected: number): Promise<{ request: ReceivedRequest; body: Record<string, unknown> }[]> {
  await gw.invocationsDone();
  await rx.waitFor(expected, 30_000);
  // A second event of a threshold would be due at once: drained for 1.5 s proves none is coming.
  await drained(gw, { quietMs: 1_500 });
  return rx.requests.map((request) => {
    const check = verifyWebhook(request.body, request.headers, SECRET);
    expect(check).toMatchObject({ ok: true, scheme: 'standard-webhooks' });
    const standard = new Webhook(Buffer.from(SECRET, 'utf8').toString('base64'));
    const body = standard.verify(request.text, request.headers as Record<string, string>) as Record<string, unknown>;
    expect(request.headers['user-agent']).toBe('prompt-gateway-webhooks/1.0');
    return { request, body };
  });
}

const byThreshold = (a: { body: Record<string, unknown> }, b: { body: Record<string, unknown> }) => Number(a.body.threshold) - Number(b.body.threshold);

describe('user.budget.threshold', () => {
  it(`${REQUESTS} concurrent requests of one user across 80 % and 100 % of the AI budget: exactly one signed event each, with the exact figures`, {
    timeout: 90_000,
  }, async () => {
    const userId = `alerted-${++seq}`;
    const budget = REQUESTS * CHARGE;
    const claim = { ai: budget, compute: 60, window: 'day' as const };
    await burst(await gw.token({ user: userId, budget: claim }), REQUESTS);
    const got = (await deliveries(2)).sort(byThreshold);

    // The ledger: the budget spent to the microdollar, nothing held.
    const usage = await readUsage({ projectId: gw.projectId, userId, budget: claim });
    expect(usage.used.ai).toBe(budget);
    expect(usage.openHolds).toBe(0);

    const windowStart = usage.key.windowStart;
    const event = (threshold: number, used: number) => ({
      type: 'user.budget.threshold',
      projectId: gw.projectId,
      userId,
      window: 'day',
      windowStart,
      meter: 'ai',
      threshold,
      used,
      budget,
    });
    expect(got.map((g) => g.body)).toEqual([event(80, 0.8 * budget), event(100, budget)]);
    // The exact bytes: `type`, then the fields in their documented order.
    expect(got.map((g) => g.request.text)).toEqual([JSON.stringify(event(80, 0.8 * budget)), JSON.stringify(event(100, budget))]);
    // One webhook-id per alert, derived from the crossing (the same on every attempt and redelivery).
    const ids = got.map((g) => String(g.request.headers['webhook-id']));
    const alertIds = [80, 100].map((threshold) =>
      alertIdOf({
        event: 'user.budget.threshold',
        fields: { projectId: gw.projectId, userId, window: 'day', windowStart, meter: 'ai', threshold, used: 0, budget },
      }),
    );
    expect(ids).toEqual(alertIds.map((id) => `msg_${id}`));
    // Each alert's delivery is recorded on its item, as a vessel's callback is on the vessel.
    for (const id of alertIds) {
      const shown = await alertWebhookOf(id);
      expect(shown.webhook).toMatchObject({ status: 'delivered', attempts: [{ round: 1, attempt: 1, statusCode: 204 }] });
      expect(JSON.stringify(shown)).not.toContain(SECRET);
    }
  });

  it('a second window of the same user crosses the thresholds again: two more events, of that window', { timeout: 60_000 }, async () => {
    const userId = `windows-${++seq}`;
    const perWindow = 10;
    const claim = { ai: perWindow * CHARGE, compute: 60, window: 'hour' as const };
    const firstHour = Date.UTC(2031, 4, 6, 9, 10);
    setClock(firstHour);
    await burst(await gw.token({ user: userId, budget: claim }), perWindow);
    const first = (await deliveries(2)).sort(byThreshold);
    rx.requests.length = 0;

    setClock(firstHour + 3_600_000);
    await burst(await gw.token({ user: userId, budget: claim }), perWindow);
    const second = (await deliveries(2)).sort(byThreshold);

    const event = (windowStart: string, threshold: number, used: number) => ({
      type: 'user.budget.threshold',
      projectId: gw.projectId,
      userId,
      window: 'hour',
      windowStart,
      meter: 'ai',
      threshold,
      used,
      budget: perWindow * CHARGE,
    });
    expect(first.map((g) => g.body)).toEqual([event('2031-05-06T09:00:00.000Z', 80, 8 * CHARGE), event('2031-05-06T09:00:00.000Z', 100, 10 * CHARGE)]);
    expect(second.map((g) => g.body)).toEqual([event('2031-05-06T10:00:00.000Z', 80, 8 * CHARGE), event('2031-05-06T10:00:00.000Z', 100, 10 * CHARGE)]);
    const ids = new Set([...first, ...second].map((g) => g.request.headers['webhook-id']));
    expect(ids.size).toBe(4);
  });
});

describe('developer.plan.threshold', () => {
  it("20 concurrent compute settlements across 50 % and 100 % of a developer's plan: one signed event each", { timeout: 60_000 }, async () => {
    const developerId = `dev-alerts-${randomBytes(4).toString('hex')}`;
    // A plan of 16 s and a pool of 4: the month allows 20 s.
    await createDeveloper({ developerId, planSeconds: 16, poolSeconds: 4 });
    await setDeveloperAlerts(developerId, { compute: [50, 100], url: rx.url, secret: SECRET });
    const caller = { projectId: gw.projectId, userId: `runner-${++seq}`, budget: { ai: 1_000_000, compute: 3_600, window: 'day' as const } };
    // Twenty runs of one second each, settled at once (the ledger settles a run's compute reservation this way).
    await mapLimit(
      Array.from({ length: 20 }, (_, i) => i),
      20,
      async () => {
        const r = await reserve({ caller, amounts: { ai: 0, compute: 5 }, enforce: ['compute'], developerId });
        if (!r.ok) throw new Error('not reserved');
        expect((await settle(r.reservation, { ai: 0, compute: 1 })).settled).toBe(true);
      },
    );
    expect(await developerComputeUsed(developerId)).toBe(20);
    const got = (await deliveries(2)).sort(byThreshold);
    const month = new Date().toISOString().slice(0, 7);
    const event = (threshold: number, used: number) => ({
      type: 'developer.plan.threshold',
      developerId,
      month,
      meter: 'compute',
      threshold,
      used,
      budget: 20,
    });
    expect(got.map((g) => g.body)).toEqual([event(50, 10), event(100, 20)]);
    expect(got.map((g) => g.request.text)).toEqual([JSON.stringify(event(50, 10)), JSON.stringify(event(100, 20))]);
  });
});

describe('once per crossing', () => {
  it('crossedThresholds: before < T % of the budget ≤ after, in integers', () => {
    expect(crossedThresholds([50, 80, 100], 1000, 800, 1)).toEqual([80]);
    expect(crossedThresholds([50, 80, 100], 1000, 799, 1)).toEqual([]);
    expect(crossedThresholds([50, 80, 100], 1000, 801, 1)).toEqual([]);
    // One charge across several thresholds fires each of them.
    expect(crossedThresholds([50, 80, 100], 1000, 1000, 600)).toEqual([50, 80, 100]);
    // 1/3 of a budget of 10: 33 % is 3.3, crossed by the charge that reaches 4.
    expect(crossedThresholds([33], 10, 4, 1)).toEqual([33]);
    expect(crossedThresholds([33], 10, 3, 1)).toEqual([]);
    // Nothing charged, or no budget: nothing crossed.
    expect(crossedThresholds([80], 1000, 900, 0)).toEqual([]);
    expect(crossedThresholds([80], 0, 900, 900)).toEqual([]);
  });

  it('50 writers of one crossing at once (tokens of one user with different budgets, a repeated write): one fires it, one event', async () => {
    const project = (await getProject(gw.projectId))!;
    const fields = {
      projectId: gw.projectId,
      userId: `racer-${++seq}`,
      window: 'day',
      windowStart: '2026-01-01T00:00:00.000Z',
      meter: 'ai' as const,
      threshold: 80,
      used: 800,
      budget: 1000,
    };
    const fired = await Promise.all(
      Array.from({ length: 50 }, () =>
        fireAlert({ alert: { event: 'user.budget.threshold', fields }, owner: { projectId: gw.projectId }, target: project.alerts! }),
      ),
    );
    expect(fired.filter(Boolean)).toHaveLength(1);
    const [got] = await deliveries(1);
    expect(rx.requests).toHaveLength(1);
    expect(got!.body).toEqual({ type: 'user.budget.threshold', ...fields });
  });

  it('a failed attempt is retried by the webhook sender: the same webhook-id and bytes, every attempt recorded on the alert', async () => {
    const project = (await getProject(gw.projectId))!;
    const fields = {
      projectId: gw.projectId,
      userId: `retried-${++seq}`,
      window: 'day',
      windowStart: '2026-01-01T00:00:00.000Z',
      meter: 'compute' as const,
      threshold: 100,
      used: 60,
      budget: 60,
    };
    rx.answer({ status: 500 });
    expect(await fireAlert({ alert: { event: 'user.budget.threshold', fields }, owner: { projectId: gw.projectId }, target: project.alerts! })).toBe(true);
    const [first, second] = await deliveries(2);
    expect(second!.request.headers['webhook-id']).toBe(first!.request.headers['webhook-id']);
    expect(second!.request.text).toBe(first!.request.text);
    const alertId = String(first!.request.headers['webhook-id']).replace(/^msg_/, '');
    const shown = await alertWebhookOf(alertId);
    expect(shown.webhook.status).toBe('delivered');
    expect(shown.webhook.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([
      [1, 1, 500],
      [1, 2, 204],
    ]);

    // An operator's redelivery (`gateway webhook redeliver --alert`): round 2, the same webhook-id and bytes.
    rx.requests.length = 0;
    expect(await redeliverAlert(alertId)).toMatchObject({ alertId, round: 2 });
    const [again] = await deliveries(1);
    expect(again!.request.headers['webhook-id']).toBe(first!.request.headers['webhook-id']);
    expect(again!.request.text).toBe(first!.request.text);
    expect((await alertWebhookOf(alertId)).webhook.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([
      [1, 1, 500],
      [1, 2, 204],
      [2, 1, 204],
    ]);
  });

  it('a hold the sweep charges (a crashed call) fires the thresholds it crosses: the hold keeps its budget', { timeout: 30_000 }, async () => {
    const caller = { projectId: gw.projectId, userId: `crashed-${++seq}`, budget: { ai: 1_000, compute: 60, window: 'day' as const } };
    const start = Date.UTC(2031, 6, 1, 8);
    setClock(start);
    const held = await reserve({ caller, amounts: { ai: 900, compute: 0 }, enforce: ['ai'] });
    if (!held.ok) throw new Error('not reserved');
    expect(held.reservation.budget).toEqual({ ai: 1_000, compute: 60 });
    // Never settled: past its expiry, the sweep charges its worst case.
    setClock(start + (env().RESERVATION_TTL_SECONDS + 1) * 1000);
    expect(await sweepExpired(held.reservation.key)).toBe(1);
    const [got] = await deliveries(1);
    expect(got!.body).toEqual({
      type: 'user.budget.threshold',
      projectId: gw.projectId,
      userId: caller.userId,
      window: 'day',
      windowStart: '2031-07-01T00:00:00.000Z',
      meter: 'ai',
      threshold: 80,
      used: 900,
      budget: 1_000,
    });
  });
});
