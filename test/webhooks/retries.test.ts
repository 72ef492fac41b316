import { createHmac } from 'node:crypto';
import { ChangeMessageVisibilityCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import type { VesselView } from '../../lambdas/vessels/record.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil, vesselRecord } from '../support/vessels.ts';
import { receiverPool, type ReceivedRequest } from './receiver.ts';

/**
 * Issue 15, done-when 2, end to end on the in-process local gateway (real HTTP to a node:http receiver, the webhook
 * queue on fauxqs, vessels in DynamoDB Local): retries with the same webhook-id, 410 stops for good, a 302 is not
 * followed and counts as a failure, a hanging receiver is cut at 10 s, Retry-After is honoured, and exhausted retries
 * land on the webhook dead-letter queue with the vessel's record saying `failed`.
 *
 * The schedule has its real shape (1 + 7 attempts) with every wait shortened to 1 s (WEBHOOK_RETRY_WAITS).
 *
 * The tests run concurrently: each has its own vessel and its own receiver (closed when the file ends), and what one
 * waits for (a retry wait, a quiet period proving that no further attempt comes) overlaps with the others' waits.
 */

const WAITS = '1,1,1,1,1,1,1';
const ATTEMPTS = 8;
const SECRET = "retry secret: It's a Secret to Everybody";
/** How long a test waits beyond the retry wait to show that no further request comes. */
const QUIET_MS = 4_000;

let gw: TestGateway;
let token: string;
let seq = 0;
const receivers = receiverPool();

beforeAll(async () => {
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: WAITS } });
  token = await gw.token({ user: 'webhook-retries' });
});
afterAll(async () => {
  await receivers.closeAll();
  await gw?.stop();
});

const receiver = () => receivers.start();

type Webhook = NonNullable<VesselView['webhook']>;

/** A vessel whose callback goes to `url` (signed with SECRET); answers its id once it has been queued. */
async function vesselCalling(url: string): Promise<string> {
  const q = await incubate(gw.url, {
    message: 'Callback [[words:2]]',
    idempotencyKey: `retries-${++seq}`,
    options: { token },
    callback: { url, secret: SECRET },
  });
  return q.vesselId;
}

const record = (vesselId: string) => vesselRecord(gw.url, token, vesselId);

/** The vessel's record once its delivery is `status` (generous: two cores shared with other test runs). */
async function recordWhen(vesselId: string, status: Webhook['status'], timeoutMs = 60_000): Promise<VesselView & { webhook: Webhook }> {
  const rec = await pollUntil(
    () => record(vesselId),
    (r) => r.webhook?.status === status,
    { timeoutMs, what: `webhook ${status}` },
  );
  return rec as VesselView & { webhook: Webhook };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The Standard Webhooks signature computed here, independently of the gateway's code. */
const standardSig = (id: string, ts: string, body: Buffer) =>
  `v1,${createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(`${id}.${ts}.`).update(body).digest('base64')}`;
const hexSig = (body: Buffer) => createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(body).digest('hex');

/** Every request is one attempt of `vesselId`'s delivery: same id, signatures valid for its own timestamp. */
function expectSignedAttempts(requests: ReceivedRequest[], vesselId: string): void {
  for (const req of requests) {
    expect(req.method).toBe('POST');
    expect(req.headers['webhook-id']).toBe(`msg_${vesselId}`);
    const ts = req.headers['webhook-timestamp'] as string;
    expect(ts).toMatch(/^\d+$/);
    // The timestamp is the attempt's own: within a few seconds of when it arrived.
    expect(Math.abs(Number(ts) * 1000 - req.at)).toBeLessThan(3_000);
    expect(req.headers['webhook-signature']).toBe(standardSig(`msg_${vesselId}`, ts, req.body));
    expect(req.headers['x-service-signature']).toBe(hexSig(req.body));
    expect(JSON.parse(req.text)).toMatchObject({ vesselId, status: 'COMPLETED', success: true });
  }
}

/**
 * Every message of the webhook dead-letter queue that is about `vesselId` (read until the queue has no message not
 * seen yet). The tests run concurrently and share the queue: another vessel's letter is made visible again at once.
 */
async function deadLettersOf(vesselId: string): Promise<unknown[]> {
  const sqs = sqsClient(gw.queues.endpoint);
  const QueueUrl = gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL;
  try {
    const found: unknown[] = [];
    const seen = new Set<string>();
    for (;;) {
      const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 120 }));
      const fresh = (out.Messages ?? []).filter((m) => !seen.has(m.MessageId!));
      if (fresh.length === 0) return found;
      for (const m of fresh) {
        seen.add(m.MessageId!);
        const body = JSON.parse(m.Body ?? 'null') as { vesselId?: string } | null;
        if (body?.vesselId === vesselId) found.push(body);
        else await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: m.ReceiptHandle!, VisibilityTimeout: 0 }));
      }
    }
  } finally {
    sqs.destroy();
  }
}

