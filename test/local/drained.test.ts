import { randomBytes } from 'node:crypto';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import { startGateway, type RunningGateway } from '../../bin/local/runtime.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';
import { drained, notDrained, startedSince } from '../support/drained.ts';
import { deliveries } from '../queues/fixtures/recording-consumer.ts';

/**
 * The local runtime's read-only `activity()` and the test helper built on it (test/support/drained.ts), which proves
 * "nothing more happens" instead of sleeping: it waits for what is due within the quiet time and for what is running,
 * and leaves alone what is due after it. A recording consumer takes the webhook sender's place, so the messages of
 * these tests are handled by a function that only records them (and fails a `{"fail": n}` body n times).
 */
let gw: RunningGateway;
let sqs: SQSClient;
const tag = randomBytes(4).toString('hex');
const bodies = () => deliveries().map((d) => d.body as { tag?: string; n?: string });
const delivered = (n: string) => bodies().filter((b) => b.tag === tag && b.n === n).length;

beforeAll(async () => {
  gw = await startGateway({
    dynamoEndpoint: inject('dynamoEndpoint'),
    tablePrefix: `drain${tag}`,
    simulateUpstreams: true,
    // The scheduled functions run once at start-up, then in an hour.
    scheduleIntervalMs: 3_600_000,
    functions: [
      ...FUNCTIONS.filter((f) => f.id !== 'WebhookSender'),
      {
        id: 'RecordingConsumer',
        entry: 'test/queues/fixtures/recording-consumer.ts',
        description: 'records deliveries',
        memoryMb: 256,
        timeoutSeconds: 30,
        trigger: { kind: 'sqs', queue: 'webhook' },
        access: { tables: {}, providers: false, queues: [] },
      },
    ],
  });
  sqs = sqsClient(gw.queues.endpoint);
  // The start-up runs of the scheduled functions over.
  await drained(gw, { quietMs: 1_000 });
});
afterAll(async () => {
  sqs?.destroy();
  await gw?.stop();
});

const send = (n: string, delaySeconds = 0, extra: Record<string, unknown> = {}) =>
  sqs.send(
    new SendMessageCommand({
      QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
      MessageBody: JSON.stringify({ tag, n, ...extra }),
      ...(delaySeconds ? { DelaySeconds: delaySeconds } : {}),
    }),
  );

describe('activity()', () => {
  it('names every consumed queue, the HTTP and WebSocket invocations and each scheduled function; counts grow', async () => {
    const a = gw.activity();
    expect(Object.keys(a.queues).sort()).toEqual(['run', 'turn', 'webhook']);
    expect(Object.keys(a.schedules).sort()).toEqual(['SessionSweeper', 'VesselReconciler']);
    for (const s of Object.values(a.schedules)) {
      expect(s.running).toBe(false);
      expect(s.started).toBe(1);
      expect(s.nextRunInMs).toBeGreaterThan(3_000_000);
    }
    expect(a.http.running).toBe(0);
    expect((await fetch(`${gw.url}/health`)).status).toBe(200);
    await startedSince(gw, a, 'http');
    expect(gw.activity().http.started).toBe(a.http.started + 1);

    // A scheduled function's run counts from the moment it is asked for.
    const run = gw.invokeScheduled('VesselReconciler');
    expect(gw.activity().schedules.VesselReconciler).toMatchObject({ running: true, started: 2 });
    expect(await notDrained(gw, 0)).toBe('VesselReconciler running');
    await run;
    expect(gw.activity().schedules.VesselReconciler).toMatchObject({ running: false, started: 2 });
  });
});

describe('drained', () => {
  it('waits for a delayed message due within the quiet time, until its batch has been handled', async () => {
    const before = gw.activity().queues.webhook!.received;
    await send('soon', 1);
    expect(await notDrained(gw, 3_000)).toMatch(/^a delayed message on the webhook queue \(.+\) is due in \d+ ms, within 3000 ms$/);
    await drained(gw, { quietMs: 3_000 });
    expect(delivered('soon')).toBe(1);
    expect(gw.activity().queues.webhook).toMatchObject({ received: before + 1, running: 0 });
    expect(await notDrained(gw, 3_000)).toBeUndefined();
  });

  it('leaves alone a delayed message due after the quiet time, as a sleep of that length would', async () => {
    await send('later', 2);
    expect(await notDrained(gw, 500)).toBeUndefined();
    expect(await notDrained(gw, 3_000)).toMatch(/delayed message on the webhook queue/);
    expect(delivered('later')).toBe(0);
    await drained(gw, { quietMs: 3_000 });
    expect(delivered('later')).toBe(1);
  });

  it('a failed message, given back, is due when its visibility timeout ends (6 × 30 s here): not before', async () => {
    await send('fails', 0, { fail: 1 });
    await drained(gw, { quietMs: 1_000 });
    expect(delivered('fails')).toBe(1);
    const released = gw.activity().queues.webhook!.released;
    expect(released.size).toBe(1);
    expect(await notDrained(gw, 60_000)).toBeUndefined();
    expect(await notDrained(gw, 200_000)).toMatch(/^a failed message on the webhook queue coming back \(.+\) is due in \d+ ms, within 200000 ms$/);
  });

  it("waits for a schedule of the scheduler stand-in due within the quiet time; another one's, later, is left alone", async () => {
    await gw.scheduler.schedule({
      name: `drain-soon-${tag}`,
      at: new Date(Date.now() + 1_500),
      body: JSON.stringify({ tag, n: 'scheduled' }),
      queue: 'webhook',
    });
    await gw.scheduler.schedule({ name: `drain-late-${tag}`, at: new Date(Date.now() + 600_000), body: JSON.stringify({ tag, n: 'late' }), queue: 'webhook' });
    try {
      expect(await notDrained(gw, 5_000)).toMatch(new RegExp(`^schedule drain-soon-${tag} is due in -?\\d+ ms, within 5000 ms$`));
      await drained(gw, { quietMs: 5_000 });
      expect(delivered('scheduled')).toBe(1);
      expect(gw.scheduler.pending().map((s) => s.name)).toContain(`drain-late-${tag}`);
      expect(delivered('late')).toBe(0);
    } finally {
      await gw.scheduler.cancel(`drain-late-${tag}`);
    }
  });

  it('fails, naming what is left, when the gateway does not get there in time', async () => {
    await send('slow', 2);
    await expect(drained(gw, { quietMs: 10_000, timeoutMs: 300 })).rejects.toThrow(
      /^the gateway did not drain \(for 10000 ms\) within 300 ms: a delayed message on the webhook queue/,
    );
    await drained(gw, { quietMs: 10_000 });
    expect(delivered('slow')).toBe(1);
  });
});
