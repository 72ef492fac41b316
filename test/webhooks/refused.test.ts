import { GetQueueAttributesCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import { setOutboundResolver, type ResolvedAddress } from '../../lambdas/outbound/fetch.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil, vesselRecord } from '../support/vessels.ts';
import { MODEL, vesselApi, vesselItems } from '../vessels/incubate-client.ts';
import { startReceiver, type Receiver } from './receiver.ts';

/**
 * Issue 15, done-when 3: a callback whose host name resolves to a private or metadata address is refused at delivery
 * (recorded as such: one attempt, no retry, nothing dead-lettered, nothing reaches the loopback receiver the name could
 * have meant), and a literal private or metadata IP is refused already at POST /incubate (and /incubate/batch) with a
 * 400. The gateway runs in this process, so `setOutboundResolver` is its DNS.
 */

vi.setConfig({ testTimeout: 90_000 });

let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let rx: Receiver;
let seq = 0;
const key = (what: string) => `wh-refused-${what}-${++seq}`;
const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;

/** Names this test's resolver answers, and what it answered for (so the test knows the replacement was used). */
const ANSWERS: Record<string, ResolvedAddress[]> = {
  'private.hooks.test': [{ address: '10.1.2.3', family: 4 }],
  'metadata.hooks.test': [{ address: '169.254.169.254', family: 4 }],
  // The receiver's own address first: a guard that looked at one address only would reach the receiver.
  'rebind.hooks.test': [
    { address: '127.0.0.1', family: 4 },
    { address: '10.1.2.3', family: 4 },
  ],
  // The control: the same setup with an allowed answer reaches the receiver.
  'loopback.hooks.test': [{ address: '127.0.0.1', family: 4 }],
};
const asked: string[] = [];

beforeAll(async () => {
  // A retry (were one made) would come 1 s after the refusal.
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1' } });
  api = vesselApi(gw);
  rx = await startReceiver({ default: { status: 200 } });
});
afterEach(() => {
  setOutboundResolver();
});
afterAll(async () => {
  setOutboundResolver();
  await rx?.close();
  await gw?.stop();
});

function useResolver() {
  // Set after the gateway started (its start resets instance state, the resolver with it).
  setOutboundResolver(async (hostname) => {
    asked.push(hostname);
    const answer = ANSWERS[hostname];
    if (!answer) throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    return answer;
  });
}

async function deadLetters(): Promise<{ count: number; bodies: string[] }> {
  const client = sqsClient(gw.queues.endpoint);
  try {
    const url = gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL;
    const attrs = await client.send(
      new GetQueueAttributesCommand({
        QueueUrl: url,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
      }),
    );
    const a = attrs.Attributes ?? {};
    const got = await client.send(new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, VisibilityTimeout: 0, WaitTimeSeconds: 1 }));
    return {
      count: Number(a.ApproximateNumberOfMessages) + Number(a.ApproximateNumberOfMessagesNotVisible) + Number(a.ApproximateNumberOfMessagesDelayed),
      bodies: (got.Messages ?? []).map((m) => m.Body ?? ''),
    };
  } finally {
    client.destroy();
  }
}

