import {
  GetQueueAttributesCommand,
  PurgeQueueCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
  SendMessageCommand,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import type { StoredVessel } from '../../lambdas/vessels/record.ts';
import { INTERRUPTED_TEXT, reconcileVessels, type ReconcileReport } from '../../lambdas/vessels/reconciler.ts';
import { reconcileShardOf } from '../../lambdas/vessels/store.ts';
import { callbackBodyText } from '../../lambdas/webhooks/body.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { requestText, trackInFlight, type InFlightTracker } from '../support/inflight.ts';
import { incubate, pollUntil, vesselRecord } from '../support/vessels.ts';

/**
 * The reconciler (lambdas/vessels/reconciler.ts) against DynamoDB Local, fauxqs and the executor of a test gateway:
 * "the table is the source of truth, the queue only a trigger". reconcileVessels(now) is called directly with chosen
 * instants; the gateway's own reconciler runs only at start-up (its period is set to an hour). Vessels the reconciler
 * must find broken are made the way a crash leaves them: a trigger removed from the queue, or an item written as a
 * dead executor or an interrupted hand-off leaves it. A vessel whose execution died is ended FAILED, never run again
 * (a vessel runs at most once: docs/incubate.md, "The table is the source of truth").
 *
 * Every vessel's message carries its own tag (`rc-N`), so the simulated upstream's record says which vessels ran,
 * how often, and never two executions of one vessel at once (test/support/inflight.ts).
 *
 * The gateway runs without the webhook sender: the tests read the callback hand-offs off the webhook queue themselves
 * (delivery is test/webhooks/'s).
 */
const REDRIVE_SECONDS = 2;
let gw: TestGateway;
let token: string;
let sqs: SQSClient;
let tracker: InFlightTracker;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({
    scheduleIntervalMs: 3_600_000,
    env: { VESSEL_REDRIVE_AFTER_SECONDS: String(REDRIVE_SECONDS) },
    functions: FUNCTIONS.filter((f) => f.id !== 'WebhookSender'),
  });
  token = await gw.token({ user: 'reconciled', budget: { ai: 100_000_000, compute: 100_000 } });
  sqs = sqsClient(gw.queues.endpoint);
  tracker = trackInFlight(gw.upstreams.anthropic!, (r) => {
    const m = /\brc-\d+\b/.exec(requestText(r));
    return m ? { key: 'rc', tag: m[0] } : undefined;
  });
});
afterAll(async () => {
  tracker?.stop();
  sqs?.destroy();
  await gw?.stop();
});
beforeEach(() => {
  // One test's vessels are all ended before the next starts; none may ever have run twice at once.
  expect(tracker.maxPerTag().max).toBeLessThanOrEqual(1);
});

const table = () => process.env.VESSELS_TABLE!;
const calls = (tag: string) => tracker.intervals.filter((i) => i.tag === tag);
const nextTag = () => `rc-${++seq}`;

/** The item as stored, with the hand-off mark the end writes (lambdas/vessels/end.ts). */
type Item = StoredVessel & { callbackHandedOffAt?: number };

async function stored(vesselId: string): Promise<Item> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: { pk: `vessel#${vesselId}` }, ConsistentRead: true }));
  return out.Item as Item;
}

async function queueDepth(url: string): Promise<number> {
  const out = await sqs.send(
    new GetQueueAttributesCommand({
      QueueUrl: url,
      AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
    }),
  );
  const a = out.Attributes ?? {};
  return Number(a.ApproximateNumberOfMessages ?? 0) + Number(a.ApproximateNumberOfMessagesNotVisible ?? 0) + Number(a.ApproximateNumberOfMessagesDelayed ?? 0);
}

/** Every message now on the webhook queue (nothing consumes it here: the gateway runs without the webhook sender), removed. */
async function drainWebhooks(): Promise<Record<string, unknown>[]> {
  const got: Record<string, unknown>[] = [];
  for (;;) {
    const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }));
    if (!out.Messages?.length) return got;
    for (const m of out.Messages) {
      got.push(JSON.parse(m.Body!) as Record<string, unknown>);
      await sqs.send(new DeleteMessageCommand({ QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL, ReceiptHandle: m.ReceiptHandle! }));
    }
  }
}

