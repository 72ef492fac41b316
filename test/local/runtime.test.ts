import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import { CreateQueueCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { LambdaFunctionURLEvent, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { installAwsLambdaShim, isStreamingHandler } from '../../bin/local/awslambda-shim.ts';
import { functionUrlEvent, readBody } from '../../bin/local/events.ts';
import { pollQueue, sqsClient, sqsRecord, startLocalQueues, succeededMessages, type LocalQueues } from '../../bin/local/queues.ts';
import { invokeStreaming, localFunctions, rateIntervalMs, startGateway } from '../../bin/local/runtime.ts';
import { LocalScheduler } from '../../bin/local/scheduler.ts';
import { isScheduleConflict, scheduler } from '../../lambdas/scheduling/scheduler.ts';
import { concurrentConsumer } from './fixtures/concurrent-consumer.ts';
import { scheduledRecorder } from './fixtures/scheduled-recorder.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';
import { sqsQueueSender } from '../../lambdas/queues/sender.ts';
import { QUEUES } from '../../lambdas/store/queues.ts';
import { deliveries } from '../queues/fixtures/recording-consumer.ts';
import { createDeveloper, createProject, getDeveloper, getProject, providerKeyFor, setProviderKey } from '../../lambdas/registry/registry.ts';

const tmpDirs: string[] = [];
function tmp(): string {
  const dir = mkdtempSync(join(tmpdir(), 'gw-runtime-'));
  tmpDirs.push(dir);
  return dir;
}
afterAll(() => {
  for (const d of tmpDirs) rmSync(d, { recursive: true, force: true });
});

async function until(cond: () => boolean, timeoutMs = 8000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await sleep(25);
  }
}

function serve(
  handler: (req: import('node:http').IncomingMessage, res: import('node:http').ServerResponse) => Promise<void>,
): Promise<{ url: string; server: Server }> {
  const server = createServer((req, res) => void handler(req, res));
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, server })),
  );
}
const close = (server: Server) =>
  new Promise<void>((r) => {
    server.close(() => r());
    server.closeAllConnections();
  });

describe('streaming through the local function-URL adapter', () => {
  let url: string;
  let server: Server;
  const produced: number[] = [];
  let seenEvent: LambdaFunctionURLEvent | undefined;

  beforeAll(async () => {
    installAwsLambdaShim();
    const handler = middy<LambdaFunctionURLEvent>({ executionMode: executionModeStreamifyResponse }).handler(async (event) => {
      seenEvent = event;
      if (event.rawPath === '/boom') throw new Error('fails before the prelude');
      async function* sse() {
        for (let i = 1; i <= 5; i++) {
          if (i > 1) await sleep(60);
          produced.push(performance.now());
          yield `event: tick\ndata: {"n":${i}}\n\n`;
        }
      }
      return { statusCode: 200, headers: { 'content-type': 'text/event-stream', 'x-custom': 'yes' }, body: Readable.from(sse()) };
    });
    expect(isStreamingHandler(handler)).toBe(true);
    ({ url, server } = await serve(async (req, res) => {
      if (req.url === '/plain') {
        await invokeStreaming(async () => undefined, functionUrlEvent(req, (await readBody(req, 1 << 20))!.body), res, 'plain').catch((err: Error) => {
          res.writeHead(500);
          res.end(err.message);
        });
        return;
      }
      await invokeStreaming(handler, functionUrlEvent(req, (await readBody(req, 1 << 20))!.body), res, 'test');
    }));
  });
  afterAll(async () => {
    await close(server);
  });

  it('delivers each SSE event when it is produced, not all at the end', async () => {
    produced.length = 0;
    const started = performance.now();
    const res = await fetch(`${url}/stream?x=1`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', cookie: 'a=1; b=2' },
      body: '{"hello":"world"}',
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('x-custom')).toBe('yes');
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    const received: { n: number; at: number }[] = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let idx = buffer.indexOf('\n\n');
      while (idx >= 0) {
        const frame = buffer.slice(0, idx);
        buffer = buffer.slice(idx + 2);
        const data = /^data: (.*)$/m.exec(frame)?.[1];
        received.push({ n: (JSON.parse(data!) as { n: number }).n, at: performance.now() });
        idx = buffer.indexOf('\n\n');
      }
    }
    expect(received.map((r) => r.n)).toEqual([1, 2, 3, 4, 5]);
    expect(produced).toHaveLength(5);
    // spread over the production time (4 gaps × 60 ms), each at a distinct moment
    expect(received[4]!.at - received[0]!.at).toBeGreaterThanOrEqual(200);
    for (let i = 1; i < 5; i++) expect(received[i]!.at - received[i - 1]!.at).toBeGreaterThan(20);
    // the first event arrived well before the last one was even produced
    expect(produced[4]! - received[0]!.at).toBeGreaterThanOrEqual(150);
    expect(received[0]!.at - started).toBeLessThan(produced[4]! - started);

    // and the handler saw a proper function-URL event
    expect(seenEvent).toMatchObject({
      version: '2.0',
      rawPath: '/stream',
      rawQueryString: 'x=1',
      queryStringParameters: { x: '1' },
      cookies: ['a=1', 'b=2'],
      body: '{"hello":"world"}',
      isBase64Encoded: false,
      requestContext: { http: { method: 'POST', path: '/stream' } },
    });
    expect(seenEvent!.headers.cookie).toBeUndefined();
    expect(seenEvent!.headers['content-type']).toBe('application/json');
  });

  it('a failure before the prelude answers 502 as Lambda does', async () => {
    const res = await fetch(`${url}/boom`);
    expect(res.status).toBe(502);
    expect(await res.json()).toEqual({ message: 'Internal Server Error' });
  });

  it('refuses a handler that is not a streaming handler', async () => {
    const res = await fetch(`${url}/plain`);
    expect(res.status).toBe(500);
    expect(await res.text()).toBe('plain is not a streaming handler');
  });

  it('binary bodies arrive base64-encoded in the event', async () => {
    await fetch(`${url}/bin`, { method: 'POST', headers: { 'content-type': 'application/octet-stream' }, body: new Uint8Array([0, 1, 2, 255]) }).then((r) =>
      r.text(),
    );
    expect(seenEvent).toMatchObject({ isBase64Encoded: true, body: Buffer.from([0, 1, 2, 255]).toString('base64') });
  });
});