describe('at delivery: a name that resolves to a forbidden address', () => {
  for (const [host, address] of [
    ['private.hooks.test', '10.1.2.3'],
    ['metadata.hooks.test', '169.254.169.254'],
    ['rebind.hooks.test', '10.1.2.3'],
  ] as const) {
    it(`${host} (→ ${ANSWERS[host]!.map((a) => a.address).join(', ')}): refused and recorded, one attempt, no retry, no dead letter, nothing reaches the receiver`, async () => {
      useResolver();
      asked.length = 0;
      const token = await gw.token({ user: `refused-${++seq}` });
      const url = `http://${host}:${rx.port}/hook`;
      // A name is not visible at enqueue: accepted.
      const q = await incubate(gw.url, {
        message: 'Refused [[words:2]]',
        idempotencyKey: key(host),
        options: { token, model: MODEL },
        callback: { url, secret: 'refused-secret' },
      });
      const failed = await pollUntil(
        () => vesselRecord(gw.url, token, q.vesselId),
        (r) => r.webhook?.status === 'failed' || r.webhook?.status === 'delivered',
        {
          timeoutMs: 30_000,
          what: `refusal of ${host}`,
        },
      );
      const expected = {
        status: 'failed',
        failure: 'refused',
        attempts: [
          {
            round: 1,
            attempt: 1,
            time: expect.stringMatching(ISO),
            error: `refused: ${host} resolves to ${address}, which is not allowed`,
            durationMs: expect.any(Number),
          },
        ],
      };
      expect(failed.webhook).toEqual(expected);
      expect(asked).toContain(host); // the replaced resolver was the one asked

      // A retry would have come after 1 s: none (nothing running, nothing due for 3.5 s), the record stays as it is,
      // nothing is dead-lettered.
      await drained(gw, { quietMs: 3_500 });
      const after = await vesselRecord(gw.url, token, q.vesselId);
      expect(after.webhook).toEqual(failed.webhook);
      expect(await deadLetters()).toEqual({ count: 0, bodies: [] });
      expect(rx.requests).toEqual([]);
    });
  }
});

it('control: a name resolving to loopback only (allowed locally) reaches that receiver through the same resolver', async () => {
  useResolver();
  asked.length = 0;
  const token = await gw.token({ user: `control-${++seq}` });
  const url = `http://loopback.hooks.test:${rx.port}/hook`;
  const q = await incubate(gw.url, { message: 'Control [[words:2]]', idempotencyKey: key('control'), options: { token, model: MODEL }, callback: { url } });
  const done = await pollUntil(
    () => vesselRecord(gw.url, token, q.vesselId),
    (r) => r.webhook?.status === 'delivered' || r.webhook?.status === 'failed',
    { timeoutMs: 30_000, what: 'control delivery' },
  );
  expect(done.webhook).toEqual({
    status: 'delivered',
    attempts: [{ round: 1, attempt: 1, time: expect.stringMatching(ISO), statusCode: 200, durationMs: expect.any(Number) }],
  });
  expect(asked).toContain('loopback.hooks.test');
  expect(rx.requests).toHaveLength(1);
  expect(rx.requests[0]!.headers['webhook-id']).toBe(`msg_${q.vesselId}`);
  expect(rx.requests[0]!.headers.host).toBe(`loopback.hooks.test:${rx.port}`);
  rx.requests.length = 0;
});

describe('at enqueue: a literal private or metadata address is a 400, and no vessel is created', () => {
  const cases = [
    ['http://169.254.169.254/latest/meta-data/', 'callback.url is refused: address 169.254.169.254 is not allowed'],
    ['http://10.0.0.1/x', 'callback.url is refused: address 10.0.0.1 is not allowed'],
  ] as const;

  it('POST /incubate', async () => {
    const token = await gw.token({ user: `enqueue-${++seq}` });
    const keys: string[] = [];
    for (const [url, message] of cases) {
      const idempotencyKey = key('enqueue');
      keys.push(idempotencyKey);
      const res = await api.incubate({ message: 'hi', idempotencyKey, options: { token, model: MODEL }, callback: { url, secret: 's' } });
      expect({ status: res.status, body: res.body }).toEqual({ status: 400, body: { error: 'invalid_request', message } });
    }
    const stored = (await vesselItems(gw.projectId)).map((i) => i.idempotencyKey);
    for (const k of keys) expect(stored).not.toContain(k);
  });

  it('POST /incubate/batch', async () => {
    const token = await gw.token({ user: `enqueue-batch-${++seq}` });
    const keys: string[] = [];
    for (const [url, message] of cases) {
      const items = [0, 1].map(() => ({ message: 'hi', idempotencyKey: key('enqueue-batch') }));
      keys.push(...items.map((i) => i.idempotencyKey));
      const res = await api.batch({ items, options: { token, model: MODEL }, callback: { url } });
      expect({ status: res.status, body: res.body }).toEqual({ status: 400, body: { error: 'invalid_request', message } });
    }
    const stored = (await vesselItems(gw.projectId)).map((i) => i.idempotencyKey);
    for (const k of keys) expect(stored).not.toContain(k);
  });
});
