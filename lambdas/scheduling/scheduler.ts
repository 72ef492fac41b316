import { CreateScheduleCommand, DeleteScheduleCommand, SchedulerClient } from '@aws-sdk/client-scheduler';
import { env, localEndpointCredentials } from '../config/env.ts';
import { instanceValue } from '../instance/state.ts';
import { QUEUES, queueSpec, type QueueName } from '../store/queues.ts';

/**
 * Fires a message onto a queue at a time. In AWS this is EventBridge Scheduler (one-time `at()` schedules that
 * delete themselves); locally the runtime's stand-in (bin/local/scheduler.ts) answers the same API, so handlers use
 * `scheduler()` in both.
 */
export interface Scheduler {
  /**
   * Sends `body` to `queue` (default: the run queue) at `at` (to the second: see `atExpression`). `name` is unique;
   * scheduling a name that exists is refused with a ScheduleConflictError (`isScheduleConflict`).
   */
  schedule(input: { name: string; at: Date; body: string; queue?: QueueName }): Promise<void>;
  /** Removes a schedule that has not fired; a missing one is not an error. */
  cancel(name: string): Promise<void>;
}

/**
 * A schedule's expression: `at(yyyy-mm-ddThh:mm:ss)` in UTC. EventBridge takes whole seconds only, so the
 * milliseconds are dropped: a schedule may fire up to a second before `at` (a consumer puts an early message back).
 */
export function atExpression(at: Date): string {
  if (Number.isNaN(at.getTime())) throw new RangeError('A schedule needs a valid time');
  return `at(${at.toISOString().slice(0, 19)})`;
}

/** A schedule of that name exists already: scheduling is not repeated, so a retried request can recognise its own. */
export class ScheduleConflictError extends Error {
  constructor(
    readonly scheduleName: string,
    options?: { cause?: unknown },
  ) {
    super(`Schedule ${scheduleName} already exists`, options);
    this.name = 'ScheduleConflictError';
  }
}

/** True when `err` says the schedule's name is taken (whoever's scheduler threw it). */
export function isScheduleConflict(err: unknown): err is ScheduleConflictError {
  return err instanceof ScheduleConflictError || (err as { name?: unknown } | null)?.name === 'ScheduleConflictError';
}

export interface EventBridgeSchedulerConfig {
  groupName: string;
  /** The ARN of each queue this function may schedule onto (absent: it may not). */
  targetQueueArns: Partial<Record<QueueName, string>>;
  roleArn: string;
  region: string;
  /** Another endpoint than AWS's (the local stand-in), called with local credentials. */
  endpoint?: string;
}

export class EventBridgeScheduler implements Scheduler {
  private readonly client: SchedulerClient;
  constructor(private readonly config: EventBridgeSchedulerConfig) {
    this.client = new SchedulerClient({
      region: config.region,
      ...(config.endpoint ? { endpoint: config.endpoint, credentials: localEndpointCredentials() } : {}),
    });
  }

  async schedule({ name, at, body, queue = 'run' }: { name: string; at: Date; body: string; queue?: QueueName }): Promise<void> {
    const targetArn = this.config.targetQueueArns[queue];
    if (!targetArn)
      throw new Error(`${queueSpec(queue).arnEnvVar} is not set: this function may not schedule onto the ${queue} queue (manifest access.queues)`);
    try {
      await this.client.send(
        new CreateScheduleCommand({
          Name: name,
          GroupName: this.config.groupName,
          ScheduleExpression: atExpression(at),
          ScheduleExpressionTimezone: 'UTC',
          FlexibleTimeWindow: { Mode: 'OFF' },
          ActionAfterCompletion: 'DELETE',
          Target: { Arn: targetArn, RoleArn: this.config.roleArn, Input: body },
        }),
      );
    } catch (err) {
      if ((err as { name?: string }).name === 'ConflictException') throw new ScheduleConflictError(name, { cause: err });
      throw err;
    }
  }

  async cancel(name: string): Promise<void> {
    try {
      await this.client.send(new DeleteScheduleCommand({ Name: name, GroupName: this.config.groupName }));
    } catch (err) {
      if ((err as { name?: string }).name !== 'ResourceNotFoundException') throw err;
    }
  }

  /** Closes the client's connections. */
  destroy(): void {
    this.client.destroy();
  }
}

/**
 * The instance's scheduler, configured from the environment the stack gives a function whose manifest access has
 * `scheduler` (SCHEDULE_GROUP_NAME, SCHEDULER_ROLE_ARN) and the ARN of each queue it may send to (RUN_QUEUE_ARN,
 * WEBHOOK_QUEUE_ARN); locally the runtime sets those and SCHEDULER_ENDPOINT, its stand-in's address. Throws, naming
 * what is missing, in a function that may not schedule.
 */
export const scheduler = instanceValue(
  (): EventBridgeScheduler => {
    const config = env();
    const { SCHEDULE_GROUP_NAME, SCHEDULER_ROLE_ARN, AWS_REGION, SCHEDULER_ENDPOINT } = config;
    const missing = Object.entries({ SCHEDULE_GROUP_NAME, SCHEDULER_ROLE_ARN })
      .filter(([, value]) => !value)
      .map(([name]) => name);
    if (missing.length > 0 || !SCHEDULE_GROUP_NAME || !SCHEDULER_ROLE_ARN) {
      throw new Error(`${missing.join(', ')} ${missing.length === 1 ? 'is' : 'are'} not set: this function may not schedule: manifest access.scheduler`);
    }
    return new EventBridgeScheduler({
      groupName: SCHEDULE_GROUP_NAME,
      roleArn: SCHEDULER_ROLE_ARN,
      targetQueueArns: Object.fromEntries(QUEUES.flatMap((q) => (config[q.arnEnvVar] ? [[q.name, config[q.arnEnvVar]]] : []))),
      region: AWS_REGION,
      ...(SCHEDULER_ENDPOINT ? { endpoint: SCHEDULER_ENDPOINT } : {}),
    });
  },
  (value) => value.destroy(),
);