// The restart case waits on two DynamoDB Local (Java) starts; the queue cases run beside it.
describe.concurrent('startGateway with a data directory', () => {
  it('keeps the store and the provider-key key across a restart; /health answers', async () => {
    const dataDir = tmp();
    const first = await startGateway({ dataDir, tablePrefix: 'persist', simulateUpstreams: true });
    let project: Awaited<ReturnType<typeof createProject>>;
    try {
      const health = await fetch(`${first.url}/health`);
      expect(health.status).toBe(200);
      expect(await health.json()).toEqual({ status: 'ok' });
      const runtime = JSON.parse(readFileSync(join(dataDir, 'runtime.json'), 'utf8')) as Record<string, unknown>;
      expect(runtime).toMatchObject({ url: first.url, pid: process.pid, dynamoEndpoint: first.dynamoEndpoint, keyFile: join(dataDir, 'provider-keys.key') });
      expect(first.tables.REGISTRY_TABLE).toBe('persist-registry');
      await createDeveloper({ developerId: 'dev-persist', planSeconds: 3_600_000, poolSeconds: 10 });
      project = await createProject({ developerId: 'dev-persist', projectId: 'prj_persist' });
      await setProviderKey(project.projectId, 'openai', 'sk-persisted-key');
    } finally {
      await first.stop();
    }
    expect(existsSync(join(dataDir, 'runtime.json'))).toBe(false);
    await expect(fetch(`${first.url}/health`)).rejects.toThrow();

    const second = await startGateway({ dataDir, tablePrefix: 'persist', simulateUpstreams: true });
    try {
      expect(second.dynamoEndpoint).not.toBe(first.dynamoEndpoint);
      expect((await fetch(`${second.url}/health`)).status).toBe(200);
      expect(await getDeveloper('dev-persist')).toMatchObject({ developerId: 'dev-persist', planSeconds: 3_600_000, poolSeconds: 10 });
      const again = await getProject('prj_persist');
      expect(again?.secret).toBe(project.secret);
      expect(await providerKeyFor(again!, 'openai')).toBe('sk-persisted-key');
      // the second start did not recreate (or fail on) the existing tables
      await expect(createDeveloper({ developerId: 'dev-persist', planSeconds: 1 })).rejects.toThrow('Developer dev-persist already exists');
    } finally {
      await second.stop();
    }
    // Two DynamoDB Local (Java) starts: about 10 s on an idle machine, past vitest's 30 s on a loaded CI one.
  }, 120_000);
});