const done = (vesselId: string) =>
  pollUntil(
    () => vesselRecord(gw.url, token, vesselId),
    (r) => r.isCompleted,
    { timeoutMs: 20_000, everyMs: 100, what: `vessel ${vesselId} ending` },
  );

const nothing: ReconcileReport = { redriven: 0, failed: 0, canceled: 0, handedOff: 0, deliveriesRedriven: 0 };

/**
 * A vessel as a crash would leave it: a real one, queued for later through POST /incubate (its schedule then
 * removed, so no trigger of its own is left), overwritten with `change` — e.g. EXECUTING under a dead execution.
 */
async function planted(tag: string, change: (v: StoredVessel) => Partial<StoredVessel>, body: Record<string, unknown> = {}): Promise<StoredVessel> {
  const q = await incubate(gw.url, {
    message: `${tag} [[latency:100]]`,
    idempotencyKey: tag,
    options: { token },
    executeAt: new Date(Date.now() + 3_600_000).toISOString(),
    ...body,
  });
  const v = await stored(q.vesselId);
  expect(v.scheduleName).toBeDefined();
  await gw.scheduler.cancel(v.scheduleName!);
  const { scheduleName: _, ...rest } = v;
  const item = { ...rest, ...change(v) } as StoredVessel;
  await documentClient().send(new PutCommand({ TableName: table(), Item: item }));
  return item;
}

/** An execution that died a while ago: its heartbeat (`reconcileAt`) lapsed 5 s before now. */
const deadExecution =
  (attempts: number, extra: Partial<StoredVessel> = {}) =>
  (v: StoredVessel): Partial<StoredVessel> => {
    const now = Date.now();
    return {
      status: 'EXECUTING',
      scheduledFor: now - 120_000,
      startedAt: now - 90_000,
      updatedAt: now - 65_000,
      attempts,
      runId: `dead-${v.vesselId}`,
      reconcileShard: reconcileShardOf(v.vesselId),
      reconcileAt: now - 5_000,
      ...extra,
    };
  };

