/**
 * The one description of the gateway's SQS queues, as tables.ts is for its tables: the CDK stack and the local
 * runtime (fauxqs) both build theirs from it, and the queue sender finds a queue's URL through `envVar`. Each queue
 * has a dead-letter queue after `maxReceiveCount` deliveries.
 *
 * - `arnEnvVar`: where a function that schedules deliveries onto the queue finds its ARN (EventBridge Scheduler
 *   targets a queue by ARN: lambdas/scheduling/scheduler.ts).
 * - `deadLetterEnvVar`: where a function allowed to put messages on the queue's dead-letter queue itself finds its
 *   URL (the webhook sender parks a delivery whose retries are exhausted there: docs/webhooks.md).
 *
 * Consumer settings live beside the queue they concern:
 * - `consumerTimeoutSeconds`: the longest a consumer of the queue may run. A message stays invisible for six times
 *   that (AWS's advice for Lambda event sources), so a slow but healthy batch is never handed to a second consumer
 *   meanwhile; the stack refuses a consumer whose timeout is longer.
 * - `batchSize`: how many messages one consumer invocation gets, unless its manifest trigger says otherwise.
 */
export const QUEUES = [
  {
    envVar: 'RUN_QUEUE_URL',
    arnEnvVar: 'RUN_QUEUE_ARN',
    deadLetterEnvVar: 'RUN_DEAD_LETTER_QUEUE_URL',
    name: 'run',
    maxReceiveCount: 5,
    /** The vessel executor: one run, up to Lambda's maximum. */
    consumerTimeoutSeconds: 900,
    /** One vessel per invocation. */
    batchSize: 1,
  },
  {
    envVar: 'WEBHOOK_QUEUE_URL',
    arnEnvVar: 'WEBHOOK_QUEUE_ARN',
    deadLetterEnvVar: 'WEBHOOK_DEAD_LETTER_QUEUE_URL',
    name: 'webhook',
    maxReceiveCount: 8,
    /** The webhook sender: a 10 s delivery plus bookkeeping (its 1 + 7 attempts are separate messages: docs/webhooks.md). */
    consumerTimeoutSeconds: 30,
    /** Ten callbacks per invocation. */
    batchSize: 10,
  },
  {
    envVar: 'TURN_QUEUE_URL',
    arnEnvVar: 'TURN_QUEUE_ARN',
    deadLetterEnvVar: 'TURN_DEAD_LETTER_QUEUE_URL',
    name: 'turn',
    // A turn's message only says "run turn T of session S"; the session item is the source of truth, a stale or
    // repeated message finds the turn already claimed and does nothing (docs/ws.md, "How a turn runs").
    maxReceiveCount: 3,
    /** The session turn worker: one turn, up to Lambda's maximum. */
    consumerTimeoutSeconds: 900,
    /** One turn per invocation. */
    batchSize: 1,
  },
] as const;

export type QueueSpec = (typeof QUEUES)[number];
export type QueueName = QueueSpec['name'];
export type QueueEnvVar = QueueSpec['envVar'];
export type QueueArnEnvVar = QueueSpec['arnEnvVar'];
export type DeadLetterEnvVar = QueueSpec['deadLetterEnvVar'];

/** How many times a queue's consumer timeout its messages stay invisible after a receive. */
export const VISIBILITY_TIMEOUT_FACTOR = 6;

/** The QUEUES entry of `name`. */
export function queueSpec(name: QueueName): QueueSpec {
  const spec = QUEUES.find((q) => q.name === name);
  if (!spec) throw new Error(`Unknown queue ${String(name)}`);
  return spec;
}
