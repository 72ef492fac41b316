import { Stack, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { nagEnvironment } from '../nag.ts';

export interface GatewaySchedulingProps {
  readonly stage: string;
  /**
   * The queues schedules deliver to: the run queue (vessels due later) and the webhook queue (later retries) — the
   * queues the functions that schedule may send to, never the others (the turn queue).
   */
  readonly targetQueues: readonly sqs.IQueue[];
}

/**
 * EventBridge Scheduler for what is due later than SQS's 15-minute delay allows — vessels, and webhook retries: a
 * schedule group the gateway's one-time schedules live in, and the role Scheduler assumes to deliver them — it may
 * send to those queues and do nothing else.
 */
export class GatewayScheduling extends Construct {
  readonly group: scheduler.CfnScheduleGroup;
  readonly groupName: string;
  readonly role: iam.Role;

  constructor(scope: Construct, id: string, props: GatewaySchedulingProps) {
    super(scope, id);
    this.groupName = `prompt-gateway-${props.stage}`;
    this.group = new scheduler.CfnScheduleGroup(this, 'Group', { name: this.groupName });

    const { account } = Stack.of(this);
    this.role = new iam.Role(this, 'Role', {
      description: `Prompt gateway (${props.stage}): EventBridge Scheduler delivers due vessels and webhook retries to their queues`,
      // Confused-deputy guard: only schedules in the gateway's group (Scheduler names the group as the source) may
      // assume the role.
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', {
        conditions: { StringEquals: { 'aws:SourceAccount': account, 'aws:SourceArn': this.group.attrArn } },
      }),
    });
    // SQS-managed encryption: no KMS permission is needed to send. No target queue (no function schedules): no right.
    if (props.targetQueues.length) {
      this.role.addToPolicy(new iam.PolicyStatement({ actions: ['sqs:SendMessage'], resources: props.targetQueues.map((q) => q.queueArn) }));
    }
  }

  /** ARN of a schedule in the gateway's group. */
  private scheduleArn(name: string): string {
    return Stack.of(this).formatArn({ service: 'scheduler', resource: 'schedule', resourceName: `${this.groupName}/${name}` });
  }

  /**
   * Lets `fn` create and delete one-time schedules in the gateway's group (and hand them the delivery role), and
   * tells it the group and role (SCHEDULE_GROUP_NAME, SCHEDULER_ROLE_ARN); the target queues' ARNs come with the
   * grants to send to them (GatewayQueues.grantSend).
   */
  grantScheduling(fn: lambda.Function): void {
    fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['scheduler:CreateSchedule', 'scheduler:DeleteSchedule'],
        resources: [this.scheduleArn('*')],
      }),
    );
    this.role.grantPassRole(fn.grantPrincipal);
    fn.addEnvironment('SCHEDULE_GROUP_NAME', this.groupName);
    fn.addEnvironment('SCHEDULER_ROLE_ARN', this.role.roleArn);
    // On the role, whose policy holds the statement (a GatewayFunction's role is not a child of its function).
    const { region, account } = nagEnvironment(this);
    Validations.of(fn.role ?? fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:${region}:${account}:schedule/${this.groupName}/*]`,
      reason:
        "Schedule names are generated per vessel at run time, so the grant names the gateway's schedule group " +
        'and allows any schedule inside it — never schedules of other groups.',
    });
  }
}