describe.concurrent('local SQS (fauxqs) and the event-source poller', () => {
  let queues: LocalQueues;
  let sqs: SQSClient;

  beforeAll(async () => {
    queues = await startLocalQueues('rt');
    sqs = sqsClient(queues.endpoint);
  });
  afterAll(async () => {
    sqs?.destroy();
    await queues?.stop();
  });

  async function queueWithShortVisibility(name: string): Promise<string> {
    const out = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: '1' } }));
    return out.QueueUrl!;
  }
  async function depth(queueUrl: string): Promise<{ visible: number; inFlight: number }> {
    const out = await sqs.send(
      new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
    );
    return { visible: Number(out.Attributes?.ApproximateNumberOfMessages), inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible) };
  }
  async function until(cond: () => boolean, timeoutMs = 8000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!cond()) {
      if (Date.now() > deadline) throw new Error('timed out waiting');
      await sleep(25);
    }
  }

  it('startLocalQueues declares the run, webhook and turn queues', async () => {
    expect(Object.keys(queues.urls).sort()).toEqual(['RUN_QUEUE_URL', 'TURN_QUEUE_URL', 'WEBHOOK_QUEUE_URL']);
    expect(queues.urls.RUN_QUEUE_URL).toMatch(/rt-run$/);
    expect(queues.urls.WEBHOOK_QUEUE_URL).toMatch(/rt-webhook$/);
    expect(queues.urls.TURN_QUEUE_URL).toMatch(/rt-turn$/);
    // Each queue's dead-letter queue, under the variable a function allowed to send there reads.
    expect(Object.keys(queues.deadLetterUrls).sort()).toEqual(['RUN_DEAD_LETTER_QUEUE_URL', 'TURN_DEAD_LETTER_QUEUE_URL', 'WEBHOOK_DEAD_LETTER_QUEUE_URL']);
    expect(queues.deadLetterUrls.RUN_DEAD_LETTER_QUEUE_URL).toMatch(/rt-run-dlq$/);
    expect(queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL).toMatch(/rt-webhook-dlq$/);
    expect(queues.deadLetterUrls.TURN_DEAD_LETTER_QUEUE_URL).toMatch(/rt-turn-dlq$/);
    expect(queues.arns).toEqual({
      run: 'arn:aws:sqs:us-east-1:000000000000:rt-run',
      webhook: 'arn:aws:sqs:us-east-1:000000000000:rt-webhook',
      turn: 'arn:aws:sqs:us-east-1:000000000000:rt-turn',
    });
    // visibility as in the stack: 6 × the queue's consumer timeout (QUEUES); the redrive to that very dead-letter queue
    for (const spec of QUEUES) {
      const out = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queues.urls[spec.envVar], AttributeNames: ['VisibilityTimeout', 'RedrivePolicy'] }));
      expect(Number(out.Attributes?.VisibilityTimeout), spec.name).toBe(spec.consumerTimeoutSeconds * 6);
      const dlq = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queues.deadLetterUrls[spec.deadLetterEnvVar], AttributeNames: ['QueueArn'] }));
      expect(JSON.parse(out.Attributes?.RedrivePolicy ?? '{}'), spec.name).toMatchObject({
        deadLetterTargetArn: dlq.Attributes?.QueueArn,
        maxReceiveCount: spec.maxReceiveCount,
      });
    }
  });

  it('delivers SQS events and honours batchItemFailures: the failed message comes back, the good one is deleted', async () => {
    const queueUrl = await queueWithShortVisibility('rt-partial');
    const deliveries: { body: string; receiveCount: string | undefined }[] = [];
    const events: SQSEvent[] = [];
    const poller = pollQueue({
      client: sqs,
      queueUrl,
      functionName: 'partial',
      handler: async (event): Promise<SQSBatchResponse> => {
        events.push(event);
        const failures: SQSBatchResponse['batchItemFailures'] = [];
        for (const r of event.Records) {
          deliveries.push({ body: r.body, receiveCount: r.attributes.ApproximateReceiveCount });
          const firstTime = deliveries.filter((d) => d.body === r.body).length === 1;
          if (r.body === 'fail-once' && firstTime) failures.push({ itemIdentifier: r.messageId });
        }
        return { batchItemFailures: failures };
      },
    });
    try {
      await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'ok' }));
      await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'fail-once' }));
      await until(() => deliveries.filter((d) => d.body === 'fail-once').length === 2);
      // give a wrongly kept 'ok' time to reappear (visibility is 1 s)
      await sleep(1500);
      expect(deliveries.filter((d) => d.body === 'ok')).toHaveLength(1);
      expect(deliveries.filter((d) => d.body === 'fail-once').map((d) => d.receiveCount)).toEqual(['1', '2']);
      expect(await depth(queueUrl)).toEqual({ visible: 0, inFlight: 0 });
      const record = events[0]!.Records[0]!;
      expect(record).toMatchObject({ eventSource: 'aws:sqs', awsRegion: 'us-east-1', eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:rt-partial' });
      expect(record.messageId).toMatch(/\S/);
      expect(record.receiptHandle).toMatch(/\S/);
    } finally {
      await poller.stop();
    }
  });

  it('a handler that throws returns the whole batch to the queue', async () => {
    const queueUrl = await queueWithShortVisibility('rt-throw');
    let calls = 0;
    const bodies: string[] = [];
    const poller = pollQueue({
      client: sqs,
      queueUrl,
      functionName: 'throws',
      handler: async (event) => {
        calls++;
        for (const r of event.Records) bodies.push(r.body);
        if (calls === 1) throw new Error('crash');
      },
    });
    try {
      await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: 'only' }));
      await until(() => calls >= 2);
      await sleep(1300);
      expect(bodies).toEqual(['only', 'only']);
      expect(await depth(queueUrl)).toEqual({ visible: 0, inFlight: 0 });
    } finally {
      await poller.stop();
    }
  });

  describe('LocalScheduler', () => {
    async function drain(queueUrl: string): Promise<string[]> {
      const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }));
      return (out.Messages ?? []).map((m) => m.Body ?? '');
    }

    it('fires a due schedule exactly once, keeps a future one, cancels, and persists across instances', async () => {
      const queueUrl = await queueWithShortVisibility('rt-scheduled');
      const file = join(tmp(), 'schedules.json');
      // Schedules are kept to the second, as EventBridge's at() expressions are.
      const now = Math.floor(Date.now() / 1000) * 1000;
      const s1 = new LocalScheduler({ file, sqs, targetQueueUrl: queueUrl });
      await s1.schedule({ name: 'due', at: new Date(now - 1000), body: '{"vessel":"due"}' });
      await s1.schedule({ name: 'future', at: new Date(now + 3_600_000), body: '{"vessel":"future"}' });
      await s1.schedule({ name: 'doomed', at: new Date(now + 3_600_000), body: '{"vessel":"doomed"}' });
      const conflict = await s1.schedule({ name: 'due', at: new Date(now), body: 'x' }).catch((err: unknown) => err);
      expect(isScheduleConflict(conflict)).toBe(true);
      expect(conflict).toMatchObject({ name: 'ScheduleConflictError', scheduleName: 'due', message: 'Schedule due already exists' });
      await s1.schedule({ name: 'millis', at: new Date(now + 3_600_999), body: 'm' });
      expect(s1.pending().find((p) => p.name === 'millis')?.at).toBe(new Date(now + 3_600_000).toISOString());
      await s1.cancel('millis');
      await s1.cancel('doomed');
      await s1.cancel('never-existed');
      expect(
        s1
          .pending()
          .map((s) => s.name)
          .sort(),
      ).toEqual(['due', 'future']);

      // a second instance (a restart) reads the file
      const s2 = new LocalScheduler({ file, sqs, targetQueueUrl: queueUrl });
      expect(s2.pending()).toEqual([
        { name: 'due', at: new Date(now - 1000).toISOString(), body: '{"vessel":"due"}' },
        { name: 'future', at: new Date(now + 3_600_000).toISOString(), body: '{"vessel":"future"}' },
      ]);
      // two ticks racing fire it once
      const fired = await Promise.all([s2.fireDue(), s2.fireDue()]);
      expect(fired[0]! + fired[1]!).toBe(1);
      expect(await s2.fireDue()).toBe(0);
      expect(await drain(queueUrl)).toEqual(['{"vessel":"due"}']);
      expect(await drain(queueUrl)).toEqual([]);
      expect(s2.pending().map((s) => s.name)).toEqual(['future']);
      expect((JSON.parse(readFileSync(file, 'utf8')) as { name: string }[]).map((s) => s.name)).toEqual(['future']);

      // the future one fires when its time comes
      const s3 = new LocalScheduler({ file, sqs, targetQueueUrl: queueUrl });
      expect(await s3.fireDue(new Date(now + 3_600_000 - 1))).toBe(0);
      expect(await s3.fireDue(new Date(now + 3_600_000))).toBe(1);
      expect(await drain(queueUrl)).toEqual(['{"vessel":"future"}']);
      expect(new LocalScheduler({ file, sqs, targetQueueUrl: queueUrl }).pending()).toEqual([]);
    });

    it('cancel persists too', async () => {
      const queueUrl = await queueWithShortVisibility('rt-cancel');
      const file = join(tmp(), 'schedules.json');
      const s1 = new LocalScheduler({ file, sqs, targetQueueUrl: queueUrl });
      await s1.schedule({ name: 'a', at: new Date(Date.now() - 1), body: 'a' });
      await s1.cancel('a');
      const s2 = new LocalScheduler({ file, sqs, targetQueueUrl: queueUrl });
      expect(s2.pending()).toEqual([]);
      expect(await s2.fireDue()).toBe(0);
      expect(await drain(queueUrl)).toEqual([]);
    });

    it('its timer fires a schedule when it falls due; a failed send is kept for the next tick', async () => {
      const queueUrl = await queueWithShortVisibility('rt-timer');
      const s = new LocalScheduler({ sqs, targetQueueUrl: queueUrl, tickMs: 50 });
      await s.schedule({ name: 'soon', at: new Date(Date.now() + 200), body: 'soon' });
      s.start();
      try {
        const got: string[] = [];
        await until(() => s.pending().length === 0, 5000);
        got.push(...(await drain(queueUrl)));
        expect(got).toEqual(['soon']);
      } finally {
        await s.stop();
      }

      const broken = new LocalScheduler({ sqs, targetQueueUrl: `${queues.endpoint}/000000000000/no-such-queue` });
      await broken.schedule({ name: 'kept', at: new Date(Date.now() - 1), body: 'kept' });
      expect(await broken.fireDue()).toBe(0);
      expect(broken.pending().map((p) => p.name)).toEqual(['kept']);
    });

    it('a schedules file written by another process is loaded as is', () => {
      const file = join(tmp(), 'schedules.json');
      writeFileSync(file, JSON.stringify([{ name: 'x', at: '2030-01-01T00:00:00.000Z', body: '{}' }]));
      expect(new LocalScheduler({ file, sqs, targetQueueUrl: 'unused' }).pending()).toEqual([{ name: 'x', at: '2030-01-01T00:00:00.000Z', body: '{}' }]);
    });
  });
});

