import { Duration } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import { SqsEventSource } from 'aws-cdk-lib/aws-lambda-event-sources';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { QUEUES, queueSpec, VISIBILITY_TIMEOUT_FACTOR, type QueueEnvVar, type QueueName } from '../../lambdas/store/queues.ts';
import { removalPolicyFor } from './lifecycle.ts';

export type { QueueName };

/** The visibility timeout of a queue: VISIBILITY_TIMEOUT_FACTOR × its consumer timeout (lambdas/store/queues.ts). */
export function visibilityTimeoutOf(name: QueueName): Duration {
  return Duration.seconds(queueSpec(name).consumerTimeoutSeconds * VISIBILITY_TIMEOUT_FACTOR);
}

export interface GatewayQueue {
  readonly name: QueueName;
  /** `Run`, `Webhook`: the name as it appears in construct ids and alarm names. */
  readonly label: string;
  readonly envVar: QueueEnvVar;
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.Queue;
}

export interface GatewayQueuesProps {
  readonly production: boolean;
}

/**
 * The run queue and the webhook queue of QUEUES (the local runtime declares the same ones in fauxqs), each with a
 * dead-letter queue that keeps failures for 14 days. SQS-managed encryption, TLS enforced by queue policy.
 */
export class GatewayQueues extends Construct {
  readonly byName: Record<QueueName, GatewayQueue>;

  constructor(scope: Construct, id: string, props: GatewayQueuesProps) {
    super(scope, id);
    const removalPolicy = removalPolicyFor(props.production);
    const entries = QUEUES.map((spec) => {
      const label = spec.name.charAt(0).toUpperCase() + spec.name.slice(1);
      const deadLetterQueue = new sqs.Queue(this, `${label}DeadLetterQueue`, {
        retentionPeriod: Duration.days(14),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        removalPolicy,
      });
      const queue = new sqs.Queue(this, `${label}Queue`, {
        visibilityTimeout: visibilityTimeoutOf(spec.name),
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        deadLetterQueue: { queue: deadLetterQueue, maxReceiveCount: spec.maxReceiveCount },
        removalPolicy,
      });
      return [spec.name, { name: spec.name, label, envVar: spec.envVar, queue, deadLetterQueue }] as const;
    });
    this.byName = Object.fromEntries(entries) as Record<QueueName, GatewayQueue>;
  }

  get all(): GatewayQueue[] {
    return Object.values(this.byName);
  }

  /**
   * Lets `fn` put messages on a queue — `sqs:SendMessage` on that queue only — and tells it the queue's URL and ARN
   * (EventBridge Scheduler targets a queue by ARN).
   */
  grantSend(name: QueueName, fn: lambda.Function): void {
    const { queue, envVar } = this.byName[name];
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [queue.queueArn] }));
    fn.addEnvironment(envVar, queue.queueUrl);
    fn.addEnvironment(queueSpec(name).arnEnvVar, queue.queueArn);
  }

  /**
   * Lets `fn` put messages on a queue's dead-letter queue itself — `sqs:SendMessage` there only — and tells it its
   * URL: a consumer that gives up on a message it handled parks it there (the webhook sender, docs/webhooks.md).
   */
  grantSendToDeadLetter(name: QueueName, fn: lambda.Function): void {
    const { deadLetterQueue } = this.byName[name];
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: [deadLetterQueue.queueArn] }));
    fn.addEnvironment(queueSpec(name).deadLetterEnvVar, deadLetterQueue.queueUrl);
  }

  /**
   * Makes `fn` the queue's consumer: an SQS event source that reports partial batch failures (only the failed
   * messages return to the queue). The batch size defaults to the queue's (QUEUES). Refuses a consumer that may run
   * longer than the queue's visibility was sized for.
   */
  attachConsumer(name: QueueName, fn: lambda.Function, options: { batchSize?: number; maxConcurrency?: number } = {}): void {
    const limit = Duration.seconds(queueSpec(name).consumerTimeoutSeconds);
    const timeout = fn.timeout ?? Duration.seconds(3);
    if (timeout.toSeconds() > limit.toSeconds()) {
      throw new Error(
        `The ${name} queue's visibility timeout is sized for consumers of at most ${limit.toHumanString()}; ` +
          `${fn.node.path} runs for up to ${timeout.toHumanString()}. Raise consumerTimeoutSeconds of the ${name} queue (lambdas/store/queues.ts) first.`,
      );
    }
    fn.addEventSource(
      new SqsEventSource(this.byName[name].queue, {
        reportBatchItemFailures: true,
        batchSize: options.batchSize ?? queueSpec(name).batchSize,
        ...(options.maxConcurrency ? { maxConcurrency: options.maxConcurrency } : {}),
      }),
    );
  }
}
