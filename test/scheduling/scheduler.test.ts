import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  ConflictException,
  CreateScheduleCommand,
  DeleteScheduleCommand,
  GetScheduleCommand,
  ResourceNotFoundException,
  SchedulerClient,
  ValidationException,
  type CreateScheduleCommandInput,
} from '@aws-sdk/client-scheduler';
import { GetQueueAttributesCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sqsClient, startLocalQueues, type LocalQueues } from '../../bin/local/queues.ts';
import { LocalScheduler } from '../../bin/local/scheduler.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { atExpression, isScheduleConflict, ScheduleConflictError, scheduler } from '../../lambdas/scheduling/scheduler.ts';

const ROLE = 'arn:aws:iam::000000000000:role/local-scheduler-delivery';
const SCHEDULER_ENV = ['SCHEDULER_ENDPOINT', 'SCHEDULE_GROUP_NAME', 'SCHEDULER_ROLE_ARN', 'RUN_QUEUE_ARN', 'WEBHOOK_QUEUE_ARN'] as const;

let queues: LocalQueues;
let sqs: SQSClient;
let stand_in: LocalScheduler;
let endpoint: string;
let raw: SchedulerClient;
const dir = mkdtempSync(join(tmpdir(), 'gw-scheduler-'));
const file = join(dir, 'schedules.json');
const saved = Object.fromEntries(SCHEDULER_ENV.map((name) => [name, process.env[name]]));

beforeAll(async () => {
  queues = await startLocalQueues('sch');
  sqs = sqsClient(queues.endpoint);
  // As the local runtime builds it: each queue a schedule may target, by ARN.
  stand_in = new LocalScheduler({
    file,
    sqs,
    targetQueueUrl: queues.urls.RUN_QUEUE_URL,
    targets: { [queues.arns.run]: queues.urls.RUN_QUEUE_URL, [queues.arns.webhook]: queues.urls.WEBHOOK_QUEUE_URL },
    groupName: 'local',
  });
  endpoint = await stand_in.listen();
  raw = new SchedulerClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
  // What the local runtime gives every handler.
  Object.assign(process.env, {
    SCHEDULER_ENDPOINT: endpoint,
    SCHEDULE_GROUP_NAME: 'local',
    SCHEDULER_ROLE_ARN: ROLE,
    RUN_QUEUE_ARN: queues.arns.run,
    WEBHOOK_QUEUE_ARN: queues.arns.webhook,
  });
  resetInstanceState();
});
afterEach(() => {
  for (const s of stand_in.pending()) void stand_in.cancel(s.name);
});
afterAll(async () => {
  for (const name of SCHEDULER_ENV) {
    if (saved[name] === undefined) delete process.env[name];
    else process.env[name] = saved[name];
  }
  resetInstanceState();
  raw?.destroy();
  await stand_in?.stop();
  sqs?.destroy();
  await queues?.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function bodiesOf(queueUrl: string): Promise<string[]> {
  const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }));
  return (out.Messages ?? []).map((m) => m.Body ?? '');
}
const runQueueBodies = () => bodiesOf(queues.urls.RUN_QUEUE_URL);
const webhookQueueBodies = () => bodiesOf(queues.urls.WEBHOOK_QUEUE_URL);

/** Runs `fn` with `name` unset in the environment (and a fresh scheduler()), then puts it back. */
async function without<T>(name: (typeof SCHEDULER_ENV)[number], fn: () => Promise<T> | T): Promise<T> {
  const value = process.env[name];
  delete process.env[name];
  resetInstanceState();
  try {
    return await fn();
  } finally {
    process.env[name] = value;
    resetInstanceState();
  }
}

