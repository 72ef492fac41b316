import { randomUUID } from 'node:crypto';
import { DeleteMessageBatchCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { startFauxqs } from 'fauxqs';
import { QUEUES } from '../../lambdas/store/queues.ts';
import { lambdaContext } from './events.ts';

export interface LocalQueues {
  endpoint: string;
  urls: Record<(typeof QUEUES)[number]['envVar'], string>;
  stop(): Promise<void>;
}

export async function startLocalQueues(prefix: string): Promise<LocalQueues> {
  const server = await startFauxqs({ port: 0, logger: false });
  const urls = {} as LocalQueues['urls'];
  for (const q of QUEUES) {
    const dlq = server.createQueue(`${prefix}-${q.name}-dlq`);
    const main = server.createQueue(`${prefix}-${q.name}`, {
      attributes: {
        VisibilityTimeout: '60',
        RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlq.queueArn, maxReceiveCount: q.maxReceiveCount }),
      },
    });
    urls[q.envVar] = main.queueUrl;
  }
  return { endpoint: server.address, urls, stop: () => server.stop() };
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