describe.concurrent('retries (WEBHOOK_RETRY_WAITS shortened to 1 s each)', () => {
  it('fails twice, then succeeds: exactly three attempts, same webhook-id and body bytes, each signed for its own timestamp', async () => {
    const rx = await receiver();
    rx.answer({ status: 500 }, { status: 500 });
    const vesselId = await vesselCalling(rx.url);

    const rec = await recordWhen(vesselId, 'delivered');
    const requests = await rx.waitFor(3);
    expect(requests).toHaveLength(3);
    expectSignedAttempts(requests, vesselId);
    // The same bytes each time.
    expect(requests[1]!.body.equals(requests[0]!.body)).toBe(true);
    expect(requests[2]!.body.equals(requests[0]!.body)).toBe(true);
    // Each attempt has its own timestamp (1 s apart at least): the signature is not reused.
    const stamps = requests.map((r) => Number(r.headers['webhook-timestamp']));
    expect(stamps[1]).toBeGreaterThan(stamps[0]!);
    expect(stamps[2]).toBeGreaterThan(stamps[1]!);
    expect(new Set(requests.map((r) => r.headers['webhook-signature'])).size).toBe(3);
    // Never earlier than the wait.
    expect(requests[1]!.at - requests[0]!.at).toBeGreaterThanOrEqual(1_000);
    expect(requests[2]!.at - requests[1]!.at).toBeGreaterThanOrEqual(1_000);

    expect(rec.webhook).toEqual({
      status: 'delivered',
      attempts: [
        { round: 1, attempt: 1, time: expect.any(String), statusCode: 500, durationMs: expect.any(Number) },
        { round: 1, attempt: 2, time: expect.any(String), statusCode: 500, durationMs: expect.any(Number) },
        { round: 1, attempt: 3, time: expect.any(String), statusCode: 204, durationMs: expect.any(Number) },
      ],
    });
    // Each recorded attempt is the request the receiver saw: sent just before it arrived.
    rec.webhook.attempts.forEach((a, i) => {
      const sent = Date.parse(a.time);
      expect(sent).toBeLessThanOrEqual(requests[i]!.at);
      expect(requests[i]!.at - sent).toBeLessThan(3_000);
    });

    // No fourth request.
    await sleep(QUIET_MS);
    expect(rx.requests).toHaveLength(3);
    expect((await record(vesselId)).webhook).toEqual(rec.webhook);
  }, 90_000);

  it('410 Gone: one request and no more; failed (gone); nothing on the dead-letter queue', async () => {
    const rx = await receiver();
    rx.answer({ status: 410 });
    const vesselId = await vesselCalling(rx.url);

    const rec = await recordWhen(vesselId, 'failed');
    expect(rec.webhook).toEqual({
      status: 'failed',
      failure: 'gone',
      attempts: [{ round: 1, attempt: 1, time: expect.any(String), statusCode: 410, durationMs: expect.any(Number) }],
    });
    // Well beyond the 1 s retry wait: still one request (the default answer, 204, would have delivered a retry).
    await sleep(QUIET_MS);
    expect(rx.requests).toHaveLength(1);
    expectSignedAttempts(rx.requests, vesselId);
    expect((await record(vesselId)).webhook).toEqual(rec.webhook);
    expect(await deadLettersOf(vesselId)).toEqual([]);
    expect((await getVessel(vesselId))?.webhook?.deadLetteredAt).toBeUndefined();
  }, 90_000);

  it('302 with a Location: not followed (the second receiver gets nothing), recorded as 302 and retried: delivered on attempt 2', async () => {
    const rx = await receiver();
    const elsewhere = await receiver();
    rx.answer({ status: 302, headers: { location: elsewhere.url } });
    const vesselId = await vesselCalling(rx.url);

    const rec = await recordWhen(vesselId, 'delivered');
    expect(rec.webhook).toEqual({
      status: 'delivered',
      attempts: [
        { round: 1, attempt: 1, time: expect.any(String), statusCode: 302, durationMs: expect.any(Number) },
        { round: 1, attempt: 2, time: expect.any(String), statusCode: 204, durationMs: expect.any(Number) },
      ],
    });
    expect(rx.requests).toHaveLength(2);
    expectSignedAttempts(rx.requests, vesselId);
    await sleep(QUIET_MS);
    expect(elsewhere.requests).toHaveLength(0);
    expect(rx.requests).toHaveLength(2);
  }, 90_000);

  it('a receiver that hangs is cut at 10 s ("timed out"), and the next attempt delivers', async () => {
    const rx = await receiver();
    rx.answer({ hang: true });
    const vesselId = await vesselCalling(rx.url);

    const rec = await recordWhen(vesselId, 'delivered', 90_000);
    expect(rec.webhook.status).toBe('delivered');
    expect(rec.webhook.attempts).toHaveLength(2);
    const [cut, ok] = rec.webhook.attempts;
    expect(cut).toEqual({ round: 1, attempt: 1, time: expect.any(String), error: expect.stringMatching(/^timed out/), durationMs: expect.any(Number) });
    expect(cut!.durationMs).toBeGreaterThanOrEqual(9_500);
    expect(cut!.durationMs).toBeLessThanOrEqual(12_500);
    expect(ok).toEqual({ round: 1, attempt: 2, time: expect.any(String), statusCode: 204, durationMs: expect.any(Number) });
    // The second attempt came after the cut plus the 1 s wait.
    expect(Date.parse(ok!.time) - Date.parse(cut!.time)).toBeGreaterThanOrEqual(cut!.durationMs + 1_000);
    expect(rx.requests).toHaveLength(2);
    expectSignedAttempts(rx.requests, vesselId);
    expect(rx.requests[1]!.body.equals(rx.requests[0]!.body)).toBe(true);
  }, 120_000);

  it('429 with Retry-After: 3 (the wait is 1 s): the next attempt comes at least 3 s later, as nextAttemptAt says', async () => {
    const rx = await receiver();
    rx.answer({ status: 429, headers: { 'retry-after': '3' } });
    const vesselId = await vesselCalling(rx.url);

    // While the retry waits, the record says when it is due.
    const waiting = await pollUntil(
      () => record(vesselId),
      (r) => (r.webhook?.status === 'pending' && r.webhook.attempts.length === 1) || r.webhook?.status === 'delivered',
      { timeoutMs: 60_000, everyMs: 100, what: 'first attempt recorded' },
    );
    expect(waiting.webhook?.status, 'the record was not seen pending between the attempts (polled every 100 ms over a 3 s wait)').toBe('pending');
    const first = waiting.webhook!.attempts[0]!;
    expect(first).toMatchObject({ round: 1, attempt: 1, statusCode: 429 });
    const nextAt = Date.parse((waiting.webhook as { nextAttemptAt?: string }).nextAttemptAt ?? 'missing');
    const sentAt = Date.parse(first.time);
    // Retry-After (3 s) wins over the 1 s wait, counted from when the answer came.
    expect(nextAt - sentAt).toBeGreaterThanOrEqual(3_000 + first.durationMs);
    expect(nextAt - sentAt).toBeLessThan(3_000 + first.durationMs + 2_000);

    const rec = await recordWhen(vesselId, 'delivered');
    expect(rec.webhook).toEqual({
      status: 'delivered',
      attempts: [
        { round: 1, attempt: 1, time: first.time, statusCode: 429, durationMs: first.durationMs },
        { round: 1, attempt: 2, time: expect.any(String), statusCode: 204, durationMs: expect.any(Number) },
      ],
    });
    const [a, b] = rx.requests;
    expect(rx.requests).toHaveLength(2);
    expect(b!.at - a!.at).toBeGreaterThanOrEqual(3_000);
    expect(b!.at).toBeGreaterThanOrEqual(nextAt);
    expect(Date.parse(rec.webhook.attempts[1]!.time)).toBeGreaterThanOrEqual(nextAt);
    expectSignedAttempts(rx.requests, vesselId);
  }, 90_000);

  it(`exhausted: a receiver that always answers 500 gets exactly ${ATTEMPTS} attempts, then failed (exhausted) and one dead letter`, async () => {
    const rx = await receiver();
    rx.setDefault({ status: 500 });
    const vesselId = await vesselCalling(rx.url);

    const rec = await recordWhen(vesselId, 'failed', 120_000);
    expect(rec.webhook).toEqual({
      status: 'failed',
      failure: 'exhausted',
      attempts: Array.from({ length: ATTEMPTS }, (_, i) => ({
        round: 1,
        attempt: i + 1,
        time: expect.any(String),
        statusCode: 500,
        durationMs: expect.any(Number),
      })),
    });
    expect(rx.requests).toHaveLength(ATTEMPTS);
    expectSignedAttempts(rx.requests, vesselId);
    for (let i = 1; i < ATTEMPTS; i++) {
      expect(rx.requests[i]!.body.equals(rx.requests[0]!.body)).toBe(true);
      expect(rx.requests[i]!.at - rx.requests[i - 1]!.at).toBeGreaterThanOrEqual(1_000);
    }

    // The stored vessel notes the dead letter.
    const stored = await pollUntil(
      () => getVessel(vesselId),
      (v) => v?.webhook?.deadLetteredAt !== undefined,
      { timeoutMs: 30_000, what: 'deadLetteredAt' },
    );
    expect(stored!.webhook).toMatchObject({ status: 'failed', failure: 'exhausted', round: 1, tried: ATTEMPTS, deadLetteredAt: expect.any(Number) });
    expect(stored!.webhook!.deadLetteredAt!).toBeGreaterThanOrEqual(Date.parse(rec.webhook.attempts.at(-1)!.time));

    // Exactly one dead letter, in the documented shape (read again if a concurrent test held it for a moment).
    const letters = await pollUntil(
      () => deadLettersOf(vesselId),
      (found) => found.length > 0,
      { timeoutMs: 30_000, what: 'the dead letter' },
    );
    expect(letters).toHaveLength(1);
    expect(letters[0]).toEqual({
      vesselId,
      projectId: gw.projectId,
      webhookId: `msg_${vesselId}`,
      url: rx.url,
      round: 1,
      attempts: rec.webhook.attempts.map((a) => ({ round: a.round, attempt: a.attempt, at: a.time, durationMs: a.durationMs, statusCode: 500 })),
      redeliver: `gateway webhook redeliver --vessel ${vesselId}`,
    });

    // And nothing more comes.
    await sleep(QUIET_MS);
    expect(rx.requests).toHaveLength(ATTEMPTS);
    expect((await record(vesselId)).webhook).toEqual(rec.webhook);
  }, 180_000);
});
