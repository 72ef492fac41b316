import { ReceiveMessageCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import type { StoredSchedule } from '../../bin/local/scheduler.ts';
import { queueClient } from '../../lambdas/queues/sender.ts';
import type { VesselView } from '../../lambdas/vessels/record.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { sendWebhookMessage } from '../../lambdas/deliveries/message.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil, vesselRecord } from '../support/vessels.ts';
import { receiverPool } from './receiver.ts';
import { setClock } from '../support/clock.ts';

/**
 * Issue 15: retries after waits over 15 minutes go through the scheduler (docs/webhooks.md, "Retries"), tested on the
 * in-process local gateway without waiting hours. The schedule is 1 s, 20 min, 10 h (WEBHOOK_RETRY_WAITS), so attempt
 * 2 is an SQS delay and attempts 3 and 4 are schedules of the scheduler stand-in (`gw.scheduler`).
 *
 * Time is moved as in test/vessels/scheduling.test.ts: only `Date` is replaced (real time plus an offset), so the
 * handlers, fauxqs and the scheduler stand-in all see the moved clock while timers stay real.
 */
const WAITS = '1,1200,36000';
const MINUTE = 60_000;

let gw: TestGateway;
let token: string;
let seq = 0;
const receivers = receiverPool();

beforeAll(async () => {
  // The reconciler runs once at start-up and then only when asked: a clock moved hours ahead must not make it
  // re-drive anything behind the test's back.
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: WAITS }, scheduleIntervalMs: 3_600_000 });
  // Valid on the moved clock too (it moves about 20 hours at most).
  token = await gw.token({ user: 'webhook-long-waits', expiresInSeconds: 3 * 24 * 3600 });
});
afterEach(async () => {
  vi.unstubAllGlobals();
  vi.restoreAllMocks();
  await receivers.closeAll();
});
afterAll(async () => {
  await gw?.stop();
});

const receiver = () => receivers.start();

type Webhook = NonNullable<VesselView['webhook']> & { nextAttemptAt?: string };
const record = async (vesselId: string) => (await vesselRecord(gw.url, token, vesselId)).webhook as Webhook | undefined;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** An epoch-ms time as a schedule's `at`: EventBridge's at() has whole seconds only. */
const toTheSecond = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString();

async function vesselCalling(url: string): Promise<string> {
  const q = await incubate(gw.url, {
    message: 'Later [[words:2]]',
    idempotencyKey: `long-${++seq}`,
    options: { token },
    callback: { url, secret: 'long-wait-secret' },
  });
  return q.vesselId;
}

/** The schedule of attempt `attempt` of round 1 of `vesselId`, once it exists. */
async function scheduleOf(vesselId: string, attempt: number): Promise<StoredSchedule> {
  const name = `webhook-${vesselId}-1-${attempt}`;
  await pollUntil(
    async () => gw.scheduler.pending().find((s) => s.name === name),
    (s) => s !== undefined,
    { timeoutMs: 30_000, what: `schedule ${name}` },
  );
  return gw.scheduler.pending().find((s) => s.name === name)!;
}

const schedulesOf = (vesselId: string) => gw.scheduler.pending().filter((s) => s.name.startsWith(`webhook-${vesselId}-`));

/** The record once it shows `n` attempts and what came after the last. */
function recordAfter(vesselId: string, n: number, status: Webhook['status'], timeoutMs = 60_000): Promise<Webhook> {
  return pollUntil(
    () => record(vesselId),
    (w) => w?.attempts.length === n && w.status === status && (status !== 'pending' || w.nextAttemptAt !== undefined),
    {
      timeoutMs,
      what: `${n} attempts, ${status}`,
    },
  ) as Promise<Webhook>;
}

/** Fires what is due at `now` (the stand-in's own timer may be firing at that moment: then ask again). */
async function fire(now: Date): Promise<void> {
  for (let i = 0; i < 20; i++) {
    if ((await gw.scheduler.fireDue(now)) > 0) return;
    await sleep(100);
  }
}

/** A far attempt's schedule: named after it, at its due time to the second, onto the webhook queue, with its message. */
function expectScheduleFor(s: StoredSchedule, vesselId: string, attempt: number, notBefore: number): void {
  expect(s).toEqual({
    name: `webhook-${vesselId}-1-${attempt}`,
    at: toTheSecond(notBefore),
    body: expect.any(String),
    queueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
  });
  expect(JSON.parse(s.body)).toEqual({ vesselId, round: 1, attempt, notBefore });
}