describe('the reconciler', () => {
  it('re-drives a waiting vessel whose trigger was lost, once VESSEL_REDRIVE_AFTER_SECONDS have passed, and it runs', async () => {
    const tag = nextTag();
    const q = await incubate(gw.url, { message: `${tag} [[latency:100]]`, idempotencyKey: tag, options: { token }, ttl: 3 });
    // The trigger is lost: its delayed message is removed from the run queue before it is delivered.
    await sqs.send(new PurgeQueueCommand({ QueueUrl: gw.queues.urls.RUN_QUEUE_URL }));
    expect(await queueDepth(gw.queues.urls.RUN_QUEUE_URL)).toBe(0);
    const before = await stored(q.vesselId);
    expect(before).toMatchObject({ status: 'PENDING', reconcileAt: before.scheduledFor + REDRIVE_SECONDS * 1000 });

    // Not yet: due, but not past its grace.
    expect(await reconcileVessels(new Date(before.scheduledFor + REDRIVE_SECONDS * 1000 - 1))).toEqual(nothing);
    await new Promise((r) => setTimeout(r, before.scheduledFor + 4_000 - Date.now()));
    expect(await stored(q.vesselId)).toMatchObject({ status: 'PENDING', driveId: before.driveId, attempts: 0 });
    expect(calls(tag)).toHaveLength(0);

    // Past it: re-driven with a new trigger; the executor then runs it.
    const report = await reconcileVessels(new Date(before.scheduledFor + REDRIVE_SECONDS * 1000));
    expect(report).toEqual({ ...nothing, redriven: 1 });
    const redriven = await stored(q.vesselId);
    expect(redriven.driveId).not.toBe(before.driveId);
    const end = await done(q.vesselId);
    expect(end).toMatchObject({ status: 'COMPLETED', attempts: 1, output: { success: true, text: `Echo: ${tag}` } });
    expect(calls(tag)).toHaveLength(1);
    expect(await stored(q.vesselId)).not.toHaveProperty('reconcileAt');
    // An ended vessel without a callback has left the index: nothing more to do.
    expect(await reconcileVessels(new Date(Date.now() + 3_600_000))).toEqual(nothing);
  });

  it('a re-drive makes the earlier trigger stale: both messages arrive, the vessel runs once', async () => {
    const tag = nextTag();
    const q = await incubate(gw.url, { message: `${tag} [[latency:100]]`, idempotencyKey: tag, options: { token }, ttl: 3 });
    const before = await stored(q.vesselId);
    // The reconciler looks "from the future" while the first trigger is still on its way: a second trigger exists.
    expect(await reconcileVessels(new Date(before.scheduledFor + REDRIVE_SECONDS * 1000))).toEqual({ ...nothing, redriven: 1 });
    const end = await done(q.vesselId);
    expect(end).toMatchObject({ status: 'COMPLETED', attempts: 1 });
    await pollUntil(
      () => queueDepth(gw.queues.urls.RUN_QUEUE_URL),
      (n) => n === 0,
      { timeoutMs: 10_000, what: 'the run queue drained' },
    );
    expect(calls(tag)).toHaveLength(1);
  });

  it('ends an EXECUTING vessel whose execution stopped renewing it: FAILED, interrupted, never run again', async () => {
    const tag = nextTag();
    const v = await planted(tag, deadExecution(1));
    // Its heartbeat has not lapsed at an instant before reconcileAt.
    expect(await reconcileVessels(new Date(v.reconcileAt! - 1))).toEqual(nothing);
    const now = new Date();
    expect(await reconcileVessels(now)).toEqual({ ...nothing, failed: 1 });
    const end = await vesselRecord(gw.url, token, v.vesselId);
    expect(end).toMatchObject({
      status: 'FAILED',
      isCompleted: true,
      isFailed: true,
      isSuccess: false,
      attempts: 1,
      output: { success: false, text: INTERRUPTED_TEXT, result: { type: 'result', subtype: 'error_during_execution', total_cost_usd: 0 } },
    });
    expect(end.completedAt).toBeDefined();
    const after = await stored(v.vesselId);
    expect(after).not.toHaveProperty('reconcileAt');
    expect(after).not.toHaveProperty('runId');
    // Never run again: no trigger, no model call, and a second reconciler looking at what it read before changes nothing.
    await drained(gw, { quietMs: 1_000 });
    expect(calls(tag)).toHaveLength(0);
    expect(await queueDepth(gw.queues.urls.RUN_QUEUE_URL)).toBe(0);
    expect(await reconcileVessels(now)).toEqual(nothing);
  });

  it('the end is written once when three reconcilers race for the same dead execution', async () => {
    const tag = nextTag();
    const v = await planted(tag, deadExecution(1));
    const now = new Date();
    const reports = await Promise.all([reconcileVessels(now), reconcileVessels(now), reconcileVessels(now)]);
    expect(reports.reduce((n, r) => n + r.failed, 0)).toBe(1);
    expect(await vesselRecord(gw.url, token, v.vesselId)).toMatchObject({ status: 'FAILED', attempts: 1, output: { text: INTERRUPTED_TEXT } });
    await drained(gw, { quietMs: 500 });
    expect(calls(tag)).toHaveLength(0);
  });

  it('cancels an EXECUTING vessel whose execution died with a cancel waiting for it', async () => {
    const tag = nextTag();
    const v = await planted(tag, deadExecution(1, { cancelRequested: true }));
    expect(await reconcileVessels(new Date())).toEqual({ ...nothing, canceled: 1 });
    const end = await vesselRecord(gw.url, token, v.vesselId);
    expect(end).toMatchObject({
      status: 'CANCELED',
      isCompleted: true,
      isCanceled: true,
      isFailed: false,
      attempts: 1,
      output: { success: false, text: 'The vessel was canceled while it ran', result: { subtype: 'canceled' } },
    });
    expect(end).not.toHaveProperty('cancelRequested');
    await drained(gw, { quietMs: 1_000 });
    expect(calls(tag)).toHaveLength(0);
  });

  it('leaves alone an EXECUTING vessel whose execution is alive (heartbeat not lapsed)', async () => {
    const tag = nextTag();
    const v = await planted(tag, deadExecution(1, { reconcileAt: Date.now() + 60_000 }));
    expect(await reconcileVessels(new Date())).toEqual(nothing);
    expect(await stored(v.vesselId)).toMatchObject({ status: 'EXECUTING', runId: v.runId, driveId: v.driveId });
    // Clean up: as if it died after all.
    expect(await reconcileVessels(new Date(v.reconcileAt!))).toEqual({ ...nothing, failed: 1 });
    expect(await done(v.vesselId)).toMatchObject({ status: 'FAILED', attempts: 1, output: { text: INTERRUPTED_TEXT } });
  });

  it('drops a stale trigger (an older driveId) without running the vessel; the current trigger runs it', async () => {
    const tag = nextTag();
    // Due a minute ago, waiting, not to be reconciled for an hour: only a message can move it.
    const v = await planted(tag, () => ({ status: 'QUEUED', scheduledFor: Date.now() - 60_000, reconcileAt: Date.now() + 3_600_000 }));
    await sqs.send(
      new SendMessageCommand({ QueueUrl: gw.queues.urls.RUN_QUEUE_URL, MessageBody: JSON.stringify({ vesselId: v.vesselId, driveId: 'an-older-trigger' }) }),
    );
    await pollUntil(
      () => queueDepth(gw.queues.urls.RUN_QUEUE_URL),
      (n) => n === 0,
      { timeoutMs: 10_000, what: 'the stale message consumed' },
    );
    await drained(gw, { quietMs: 500 });
    const after = await stored(v.vesselId);
    expect(after).toMatchObject({ status: 'QUEUED', driveId: v.driveId, attempts: 0, updatedAt: v.updatedAt });
    expect(calls(tag)).toHaveLength(0);

    await sqs.send(
      new SendMessageCommand({ QueueUrl: gw.queues.urls.RUN_QUEUE_URL, MessageBody: JSON.stringify({ vesselId: v.vesselId, driveId: v.driveId }) }),
    );
    expect(await done(v.vesselId)).toMatchObject({ status: 'COMPLETED', attempts: 1 });
    expect(calls(tag)).toHaveLength(1);
  });

  it('hands off the callback of an ended vessel whose hand-off was interrupted, once; watches the pending delivery until it is settled', async () => {
    const tag = nextTag();
    const callback = { url: 'https://hooks.example.com/vessels', secret: 'whsec_reconciler' };
    const q = await incubate(gw.url, { message: `${tag} [[latency:100]]`, idempotencyKey: tag, options: { token }, callback });
    const ran = await done(q.vesselId);
    expect(ran).toMatchObject({ status: 'COMPLETED', callback: { url: callback.url, signed: true }, webhook: { status: 'pending', attempts: [] } });
    // The executor handed it off at the end: attempt 1 of round 1, nothing else in the message.
    const first = await pollUntil(drainWebhooks, (ms) => ms.length > 0, { timeoutMs: 5_000, what: "the executor's hand-off" });
    expect(first).toEqual([{ vesselId: q.vesselId, round: 1, attempt: 1 }]);
    // The hand-off is noted on the vessel just after the message is sent: wait for that write.
    const handed = await pollUntil(
      () => stored(q.vesselId),
      (v) => v.callbackHandedOffAt !== undefined,
      { timeoutMs: 5_000, everyMs: 50, what: 'the hand-off noted' },
    );
    expect(handed.webhook).toEqual({ status: 'pending', round: 1, tried: 0, attempts: [] });
    // Still watched while the delivery is pending, as its end left it: looked at VESSEL_REDRIVE_AFTER_SECONDS after it.
    expect(handed).toMatchObject({ reconcileShard: reconcileShardOf(q.vesselId), reconcileAt: handed.completedAt! + REDRIVE_SECONDS * 1000 });

    // As a crash between the end write and the hand-off leaves it: ended, still watched, not handed off.
    const { callbackHandedOffAt: _, ...rest } = handed;
    await documentClient().send(
      new PutCommand({ TableName: table(), Item: { ...rest, reconcileShard: reconcileShardOf(q.vesselId), reconcileAt: Date.now() - 1_000 } }),
    );
    const look = new Date();
    expect(await reconcileVessels(look)).toEqual({ ...nothing, handedOff: 1 });
    const messages = await drainWebhooks();
    // The same message as the executor's: the first attempt of the vessel's (only) round.
    expect(messages).toEqual([{ vesselId: q.vesselId, round: 1, attempt: 1 }]);
    expect(JSON.stringify(messages)).not.toContain(callback.secret);
    const after = await stored(q.vesselId);
    expect(after.callbackHandedOffAt).toBeDefined();
    expect(after).toMatchObject({ reconcileShard: reconcileShardOf(q.vesselId), reconcileAt: look.getTime() + REDRIVE_SECONDS * 1000 });
    // The delivery is still pending, untouched (nothing tried); the secret is stored encrypted only.
    expect(after.webhook).toEqual({ status: 'pending', round: 1, tried: 0, attempts: [] });
    expect(after.callback).toEqual({ url: callback.url, secretCiphertext: expect.any(String) });
    expect(JSON.stringify(after)).not.toContain(callback.secret);
    expect(await vesselRecord(gw.url, token, q.vesselId)).toMatchObject({ webhook: { status: 'pending', attempts: [] } });
    // What the sender will send, built from the vessel.
    expect(JSON.parse(callbackBodyText(after))).toEqual({
      success: true,
      text: `Echo: ${tag}`,
      result: { type: 'result', subtype: 'success', total_cost_usd: ran.output!.result.total_cost_usd, usage: ran.output!.result.usage },
      vesselId: q.vesselId,
      idempotencyKey: tag,
      status: 'COMPLETED',
    });
    // Handed off once. An hour later the delivery is still pending (nothing consumes the webhook queue here) and its
    // first attempt overdue, as if its message had been lost: the attempt is asked for again — once per look.
    const later = new Date(Date.now() + 3_600_000);
    expect(await reconcileVessels(later)).toEqual({ ...nothing, deliveriesRedriven: 1 });
    expect(await drainWebhooks()).toEqual([{ vesselId: q.vesselId, round: 1, attempt: 1 }]);
    expect(await stored(q.vesselId)).toMatchObject({ reconcileAt: later.getTime() + REDRIVE_SECONDS * 1000, callbackHandedOffAt: after.callbackHandedOffAt });
    expect(await reconcileVessels(later)).toEqual(nothing);
    expect(await drainWebhooks()).toEqual([]);
    expect(calls(tag)).toHaveLength(1);

    // Settled (here: delivered, as the sender would record it without taking it out of the index): it leaves the index.
    await documentClient().send(
      new PutCommand({
        TableName: table(),
        Item: { ...(await stored(q.vesselId)), webhook: { status: 'delivered', round: 1, tried: 1, attempts: [] }, reconcileAt: Date.now() - 1 },
      }),
    );
    expect(await reconcileVessels(new Date())).toEqual(nothing);
    const settled = await stored(q.vesselId);
    expect(settled).not.toHaveProperty('reconcileAt');
    expect(settled).not.toHaveProperty('reconcileShard');
    expect(await drainWebhooks()).toEqual([]);
  });

  it('the scheduled function (VesselReconciler) does the same as a direct call', async () => {
    const tag = nextTag();
    const v = await planted(tag, deadExecution(1));
    await gw.invokeScheduled('VesselReconciler');
    expect(await done(v.vesselId)).toMatchObject({ status: 'FAILED', attempts: 1, output: { text: INTERRUPTED_TEXT } });
    await drained(gw, { quietMs: 500 });
    expect(calls(tag)).toHaveLength(0);
  });
});
