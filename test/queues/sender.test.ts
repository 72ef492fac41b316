import { setTimeout as sleep } from 'node:timers/promises';
import { ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { sqsClient, startLocalQueues, type LocalQueues } from '../../bin/local/queues.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { queueClient, sqsQueueSender } from '../../lambdas/queues/sender.ts';

let queues: LocalQueues;
let reader: SQSClient;

beforeAll(async () => {
  queues = await startLocalQueues('sender');
  reader = sqsClient(queues.endpoint);
  vi.stubEnv('SQS_ENDPOINT', queues.endpoint);
  vi.stubEnv('RUN_QUEUE_URL', queues.urls.RUN_QUEUE_URL);
  vi.stubEnv('WEBHOOK_QUEUE_URL', queues.urls.WEBHOOK_QUEUE_URL);
  vi.stubEnv('AWS_REGION', 'us-east-1');
  resetInstanceState();
});

afterAll(async () => {
  vi.unstubAllEnvs();
  resetInstanceState();
  reader?.destroy();
  await queues?.stop();
});

async function receive(queueUrl: string, waitSeconds = 0) {
  const out = await reader.send(
    new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: waitSeconds, MessageSystemAttributeNames: ['All'] }),
  );
  return out.Messages ?? [];
}

describe('sqsQueueSender against the local fauxqs', () => {
  it('sends a JSON body to the queue QUEUES names and answers its message id', async () => {
    const sender = sqsQueueSender();
    const id = await sender.send('webhook', { vessel: 'v_1', url: 'https://example.com/hook', attempt: 1 });
    expect(id).toMatch(/\S/);
    const [message, ...rest] = await receive(queues.urls.WEBHOOK_QUEUE_URL);
    expect(rest).toEqual([]);
    expect(message).toMatchObject({ MessageId: id });
    expect(JSON.parse(message!.Body!)).toEqual({ vessel: 'v_1', url: 'https://example.com/hook', attempt: 1 });
    expect(await receive(queues.urls.RUN_QUEUE_URL)).toEqual([]);
  });

  it('delays delivery by delaySeconds', async () => {
    const sender = sqsQueueSender();
    const sentAt = Date.now();
    const id = await sender.send('run', { vessel: 'v_later' }, { delaySeconds: 2 });
    expect(await receive(queues.urls.RUN_QUEUE_URL)).toEqual([]);
    await sleep(1000);
    expect(await receive(queues.urls.RUN_QUEUE_URL)).toEqual([]);
    let got: Awaited<ReturnType<typeof receive>> = [];
    while (got.length === 0 && Date.now() - sentAt < 8000) got = await receive(queues.urls.RUN_QUEUE_URL, 1);
    expect(got.map((m) => m.MessageId)).toEqual([id]);
    expect(Date.now() - sentAt).toBeGreaterThanOrEqual(1900);
    expect(JSON.parse(got[0]!.Body!)).toEqual({ vessel: 'v_later' });
  });

  it('refuses a delay SQS cannot give, a body that is not JSON-serialisable, and a queue without a URL', async () => {
    const sender = sqsQueueSender();
    await expect(sender.send('run', {}, { delaySeconds: 901 })).rejects.toThrow(RangeError);
    await expect(sender.send('run', {}, { delaySeconds: 1.5 })).rejects.toThrow(/integer from 0 to 900/);
    await expect(sender.send('run', undefined)).rejects.toThrow(/JSON-serialisable/);
    vi.stubEnv('WEBHOOK_QUEUE_URL', undefined);
    resetInstanceState();
    try {
      await expect(sender.send('webhook', {})).rejects.toThrow('WEBHOOK_QUEUE_URL is not set');
    } finally {
      vi.stubEnv('WEBHOOK_QUEUE_URL', queues.urls.WEBHOOK_QUEUE_URL);
      resetInstanceState();
    }
  });

  it('its SQS client is instance state: resetInstanceState() makes a new one (a changed endpoint is picked up)', async () => {
    const first = queueClient();
    expect(queueClient()).toBe(first);
    resetInstanceState();
    const second = queueClient();
    expect(second).not.toBe(first);
    expect(await second.config.endpoint?.()).toMatchObject({ hostname: '127.0.0.1', port: Number(new URL(queues.endpoint).port) });
  });
});
