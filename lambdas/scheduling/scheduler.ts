import { CreateScheduleCommand, DeleteScheduleCommand, SchedulerClient } from '@aws-sdk/client-scheduler';

/**
 * Fires a message onto a queue at a time. In AWS this is EventBridge Scheduler (one-time `at()` schedules that
 * delete themselves); locally the runtime provides an implementation that stores schedules and fires due ones.
 */
export interface Scheduler {
  /** Sends `body` to the target queue at `at`. `name` is unique; scheduling a name twice is refused. */
  schedule(input: { name: string; at: Date; body: string }): Promise<void>;
  /** Removes a schedule that has not fired; a missing one is not an error. */
  cancel(name: string): Promise<void>;
}

export class EventBridgeScheduler implements Scheduler {
  private readonly client: SchedulerClient;
  constructor(
    private readonly config: { groupName: string; targetQueueArn: string; roleArn: string; region: string },
  ) {
    this.client = new SchedulerClient({ region: config.region });
  }

  async schedule({ name, at, body }: { name: string; at: Date; body: string }): Promise<void> {
    await this.client.send(
      new CreateScheduleCommand({
        Name: name,
        GroupName: this.config.groupName,
        // EventBridge wants yyyy-mm-ddThh:mm:ss in UTC, without milliseconds or zone.
        ScheduleExpression: `at(${at.toISOString().slice(0, 19)})`,
        ScheduleExpressionTimezone: 'UTC',
        FlexibleTimeWindow: { Mode: 'OFF' },
        ActionAfterCompletion: 'DELETE',
        Target: { Arn: this.config.targetQueueArn, RoleArn: this.config.roleArn, Input: body },
      }),
    );
  }

  async cancel(name: string): Promise<void> {
    try {
      await this.client.send(new DeleteScheduleCommand({ Name: name, GroupName: this.config.groupName }));
    } catch (err) {
      if ((err as { name?: string }).name !== 'ResourceNotFoundException') throw err;
    }
  }
}
