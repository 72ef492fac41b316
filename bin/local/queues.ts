import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { CreateQueueCommand, DeleteMessageBatchCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { QUEUES } from '../../lambdas/store/queues.ts';
import { lambdaContext } from './events.ts';

export interface LocalQueues {
  endpoint: string;
  urls: Record<(typeof QUEUES)[number]['envVar'], string>;
  stop(): Promise<void>;
}

let fauxqs: Promise<typeof import('fauxqs')> | undefined;

/**
 * fauxqs imports node:sqlite (for its optional persistence, unused here), and Node 22 announces that module with an
 * "ExperimentalWarning: SQLite is an experimental feature" on every `npm start` and in every test worker. Exactly
 * that warning is dropped, only while fauxqs loads (Node emits it once, when node:sqlite is first loaded); every
 * other warning, experimental or not, still prints.
 */
function loadFauxqs(): Promise<typeof import('fauxqs')> {
  fauxqs ??= (async () => {
    const emitWarning = process.emitWarning;
    process.emitWarning = function (this: NodeJS.Process, warning: string | Error, ...rest: unknown[]) {
      const message = typeof warning === 'string' ? warning : warning.message;
      const type = typeof rest[0] === 'string' ? rest[0] : ((rest[0] as { type?: string } | undefined)?.type ?? (warning instanceof Error ? warning.name : undefined));
      if (type === 'ExperimentalWarning' && message.startsWith('SQLite is an experimental feature')) return;
      return Reflect.apply(emitWarning, this, [warning, ...rest]) as void;
    } as typeof process.emitWarning;
    try {
      return await import('fauxqs');
    } finally {
      process.emitWarning = emitWarning;
    }
  })();
  return fauxqs;
}

/**
 * fauxqs (in-process SQS) on 127.0.0.1 only. Its `startFauxqs` always listens on 0.0.0.0 (its `host` option only
 * names the host in queue URLs), and it answers unsigned requests, so the runtime builds the same server with
 * `buildApp` and listens itself; the queues are then declared through the SQS API, as a deployed stack declares them.
 */
export async function startLocalQueues(prefix: string): Promise<LocalQueues> {
  const { buildApp } = await loadFauxqs();
  const app = buildApp({ logger: false });
  try {
    await app.listen({ port: 0, host: '127.0.0.1' });
    const { port } = app.server.address() as AddressInfo;
    const endpoint = `http://127.0.0.1:${port}`;
    const sqs = sqsClient(endpoint);
    const urls = {} as LocalQueues['urls'];
    try {
      for (const q of QUEUES) {
        const dlq = await sqs.send(new CreateQueueCommand({ QueueName: `${prefix}-${q.name}-dlq` }));
        const dlqArn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq.QueueUrl, AttributeNames: ['QueueArn'] }))).Attributes?.QueueArn;
        const main = await sqs.send(
          new CreateQueueCommand({
            QueueName: `${prefix}-${q.name}`,
            Attributes: {
              VisibilityTimeout: '60',
              RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: q.maxReceiveCount }),
            },
          }),
        );
        urls[q.envVar] = main.QueueUrl!;
      }
    } finally {
      sqs.destroy();
    }
    return { endpoint, urls, stop: () => app.close() };
  } catch (err) {
    await app.close();
    throw err;
  }
}

export function sqsClient(endpoint: string): SQSClient {
  return new SQSClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
}

type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse | void>;

/**
 * Lambda's SQS event source mapping, locally: long-polls a queue, hands batches to the handler as SQSEvents and
 * deletes what succeeded; items in `batchItemFailures` (or the whole batch on a throw) become visible again.
 */
export function pollQueue(opts: { client: SQSClient; queueUrl: string; handler: SqsHandler; functionName: string; batchSize?: number }): { stop(): Promise<void> } {
  let running = true;
  const abort = new AbortController();
  const loop = (async () => {
    while (running) {
      try {
        const out = await opts.client.send(
          new ReceiveMessageCommand({ QueueUrl: opts.queueUrl, MaxNumberOfMessages: opts.batchSize ?? 10, WaitTimeSeconds: 1, MessageSystemAttributeNames: ['All'] }),
          { abortSignal: abort.signal },
        );
        const messages = out.Messages ?? [];
        if (messages.length === 0) continue;
        const event: SQSEvent = {
          Records: messages.map((m) => ({
            messageId: m.MessageId!,
            receiptHandle: m.ReceiptHandle!,
            body: m.Body ?? '',
            attributes: (m.Attributes ?? {}) as never,
            messageAttributes: {},
            md5OfBody: m.MD5OfBody ?? '',
            eventSource: 'aws:sqs',
            eventSourceARN: `arn:aws:sqs:us-east-1:000000000000:${opts.queueUrl.split('/').pop()}`,
            awsRegion: 'us-east-1',
          })),
        };
        let failed = new Set<string>(messages.map((m) => m.MessageId!));
        try {
          const result = await opts.handler(event, lambdaContext(opts.functionName));
          failed = new Set((result?.batchItemFailures ?? []).map((f) => f.itemIdentifier));
        } catch {
          // The whole batch returns to the queue, as with Lambda.
        }
        const done = messages.filter((m) => !failed.has(m.MessageId!));
        if (done.length) {
          await opts.client.send(
            new DeleteMessageBatchCommand({ QueueUrl: opts.queueUrl, Entries: done.map((m) => ({ Id: randomUUID(), ReceiptHandle: m.ReceiptHandle! })) }),
          );
        }
      } catch {
        if (running) await new Promise((r) => setTimeout(r, 250));
      }
    }
  })();
  return {
    async stop() {
      running = false;
      abort.abort();
      await loop;
    },
  };
}