describe('startGateway serves an sqs function of the manifest', () => {
  it('polls its queue, hands the handler real-shaped SQS events and deletes only what it did not report failed', async () => {
    const gw = await startGateway({
      dynamoEndpoint: inject('dynamoEndpoint'),
      tablePrefix: 'sqsfn',
      simulateUpstreams: true,
      // The recording consumer takes the webhook sender's place: two consumers of one queue would share its messages.
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
    try {
      // Every function it was given is served with its own trigger, and the consumer after them; the webhook queue has
      // no other consumer.
      expect(gw.functions.map((f) => `${f.id}:${f.kind}`)).toEqual([
        ...FUNCTIONS.filter((f) => f.id !== 'WebhookSender').map((f) => `${f.id}:${f.trigger.kind}`),
        'RecordingConsumer:sqs',
      ]);
      expect(gw.functions.filter((f) => f.kind === 'sqs').map((f) => f.id)).toEqual(['VesselExecutor', 'SessionTurn', 'RecordingConsumer']);
      expect((await fetch(`${gw.url}/health`)).status).toBe(200);
      // The handlers' environment names the queues, so the sender reaches the local fauxqs.
      const sender = sqsQueueSender();
      const okId = await sender.send('webhook', { n: 1 });
      const flakyId = await sender.send('webhook', { n: 2, fail: 1 });
      const deadline = Date.now() + 20_000;
      const seen = () => deliveries().map((d) => `${d.record.messageId}#${d.record.attributes.ApproximateReceiveCount}`);
      // The failed one would come back once its visibility (6 × 30 s) runs out; one delivery of each is enough here.
      while (!seen().includes(`${flakyId}#1`) && Date.now() < deadline) await sleep(50);
      expect(seen()).toContain(`${okId}#1`);
      const sqs = sqsClient(gw.queues.endpoint);
      try {
        // The good message was deleted, the failed one is in flight (it returns to the queue), nothing else.
        await sleep(200);
        const out = await sqs.send(
          new GetQueueAttributesCommand({
            QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
            AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
          }),
        );
        expect({
          visible: Number(out.Attributes?.ApproximateNumberOfMessages),
          inFlight: Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible),
        }).toEqual({ visible: 0, inFlight: 1 });
      } finally {
        sqs.destroy();
      }
      const first = deliveries().find((d) => d.record.messageId === okId)!;
      expect(first.body).toEqual({ n: 1 });
      expect(first.record).toMatchObject({
        eventSource: 'aws:sqs',
        awsRegion: 'us-east-1',
        eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:sqsfn-webhook',
        body: '{"n":1}',
        messageAttributes: {},
        attributes: { ApproximateReceiveCount: '1', SentTimestamp: expect.stringMatching(/^\d+$/) },
      });
      expect(first.record.receiptHandle).toMatch(/\S/);
      expect(first.record.md5OfBody).toMatch(/^[0-9a-f]{32}$/);
    } finally {
      await gw.stop();
    }
  });

  it('refuses to start with a function it cannot serve locally, before starting anything', async () => {
    await expect(
      startGateway({
        functions: [
          ...FUNCTIONS,
          { ...FUNCTIONS[0], id: 'Sessions', trigger: { kind: 'websocket' } },
          { ...FUNCTIONS[0], id: 'Chats', trigger: { kind: 'websocket' } },
        ],
      }),
    ).rejects.toThrow(/serves one websocket function at \/ws.*Sessions, Chats/);
  });
});

describe('startGateway serves schedule functions, scales queue consumers out and gives handlers the scheduler', () => {
  it('runs a schedule function at start-up and on its period, one run at a time, on demand with invokeScheduled; failures are logged, not fatal', async () => {
    const recorder = scheduledRecorder();
    const consumer = concurrentConsumer();
    const errors: string[] = [];
    const consoleError = console.error;
    console.error = (...args: unknown[]) => void errors.push(args.map(String).join(' '));
    const gw = await startGateway({
      dynamoEndpoint: inject('dynamoEndpoint'),
      tablePrefix: 'schedfn',
      simulateUpstreams: true,
      scheduleIntervalMs: 150,
      // The concurrent consumer below takes the webhook sender's place on the webhook queue (the sender would take,
      // and drop as "not a delivery", part of the messages meant for it).
      functions: [
        ...FUNCTIONS.filter((f) => f.id !== 'WebhookSender'),
        {
          id: 'Recorder',
          entry: 'test/local/fixtures/scheduled-recorder.ts',
          description: 'records scheduled runs',
          memoryMb: 256,
          timeoutSeconds: 60,
          trigger: { kind: 'schedule', expression: 'rate(1 minute)' },
          access: { tables: {}, providers: false, queues: [] },
        },
        {
          id: 'ConcurrentConsumer',
          entry: 'test/local/fixtures/concurrent-consumer.ts',
          description: 'records how many run at once',
          memoryMb: 256,
          timeoutSeconds: 30,
          trigger: { kind: 'sqs', queue: 'webhook', batchSize: 1, maxConcurrency: 3 },
          access: { tables: {}, providers: false, queues: [] },
        },
      ],
    });
    try {
      expect(gw.functions.find((f) => f.id === 'Recorder')).toMatchObject({ kind: 'schedule', expression: 'rate(1 minute)', intervalMs: 60_000 });
      // At start-up, as an EventBridge rule's ScheduledEvent, with the function's context.
      await until(() => recorder.events.length >= 1);
      expect(recorder.events[0]!.event).toMatchObject({
        version: '0',
        'detail-type': 'Scheduled Event',
        source: 'aws.events',
        account: '000000000000',
        region: 'us-east-1',
        resources: ['arn:aws:events:us-east-1:000000000000:rule/local-recorder'],
        detail: {},
      });
      expect(recorder.events[0]!.event.time).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
      expect(recorder.events[0]!.functionName).toBe('recorder');
      expect(recorder.events[0]!.remainingMs).toBeGreaterThan(59_000);
      // Then on the period (shortened here).
      await until(() => recorder.events.length >= 3);

      // A run that takes longer than the period: the ticks meanwhile are skipped, never a second run at once.
      let release!: () => void;
      recorder.hold = new Promise((resolve) => (release = resolve));
      await until(() => recorder.running === 1);
      const held = recorder.events.length;
      await sleep(500);
      expect(recorder.events.length).toBe(held);
      // invokeScheduled waits for the run in progress, then runs once more.
      const invoked = gw.invokeScheduled('Recorder');
      await sleep(100);
      expect(recorder.events.length).toBe(held);
      recorder.hold = undefined;
      release();
      await invoked;
      expect(recorder.events.length).toBeGreaterThan(held);
      expect(recorder.maxRunning).toBe(1);

      // A failure rejects the on-demand run and is logged; the schedule goes on.
      recorder.failNext = true;
      await expect(gw.invokeScheduled('Recorder')).rejects.toThrow('scheduled run failed on purpose');
      expect(errors.some((e) => e.includes('recorder (rate(1 minute)) failed') && e.includes('scheduled run failed on purpose'))).toBe(true);
      const after = recorder.events.length;
      await until(() => recorder.events.length > after);
      await expect(gw.invokeScheduled('Channeling')).rejects.toThrow(/Channeling is not a schedule function.*Recorder/);
      // The manifest's own schedule function is served too.
      await gw.invokeScheduled('VesselReconciler');

      // A queue consumer runs up to its maxConcurrency at once, no more.
      const sender = sqsQueueSender();
      for (let i = 0; i < 9; i++) await sender.send('webhook', { i });
      await until(() => consumer.done.length === 9, 10_000);
      expect(consumer.maxRunning).toBe(3);
    } finally {
      await gw.stop();
      console.error = consoleError;
    }
    // Stopped: no more runs.
    const stoppedAt = recorder.events.length;
    await sleep(400);
    expect(recorder.events.length).toBe(stoppedAt);
    expect(recorder.running).toBe(0);
  });

  it("hands the handlers the scheduler stand-in: SCHEDULER_ENDPOINT, the local group and role, the queues' fauxqs ARNs and dead-letter queues", async () => {
    let gw: Awaited<ReturnType<typeof startGateway>> | undefined;
    try {
      gw = await startGateway({ dynamoEndpoint: inject('dynamoEndpoint'), tablePrefix: 'schedenv', simulateUpstreams: true });
      // By default every function of the manifest is served, the webhook sender on the webhook queue among them.
      expect(gw.functions.map((f) => `${f.id}:${f.kind}`)).toEqual(FUNCTIONS.map((f) => `${f.id}:${f.trigger.kind}`));
      expect(gw.functions.find((f) => f.id === 'WebhookSender')).toMatchObject({ kind: 'sqs' });
      expect(gw.scheduler.endpoint).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      expect(process.env).toMatchObject({
        SCHEDULER_ENDPOINT: gw.scheduler.endpoint,
        SCHEDULE_GROUP_NAME: 'local',
        SCHEDULER_ROLE_ARN: expect.stringMatching(/^arn:aws:iam::\d{12}:role\//),
        RUN_QUEUE_ARN: gw.queues.arns.run,
        WEBHOOK_QUEUE_ARN: gw.queues.arns.webhook,
        RUN_QUEUE_URL: gw.queues.urls.RUN_QUEUE_URL,
        WEBHOOK_QUEUE_URL: gw.queues.urls.WEBHOOK_QUEUE_URL,
        RUN_DEAD_LETTER_QUEUE_URL: gw.queues.deadLetterUrls.RUN_DEAD_LETTER_QUEUE_URL,
        WEBHOOK_DEAD_LETTER_QUEUE_URL: gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL,
      });
      expect(gw.queues.arns.run).toMatch(/:schedenv-run$/);
      expect(gw.queues.arns.webhook).toMatch(/:schedenv-webhook$/);
      expect(gw.queues.deadLetterUrls.RUN_DEAD_LETTER_QUEUE_URL).toMatch(/\/schedenv-run-dlq$/);
      expect(gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL).toMatch(/\/schedenv-webhook-dlq$/);
      // What a handler's scheduler() creates lands in the stand-in, to the second, with the queue it targets (the run
      // queue unless told), and is removed by cancel.
      const at = new Date(Date.now() + 2 * 3_600_000);
      const atSecond = `${at.toISOString().slice(0, 19)}.000Z`;
      await scheduler().schedule({ name: 'from-a-handler', at, body: '{"vesselId":"v"}' });
      expect(gw.scheduler.pending()).toEqual([{ name: 'from-a-handler', at: atSecond, body: '{"vesselId":"v"}', queueUrl: gw.queues.urls.RUN_QUEUE_URL }]);
      await expect(scheduler().schedule({ name: 'from-a-handler', at, body: 'x' })).rejects.toSatisfy(isScheduleConflict);
      await scheduler().schedule({ name: 'a-retry', at, body: '{"vesselId":"v","round":1,"attempt":2}', queue: 'webhook' });
      expect(gw.scheduler.pending().find((p) => p.name === 'a-retry')).toEqual({
        name: 'a-retry',
        at: atSecond,
        body: '{"vesselId":"v","round":1,"attempt":2}',
        queueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL,
      });
      await scheduler().cancel('from-a-handler');
      await scheduler().cancel('a-retry');
      expect(gw.scheduler.pending()).toEqual([]);
    } finally {
      await gw?.stop();
    }
  });

  it('refuses, at startup, a schedule it cannot follow (cron, or a rate EventBridge would refuse)', async () => {
    const spec = (expression: string) => [...FUNCTIONS, { ...FUNCTIONS[0], id: 'Nightly', trigger: { kind: 'schedule' as const, expression } }];
    await expect(startGateway({ functions: spec('cron(0 3 * * ? *)') })).rejects.toThrow(/Nightly.*rate\(…\) schedules only, not cron/);
    expect(() => localFunctions(spec('rate(5 minute)'))).toThrow(/Nightly.*singular unit for 1 and the plural otherwise/);
    expect(() => localFunctions(spec('rate(30 seconds)'))).toThrow(/Nightly.*minute\(s\), hour\(s\) or day\(s\)/);
    expect(() => localFunctions(spec('every minute'))).toThrow(/Nightly.*not an EventBridge schedule expression/);
  });
});

describe('rate expressions', () => {
  it('are read as EventBridge reads them', () => {
    expect(rateIntervalMs('rate(1 minute)')).toBe(60_000);
    expect(rateIntervalMs('rate(5 minutes)')).toBe(300_000);
    expect(rateIntervalMs('rate(1 hour)')).toBe(3_600_000);
    expect(rateIntervalMs('rate(2 hours)')).toBe(7_200_000);
    expect(rateIntervalMs('rate(1 day)')).toBe(86_400_000);
    for (const bad of ['rate(0 minutes)', 'rate(1 minutes)', 'rate(2 minute)', 'rate(1 second)', 'rate(1.5 hours)', 'rate(1  minute)', 'rate(1 week)']) {
      expect(() => rateIntervalMs(bad), bad).toThrow();
    }
  });
});

describe('pollQueue with concurrency', () => {
  it('runs that many handlers at once, each receiving again only when its handler has finished', async () => {
    const queues = await startLocalQueues('conc');
    const sqs = sqsClient(queues.endpoint);
    let running = 0;
    let maxRunning = 0;
    const bodies: string[] = [];
    const poller = pollQueue({
      client: sqs,
      queueUrl: queues.urls.WEBHOOK_QUEUE_URL,
      functionName: 'conc',
      batchSize: 1,
      concurrency: 4,
      handler: async (event) => {
        running++;
        maxRunning = Math.max(maxRunning, running);
        await sleep(250);
        bodies.push(...event.Records.map((r) => r.body));
        running--;
      },
    });
    try {
      for (let i = 0; i < 10; i++) await sqs.send(new SendMessageCommand({ QueueUrl: queues.urls.WEBHOOK_QUEUE_URL, MessageBody: String(i) }));
      const deadline = Date.now() + 10_000;
      while (bodies.length < 10 && Date.now() < deadline) await sleep(25);
      expect(bodies.sort((a, b) => Number(a) - Number(b))).toEqual(Array.from({ length: 10 }, (_, i) => String(i)));
      expect(maxRunning).toBe(4);
    } finally {
      await poller.stop();
      sqs.destroy();
      await queues.stop();
    }
    expect(() => pollQueue({ client: sqs, queueUrl: 'x', functionName: 'x', handler: async () => {}, concurrency: 0 })).toThrow(RangeError);
  });
});

describe('the local event source mapping, as Lambda decides', () => {
  const messages = ['a', 'b', 'c'].map((id) => ({ MessageId: id, ReceiptHandle: `rh-${id}`, Body: id }));

  it('deletes what batchItemFailures does not name; nothing on a throw or on an answer naming a message not in the batch', () => {
    expect(succeededMessages(messages, { result: undefined }).map((m) => m.MessageId)).toEqual(['a', 'b', 'c']);
    expect(succeededMessages(messages, { result: { batchItemFailures: [{ itemIdentifier: 'b' }] } }).map((m) => m.MessageId)).toEqual(['a', 'c']);
    expect(succeededMessages(messages, { error: new Error('crash') })).toEqual([]);
    expect(succeededMessages(messages, { result: { batchItemFailures: [{ itemIdentifier: 'zzz' }] } })).toEqual([]);
    expect(succeededMessages(messages, { result: { batchItemFailures: [{ itemIdentifier: '' }] } })).toEqual([]);
  });

  it("message attributes arrive in the event's spelling", () => {
    const record = sqsRecord(
      {
        MessageId: 'm',
        ReceiptHandle: 'rh',
        Body: '{}',
        MD5OfBody: 'f'.repeat(32),
        MD5OfMessageAttributes: 'e'.repeat(32),
        Attributes: { ApproximateReceiveCount: '2' },
        MessageAttributes: { kind: { DataType: 'String', StringValue: 'webhook' }, blob: { DataType: 'Binary', BinaryValue: new Uint8Array([1, 2]) } },
      },
      'http://127.0.0.1:1/000000000000/gw-webhook',
    );
    expect(record).toEqual({
      messageId: 'm',
      receiptHandle: 'rh',
      body: '{}',
      attributes: { ApproximateReceiveCount: '2' },
      messageAttributes: {
        kind: { dataType: 'String', stringValue: 'webhook', stringListValues: [], binaryListValues: [] },
        blob: { dataType: 'Binary', binaryValue: 'AQI=', stringListValues: [], binaryListValues: [] },
      },
      md5OfBody: 'f'.repeat(32),
      md5OfMessageAttributes: 'e'.repeat(32),
      eventSource: 'aws:sqs',
      eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:gw-webhook',
      awsRegion: 'us-east-1',
    });
  });
});