const createInput = (name: string, overrides: Partial<CreateScheduleCommandInput> = {}): CreateScheduleCommandInput => ({
  Name: name,
  GroupName: 'local',
  ScheduleExpression: 'at(2030-01-01T00:00:00)',
  ScheduleExpressionTimezone: 'UTC',
  FlexibleTimeWindow: { Mode: 'OFF' },
  ActionAfterCompletion: 'DELETE',
  Target: { Arn: queues.arns.run, RoleArn: ROLE, Input: '{}' },
  ...overrides,
});

describe('scheduler() through the real Scheduler client, against the local stand-in', () => {
  it("the run queue has a real ARN from fauxqs, the schedules' target", () => {
    expect(queues.arns.run).toMatch(/^arn:aws:sqs:[a-z0-9-]+:\d{12}:sch-run$/);
    expect(queues.arns.webhook).toMatch(/:sch-webhook$/);
  });

  it('creates a schedule (to the second, in UTC, persisted), refuses the same name as a conflict, cancels, and a missing cancel is fine', async () => {
    const at = new Date('2031-05-06T07:08:09.876Z');
    await scheduler().schedule({ name: 'vessel-a', at, body: '{"vesselId":"a"}' });
    const stored = { name: 'vessel-a', at: '2031-05-06T07:08:09.000Z', body: '{"vesselId":"a"}', queueUrl: queues.urls.RUN_QUEUE_URL };
    expect(stand_in.pending()).toEqual([stored]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual([stored]);

    const conflict = await scheduler()
      .schedule({ name: 'vessel-a', at, body: '{"vesselId":"other"}' })
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(conflict).toBeInstanceOf(ScheduleConflictError);
    expect(isScheduleConflict(conflict)).toBe(true);
    expect(conflict).toMatchObject({ scheduleName: 'vessel-a', message: 'Schedule vessel-a already exists', cause: { name: 'ConflictException' } });
    // The first one is untouched.
    expect(stand_in.pending()).toEqual([stored]);

    await scheduler().cancel('vessel-a');
    expect(stand_in.pending()).toEqual([]);
    await expect(scheduler().cancel('vessel-a')).resolves.toBeUndefined();
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual([]);
  });

  it('answers in the wire shapes the SDK parses: the ARN, 409 ConflictException, 404 ResourceNotFoundException', async () => {
    const created = await raw.send(new CreateScheduleCommand(createInput('wire')));
    expect(created.ScheduleArn).toBe('arn:aws:scheduler:us-east-1:000000000000:schedule/local/wire');
    expect(created.$metadata.httpStatusCode).toBe(200);

    const conflict = await raw.send(new CreateScheduleCommand(createInput('wire'))).catch((err: unknown) => err);
    expect(conflict).toBeInstanceOf(ConflictException);
    expect(conflict).toMatchObject({ name: 'ConflictException', message: 'Schedule wire already exists.', $metadata: { httpStatusCode: 409 } });

    await expect(raw.send(new DeleteScheduleCommand({ Name: 'wire', GroupName: 'local' }))).resolves.toMatchObject({ $metadata: { httpStatusCode: 200 } });
    const missing = await raw.send(new DeleteScheduleCommand({ Name: 'wire', GroupName: 'local' })).catch((err: unknown) => err);
    expect(missing).toBeInstanceOf(ResourceNotFoundException);
    expect(missing).toMatchObject({ message: 'Schedule wire does not exist.', $metadata: { httpStatusCode: 404 } });
  });

  it('refuses what it cannot honour as AWS would refuse a bad request: another group, target, expression, time zone or name', async () => {
    const refused = (input: CreateScheduleCommandInput) => raw.send(new CreateScheduleCommand(input)).catch((err: unknown) => err);
    expect(await refused(createInput('g', { GroupName: 'default' }))).toBeInstanceOf(ResourceNotFoundException);
    expect(await refused(createInput('g', { GroupName: undefined }))).toBeInstanceOf(ResourceNotFoundException);
    expect(await refused(createInput('t', { Target: { Arn: 'arn:aws:sqs:us-east-1:000000000000:elsewhere', RoleArn: ROLE, Input: '{}' } }))).toMatchObject({
      name: 'ValidationException',
      message: expect.stringContaining('Target.Arn arn:aws:sqs:us-east-1:000000000000:elsewhere is not a queue the stand-in delivers to'),
    });
    // A real queue that is not a target (a dead-letter queue) is refused as well, the message naming the targets.
    const dlqArn = (
      await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL, AttributeNames: ['QueueArn'] }))
    ).Attributes?.QueueArn;
    expect(dlqArn).toMatch(/:sch-webhook-dlq$/);
    const toDlq = await refused(createInput('d', { Target: { Arn: dlqArn, RoleArn: ROLE, Input: '{}' } }));
    expect(toDlq).toBeInstanceOf(ValidationException);
    expect(toDlq).toMatchObject({ message: expect.stringContaining(queues.arns.run), $metadata: { httpStatusCode: 400 } });
    expect(toDlq).toMatchObject({ message: expect.stringContaining(queues.arns.webhook) });
    expect(await refused(createInput('r', { ScheduleExpression: 'rate(5 minutes)' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('c', { ScheduleExpression: 'at(2030-01-01T00:00:00.123)' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('z', { ScheduleExpressionTimezone: 'Europe/Paris' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('n', { ActionAfterCompletion: 'NONE' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('bad name!'))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('x'.repeat(65)))).toBeInstanceOf(ValidationException);
    expect(stand_in.pending()).toEqual([]);
    await expect(raw.send(new DeleteScheduleCommand({ Name: 'g', GroupName: 'default' }))).rejects.toBeInstanceOf(ResourceNotFoundException);
    // Operations the gateway never makes are refused by name.
    await expect(raw.send(new GetScheduleCommand({ Name: 'g', GroupName: 'local' }))).rejects.toMatchObject({
      name: 'UnknownOperationException',
      $metadata: { httpStatusCode: 404 },
    });
  });

  it('fires a schedule onto the fauxqs run queue when its second comes (fireDue with a fake now), once, and forgets it', async () => {
    const at = new Date(Date.now() + 3 * 3_600_000);
    await scheduler().schedule({ name: 'vessel-later', at, body: '{"vesselId":"later","driveId":"d1"}' });
    const due = new Date(stand_in.pending()[0]!.at);
    expect(due.getTime()).toBe(Math.floor(at.getTime() / 1000) * 1000);
    expect(await stand_in.fireDue(new Date(due.getTime() - 1))).toBe(0);
    expect(await runQueueBodies()).toEqual([]);
    expect(await stand_in.fireDue(due)).toBe(1);
    expect(await runQueueBodies()).toEqual(['{"vesselId":"later","driveId":"d1"}']);
    expect(stand_in.pending()).toEqual([]);
    expect(await stand_in.fireDue(new Date(due.getTime() + 60_000))).toBe(0);
    // A fired schedule's name is free again (ActionAfterCompletion: DELETE).
    await scheduler().schedule({ name: 'vessel-later', at, body: 'again' });
    expect(stand_in.pending().map((s) => s.name)).toEqual(['vessel-later']);
    // Nothing went to the webhook queue.
    expect(await webhookQueueBodies()).toEqual([]);
  });

  it("schedules onto the webhook queue with queue: 'webhook' (its ARN, WEBHOOK_QUEUE_ARN), and fires there, not on the run queue", async () => {
    const at = new Date(Date.now() + 2 * 3_600_000);
    const body = '{"vesselId":"v1","round":1,"attempt":5}';
    await scheduler().schedule({ name: 'webhook-v1-1-5', at, body, queue: 'webhook' });
    const due = `${at.toISOString().slice(0, 19)}.000Z`;
    // The stand-in resolved the target ARN to the webhook queue: it accepts only the ARNs it was given.
    expect(stand_in.pending()).toEqual([{ name: 'webhook-v1-1-5', at: due, body, queueUrl: queues.urls.WEBHOOK_QUEUE_URL }]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(stand_in.pending());
    // The same target through the raw client: Target.Arn is the webhook queue's.
    await raw.send(new CreateScheduleCommand(createInput('raw-webhook', { Target: { Arn: queues.arns.webhook, RoleArn: ROLE, Input: '{"raw":true}' } })));
    expect(stand_in.pending().find((p) => p.name === 'raw-webhook')?.queueUrl).toBe(queues.urls.WEBHOOK_QUEUE_URL);
    await scheduler().cancel('raw-webhook');

    expect(await stand_in.fireDue(new Date(new Date(due).getTime() - 1))).toBe(0);
    expect(await stand_in.fireDue(new Date(due))).toBe(1);
    expect(await webhookQueueBodies()).toEqual([body]);
    expect(await runQueueBodies()).toEqual([]);
    expect(stand_in.pending()).toEqual([]);
  });

  it("a function not told a queue's ARN may not schedule onto that queue, and is told which variable is missing", async () => {
    const at = new Date(Date.now() + 2 * 3_600_000);
    await without('WEBHOOK_QUEUE_ARN', async () => {
      await expect(scheduler().schedule({ name: 'no-webhook', at, body: '{}', queue: 'webhook' })).rejects.toThrow(
        'WEBHOOK_QUEUE_ARN is not set: this function may not schedule onto the webhook queue (manifest access.queues)',
      );
      // The run queue, which it was told, still works.
      await scheduler().schedule({ name: 'still-run', at, body: '{}' });
    });
    await without('RUN_QUEUE_ARN', async () => {
      await expect(scheduler().schedule({ name: 'no-run', at, body: '{}' })).rejects.toThrow(/^RUN_QUEUE_ARN is not set/);
    });
    // Nothing was created for the refused ones.
    expect(stand_in.pending().map((p) => p.name)).toEqual(['still-run']);
  });

  it('a stand-in given no targets accepts any Target.Arn and delivers to its default queue (schedules stored without queueUrl)', async () => {
    const loose = new LocalScheduler({ sqs, targetQueueUrl: queues.urls.RUN_QUEUE_URL, groupName: 'local' });
    const looseClient = new SchedulerClient({
      endpoint: await loose.listen(),
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    });
    try {
      await looseClient.send(
        new CreateScheduleCommand(createInput('anywhere', { Target: { Arn: 'arn:aws:sqs:us-east-1:000000000000:elsewhere', RoleArn: ROLE, Input: '"x"' } })),
      );
      expect(loose.pending()).toEqual([{ name: 'anywhere', at: '2030-01-01T00:00:00.000Z', body: '"x"' }]);
      expect(await loose.fireDue(new Date('2030-01-01T00:00:00.000Z'))).toBe(1);
      expect(await runQueueBodies()).toEqual(['"x"']);
    } finally {
      looseClient.destroy();
      await loose.stop();
    }
  });

  it('a function without the scheduler environment may not schedule, and is told why', () => {
    const group = process.env.SCHEDULE_GROUP_NAME;
    delete process.env.SCHEDULE_GROUP_NAME;
    resetInstanceState();
    try {
      expect(() => scheduler()).toThrow('SCHEDULE_GROUP_NAME is not set: this function may not schedule: manifest access.scheduler');
    } finally {
      process.env.SCHEDULE_GROUP_NAME = group;
      resetInstanceState();
    }
    expect(scheduler()).toBe(scheduler());
  });

  it('at() expressions are UTC to the second', () => {
    expect(atExpression(new Date('2030-02-03T04:05:06.999Z'))).toBe('at(2030-02-03T04:05:06)');
    expect(() => atExpression(new Date('nope'))).toThrow(RangeError);
    expect(isScheduleConflict(new Error('x'))).toBe(false);
    expect(isScheduleConflict(undefined)).toBe(false);
  });
});