describe('waits over 15 minutes: the scheduler', () => {
  it('1 s, 20 min, 10 h: attempt 3 and 4 are schedules that fire on the moved clock; then exhausted and dead-lettered', async () => {
    const rx = await receiver();
    rx.setDefault({ status: 500 });
    const vesselId = await vesselCalling(rx.url);

    // Attempts 1 and 2 (1 s apart, an SQS delay); after attempt 2 the record is pending for 20 minutes.
    const afterTwo = await recordAfter(vesselId, 2, 'pending');
    expect(rx.requests).toHaveLength(2);
    const second = afterTwo.attempts[1]!;
    expect(second).toMatchObject({ round: 1, attempt: 2, statusCode: 500 });
    const due3 = Date.parse(afterTwo.nextAttemptAt!);
    // 1200 s from when attempt 2's answer came.
    expect(due3 - Date.parse(second.time)).toBeGreaterThanOrEqual(1_200_000 + second.durationMs);
    expect(due3 - Date.parse(second.time)).toBeLessThan(1_200_000 + second.durationMs + 2_000);

    const s3 = await scheduleOf(vesselId, 3);
    expectScheduleFor(s3, vesselId, 3, due3);
    // At attempt 2's time + 1200 s, to the second.
    expect(Date.parse(s3.at) - Date.parse(second.time)).toBeGreaterThanOrEqual(1_200_000 - 1_000);
    expect(Date.parse(s3.at) - Date.parse(second.time)).toBeLessThan(1_200_000 + second.durationMs + 2_000);
    expect(schedulesOf(vesselId)).toHaveLength(1);
    // No attempt comes by SQS meanwhile: nothing running, nothing due for 3 s (the schedule is 20 minutes ahead).
    await drained(gw, { quietMs: 3_000 });
    expect(rx.requests).toHaveLength(2);

    // 20 minutes later: the schedule fires, attempt 3 is made (and fails).
    setClock(due3 + 500);
    await fire(new Date());
    await rx.waitFor(3, 30_000);
    const afterThree = await recordAfter(vesselId, 3, 'pending');
    const third = afterThree.attempts[2]!;
    expect(third).toMatchObject({ round: 1, attempt: 3, statusCode: 500 });
    expect(Date.parse(third.time)).toBeGreaterThanOrEqual(due3);
    expect(rx.requests[2]!.at).toBeGreaterThanOrEqual(due3);
    expect(rx.requests[2]!.body.equals(rx.requests[0]!.body)).toBe(true);
    expect(rx.requests[2]!.headers['webhook-id']).toBe(`msg_${vesselId}`);
    // The moved clock is the attempt's timestamp.
    expect(Math.abs(Number(rx.requests[2]!.headers['webhook-timestamp']) * 1000 - rx.requests[2]!.at)).toBeLessThan(3_000);

    // Then attempt 4, about 10 hours later: another schedule.
    const due4 = Date.parse(afterThree.nextAttemptAt!);
    expect(due4 - Date.parse(third.time)).toBeGreaterThanOrEqual(36_000_000 + third.durationMs);
    expect(due4 - Date.parse(third.time)).toBeLessThan(36_000_000 + third.durationMs + 2_000);
    const s4 = await scheduleOf(vesselId, 4);
    expectScheduleFor(s4, vesselId, 4, due4);
    expect(schedulesOf(vesselId).map((s) => s.name)).toEqual([`webhook-${vesselId}-1-4`]);
    await drained(gw, { quietMs: 2_000 });
    expect(rx.requests).toHaveLength(3);

    // 10 hours later: attempt 4, the last of this schedule, fails: exhausted, on the dead-letter queue.
    setClock(due4 + 500);
    await fire(new Date());
    await rx.waitFor(4, 30_000);
    const failed = await recordAfter(vesselId, 4, 'failed');
    expect(failed).toEqual({
      status: 'failed',
      failure: 'exhausted',
      attempts: [1, 2, 3, 4].map((attempt) => ({ round: 1, attempt, time: expect.any(String), statusCode: 500, durationMs: expect.any(Number) })),
    });
    expect(Date.parse(failed.attempts[3]!.time)).toBeGreaterThanOrEqual(due4);
    const stored = await pollUntil(
      () => getVessel(vesselId),
      (v) => v?.webhook?.deadLetteredAt !== undefined,
      { timeoutMs: 30_000, what: 'deadLetteredAt' },
    );
    expect(stored!.webhook!.deadLetteredAt!).toBeGreaterThanOrEqual(due4);

    const sqs = sqsClient(gw.queues.endpoint);
    try {
      const letters: unknown[] = [];
      for (;;) {
        const out = await sqs.send(
          new ReceiveMessageCommand({ QueueUrl: gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }),
        );
        if (!out.Messages?.length) break;
        for (const m of out.Messages) {
          const body = JSON.parse(m.Body!) as { vesselId?: string };
          if (body.vesselId === vesselId) letters.push(body);
        }
      }
      expect(letters).toEqual([
        {
          vesselId,
          projectId: gw.projectId,
          webhookId: `msg_${vesselId}`,
          url: rx.url,
          round: 1,
          attempts: failed.attempts.map((a) => ({ round: 1, attempt: a.attempt, at: a.time, durationMs: a.durationMs, statusCode: 500 })),
          redeliver: `gateway webhook redeliver --vessel ${vesselId}`,
        },
      ]);
    } finally {
      sqs.destroy();
    }
    // Nothing further is scheduled, nothing further arrives.
    expect(schedulesOf(vesselId)).toEqual([]);
    await drained(gw, { quietMs: 2_000 });
    expect(rx.requests).toHaveLength(4);
  }, 180_000);

  it('a schedule that fires early is put back: no attempt before its time; the attempt comes once the time has come', async () => {
    const rx = await receiver();
    rx.answer({ status: 500 }, { status: 500 });
    const vesselId = await vesselCalling(rx.url);

    const afterTwo = await recordAfter(vesselId, 2, 'pending');
    const due3 = Date.parse(afterTwo.nextAttemptAt!);
    const s3 = await scheduleOf(vesselId, 3);
    expectScheduleFor(s3, vesselId, 3, due3);

    // Fired about 20 minutes early (the clock is not moved): the sender gets the message and schedules it again.
    await fire(new Date(s3.at));
    const again = await pollUntil(
      async () => gw.scheduler.pending().find((s) => s.name === s3.name),
      (s) => s !== undefined && s !== s3,
      {
        timeoutMs: 30_000,
        what: 'the early message put back as a schedule',
      },
    );
    expectScheduleFor(again!, vesselId, 3, due3);
    expect(schedulesOf(vesselId)).toHaveLength(1);
    await drained(gw, { quietMs: 3_000 });
    expect(rx.requests).toHaveLength(2);
    expect(await record(vesselId)).toEqual(afterTwo);

    // The schedule fires to the second, so up to a second before the attempt is due: put back for the rest (an SQS
    // delay), and made no earlier than due.
    setClock(Date.parse(again!.at));
    await fire(new Date());
    await rx.waitFor(3, 30_000);
    expect(rx.requests[2]!.at).toBeGreaterThanOrEqual(due3);
    const delivered = await recordAfter(vesselId, 3, 'delivered');
    expect(delivered).toEqual({
      status: 'delivered',
      attempts: [
        { round: 1, attempt: 1, time: expect.any(String), statusCode: 500, durationMs: expect.any(Number) },
        { round: 1, attempt: 2, time: expect.any(String), statusCode: 500, durationMs: expect.any(Number) },
        { round: 1, attempt: 3, time: expect.any(String), statusCode: 204, durationMs: expect.any(Number) },
      ],
    });
    expect(Date.parse(delivered.attempts[2]!.time)).toBeGreaterThanOrEqual(due3);
    expect(schedulesOf(vesselId)).toEqual([]);
    await drained(gw, { quietMs: 2_000 });
    expect(rx.requests).toHaveLength(3);
  }, 120_000);
});

