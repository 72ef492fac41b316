import { randomUUID } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import { CreateQueueCommand, DeleteMessageBatchCommand, GetQueueAttributesCommand, ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Message, MessageAttributeValue } from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent, SQSMessageAttributes, SQSRecord } from 'aws-lambda';
import { QUEUES, VISIBILITY_TIMEOUT_FACTOR, type DeadLetterEnvVar, type QueueEnvVar, type QueueName } from '../../lambdas/store/queues.ts';
import { lambdaContext } from './events.ts';

export interface LocalQueues {
  endpoint: string;
  urls: Record<QueueEnvVar, string>;
  /** Each queue's dead-letter queue, under the variable a function that may send there reads. */
  deadLetterUrls: Record<DeadLetterEnvVar, string>;
  /** Each queue's ARN as fauxqs reports it (GetQueueAttributes): schedules of the stand-in target queues by ARN. */
  arns: Record<QueueName, string>;
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
      const type =
        typeof rest[0] === 'string' ? rest[0] : ((rest[0] as { type?: string } | undefined)?.type ?? (warning instanceof Error ? warning.name : undefined));
      if (type === 'ExperimentalWarning' && message.startsWith('SQLite is an experimental feature')) return;
      Reflect.apply(emitWarning, this, [warning, ...rest]);
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
 * `buildApp` and listens itself; the queues are then declared through the SQS API, as a deployed stack declares them
 * (visibility timeout VISIBILITY_TIMEOUT_FACTOR × the queue's consumer timeout, redrive after maxReceiveCount).
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
    const deadLetterUrls = {} as LocalQueues['deadLetterUrls'];
    const arns = {} as LocalQueues['arns'];
    try {
      for (const q of QUEUES) {
        const dlq = await sqs.send(new CreateQueueCommand({ QueueName: `${prefix}-${q.name}-dlq` }));
        deadLetterUrls[q.deadLetterEnvVar] = dlq.QueueUrl!;
        const dlqArn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: dlq.QueueUrl, AttributeNames: ['QueueArn'] }))).Attributes?.QueueArn;
        const main = await sqs.send(
          new CreateQueueCommand({
            QueueName: `${prefix}-${q.name}`,
            Attributes: {
              VisibilityTimeout: String(q.consumerTimeoutSeconds * VISIBILITY_TIMEOUT_FACTOR),
              RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: q.maxReceiveCount }),
            },
          }),
        );
        urls[q.envVar] = main.QueueUrl!;
        const arn = (await sqs.send(new GetQueueAttributesCommand({ QueueUrl: main.QueueUrl, AttributeNames: ['QueueArn'] }))).Attributes?.QueueArn;
        if (!arn) throw new Error(`fauxqs reported no ARN for the ${q.name} queue`);
        arns[q.name] = arn;
      }
    } finally {
      sqs.destroy();
    }
    return { endpoint, urls, deadLetterUrls, arns, stop: () => app.close() };
  } catch (err) {
    await app.close();
    throw err;
  }
}

export function sqsClient(endpoint: string): SQSClient {
  return new SQSClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
}

/**
 * What a queue's poller is doing, read only (`pollQueue(…).activity()`): for tests that prove nothing more happens
 * (test/support/drained.ts) rather than wait for it.
 */
export interface PollerActivity {
  /** Batches received since the poller started. */
  received: number;
  /** Batches being handled now: received, and their handler or the deletion of what succeeded not over yet. */
  running: number;
  /**
   * The messages the handler gave back (failed, or not deleted), by message id, with the receipt handle they were
   * received with: in flight on the queue until their visibility timeout ends, and then visible again. A message is
   * forgotten when it is received again or deleted.
   */
  released: ReadonlyMap<string, string>;
}

/** A queue consumer answers a batch response (its failures), or nothing (the whole batch succeeded). */
export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse> | Promise<void>;

/** An SQS message as Lambda's event source hands it to a function: one record of an SQSEvent. */
export function sqsRecord(message: Message, queueUrl: string, region = 'us-east-1'): SQSRecord {
  return {
    messageId: message.MessageId!,
    receiptHandle: message.ReceiptHandle!,
    body: message.Body ?? '',
    attributes: (message.Attributes ?? {}) as unknown as SQSRecord['attributes'],
    messageAttributes: lambdaMessageAttributes(message.MessageAttributes),
    md5OfBody: message.MD5OfBody ?? '',
    ...(message.MD5OfMessageAttributes ? { md5OfMessageAttributes: message.MD5OfMessageAttributes } : {}),
    eventSource: 'aws:sqs',
    eventSourceARN: `arn:aws:sqs:${region}:000000000000:${queueUrl.split('/').pop()}`,
    awsRegion: region,
  };
}

/** The SQS API's message attributes in the event's spelling (camelCase, binary as base64, empty list fields). */
function lambdaMessageAttributes(attributes: Record<string, MessageAttributeValue> | undefined): SQSMessageAttributes {
  const out: SQSMessageAttributes = {};
  for (const [name, value] of Object.entries(attributes ?? {})) {
    out[name] = {
      dataType: value.DataType ?? 'String',
      ...(value.StringValue !== undefined ? { stringValue: value.StringValue } : {}),
      ...(value.BinaryValue !== undefined ? { binaryValue: Buffer.from(value.BinaryValue).toString('base64') } : {}),
      stringListValues: [],
      binaryListValues: [],
    };
  }
  return out;
}

/**
 * What Lambda keeps of a batch after the handler answered: the messages to delete. Items in `batchItemFailures` stay
 * (they become visible again); an answer naming a message that is not in the batch, or a throw, fails the whole
 * batch, as Lambda's event source mapping does.
 */
export function succeededMessages(messages: readonly Message[], outcome: { result: SQSBatchResponse | undefined } | { error: unknown }): Message[] {
  if ('error' in outcome) return [];
  const ids = new Set(messages.map((m) => m.MessageId));
  const failures = outcome.result?.batchItemFailures ?? [];
  if (failures.some((f) => !f.itemIdentifier || !ids.has(f.itemIdentifier))) return [];
  const failed = new Set(failures.map((f) => f.itemIdentifier));
  return messages.filter((m) => !failed.has(m.MessageId!));
}

/**
 * Lambda's SQS event source mapping, locally: long-polls a queue, hands batches to the handler as SQSEvents and
 * deletes what succeeded; items in `batchItemFailures` (or the whole batch on a throw) become visible again.
 * `concurrency` poll loops run side by side, each waiting for its handler before it receives again — as Lambda scales
 * an event source out to its maximum concurrency, so at most that many invocations run at once. `activity()` says,
 * read only, what it is doing (PollerActivity).
 */
export function pollQueue(opts: {
  client: SQSClient;
  queueUrl: string;
  handler: SqsHandler;
  functionName: string;
  batchSize?: number;
  /** The function's timeout, as the context's remaining time (default Lambda's 15 minutes). */
  timeoutMs?: number;
  /** How many invocations may run at once (the trigger's maxConcurrency); default 1. */
  concurrency?: number;
}): { stop(): Promise<void>; activity(): PollerActivity } {
  let running = true;
  const abort = new AbortController();
  let received = 0;
  let handling = 0;
  const released = new Map<string, string>();
  const poll = async () => {
    while (running) {
      try {
        const out = await opts.client.send(
          new ReceiveMessageCommand({
            QueueUrl: opts.queueUrl,
            MaxNumberOfMessages: Math.min(opts.batchSize ?? 10, 10),
            // As Lambda's event source polls: one long poll of up to 20 s, answered as soon as a message arrives. A
            // short wait made the local runtime's ~30 idle poll loops cost 75–80 ms of CPU a second, which showed in
            // every CPU and latency figure of the bench (docs/benchmarks.md). stop() aborts the wait.
            WaitTimeSeconds: 20,
            MessageSystemAttributeNames: ['All'],
            MessageAttributeNames: ['All'],
          }),
          { abortSignal: abort.signal },
        );
        const messages = out.Messages ?? [];
        if (messages.length === 0) continue;
        received++;
        handling++;
        for (const m of messages) released.delete(m.MessageId!);
        try {
          const event: SQSEvent = { Records: messages.map((m) => sqsRecord(m, opts.queueUrl)) };
          let outcome: { result: SQSBatchResponse | undefined } | { error: unknown };
          try {
            // A handler that answers nothing (void) leaves result undefined.
            outcome = { result: (await opts.handler(event, lambdaContext(opts.functionName, opts.timeoutMs))) ?? undefined };
          } catch (error) {
            // The whole batch returns to the queue, as with Lambda.
            console.error(`${opts.functionName} failed on a batch of ${messages.length}: ${(error as Error)?.stack ?? String(error)}`);
            outcome = { error };
          }
          // Given back until deleted: what is not deleted becomes visible again when its visibility timeout ends.
          for (const m of messages) released.set(m.MessageId!, m.ReceiptHandle!);
          const done = succeededMessages(messages, outcome);
          if (done.length) {
            const entries = new Map<string, Message>(done.map((m) => [randomUUID(), m]));
            const deleted = await opts.client.send(
              new DeleteMessageBatchCommand({ QueueUrl: opts.queueUrl, Entries: [...entries].map(([Id, m]) => ({ Id, ReceiptHandle: m.ReceiptHandle! })) }),
            );
            for (const ok of deleted.Successful ?? []) released.delete(entries.get(ok.Id!)?.MessageId ?? '');
          }
        } finally {
          handling--;
        }
      } catch {
        if (running) await new Promise((r) => setTimeout(r, 250));
      }
    }
  };
  const concurrency = opts.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`concurrency must be a positive integer, got ${concurrency}`);
  const loops = Array.from({ length: concurrency }, () => poll());
  return {
    async stop() {
      running = false;
      abort.abort();
      await Promise.all(loops);
    },
    activity: () => ({ received, running: handling, released: new Map(released) }),
  };
}