describe('sendWebhookMessage: an SQS delay within 15 minutes, a schedule beyond', () => {
  /** The webhook-queue sends of this process's SQS client that carry `vesselId`. */
  function spySends(vesselId: string) {
    const spy = vi.spyOn(queueClient(), 'send');
    return () =>
      spy.mock.calls
        .map(([command]) => command as unknown)
        .filter((c): c is SendMessageCommand => c instanceof SendMessageCommand && (c.input.MessageBody ?? '').includes(vesselId))
        .map((c) => c.input);
  }

  it('14 minutes ahead: a delayed message (840 s), no schedule; exactly 15 minutes: still a delay (900 s)', async () => {
    const vesselId = `unit-near-${Date.now()}`;
    const sends = spySends(vesselId);
    const now = Date.now();
    await sendWebhookMessage({ vesselId, round: 1, attempt: 2, notBefore: now + 14 * MINUTE }, now);
    await sendWebhookMessage({ vesselId, round: 1, attempt: 3, notBefore: now + 15 * MINUTE }, now);
    expect(sends()).toEqual([
      {
        QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
        MessageBody: JSON.stringify({ vesselId, round: 1, attempt: 2, notBefore: now + 14 * MINUTE }),
        DelaySeconds: 840,
      },
      {
        QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
        MessageBody: JSON.stringify({ vesselId, round: 1, attempt: 3, notBefore: now + 15 * MINUTE }),
        DelaySeconds: 900,
      },
    ]);
    expect(schedulesOf(vesselId)).toEqual([]);
  });

  it('16 minutes ahead: a schedule named after the attempt; handing it off twice does not throw and leaves one schedule', async () => {
    const vesselId = `unit-far-${Date.now()}`;
    const sends = spySends(vesselId);
    const now = Date.now();
    const notBefore = now + 16 * MINUTE + 123;
    const message = { vesselId, round: 1, attempt: 5, notBefore };
    try {
      await sendWebhookMessage(message, now);
      await expect(sendWebhookMessage(message, now)).resolves.toBeUndefined();
      expect(sends()).toEqual([]);
      const mine = schedulesOf(vesselId);
      expect(mine).toHaveLength(1);
      expect(mine[0]).toEqual({
        name: `webhook-${vesselId}-1-5`,
        at: toTheSecond(notBefore),
        body: expect.any(String),
        queueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
      });
      expect(JSON.parse(mine[0]!.body)).toEqual(message);
    } finally {
      await gw.scheduler.cancel(`webhook-${vesselId}-1-5`);
    }
  });
});
