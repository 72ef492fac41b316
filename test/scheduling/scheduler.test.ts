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
import { ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { sqsClient, startLocalQueues, type LocalQueues } from '../../bin/local/queues.ts';
import { LocalScheduler } from '../../bin/local/scheduler.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { atExpression, isScheduleConflict, ScheduleConflictError, scheduler } from '../../lambdas/scheduling/scheduler.ts';

const ROLE = 'arn:aws:iam::000000000000:role/local-scheduler-delivery';
const SCHEDULER_ENV = ['SCHEDULER_ENDPOINT', 'SCHEDULE_GROUP_NAME', 'SCHEDULER_ROLE_ARN', 'RUN_QUEUE_ARN'] as const;

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
  stand_in = new LocalScheduler({ file, sqs, targetQueueUrl: queues.urls.RUN_QUEUE_URL, targetQueueArn: queues.arns.run, groupName: 'local' });
  endpoint = await stand_in.listen();
  raw = new SchedulerClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
  // What the local runtime gives every handler.
  Object.assign(process.env, { SCHEDULER_ENDPOINT: endpoint, SCHEDULE_GROUP_NAME: 'local', SCHEDULER_ROLE_ARN: ROLE, RUN_QUEUE_ARN: queues.arns.run });
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

async function runQueueBodies(): Promise<string[]> {
  const out = await sqs.send(new ReceiveMessageCommand({ QueueUrl: queues.urls.RUN_QUEUE_URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 0 }));
  return (out.Messages ?? []).map((m) => m.Body ?? '');
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
  it('the run queue has a real ARN from fauxqs, the schedules\' target', () => {
    expect(queues.arns.run).toMatch(/^arn:aws:sqs:[a-z0-9-]+:\d{12}:sch-run$/);
    expect(queues.arns.webhook).toMatch(/:sch-webhook$/);
  });

  it('creates a schedule (to the second, in UTC, persisted), refuses the same name as a conflict, cancels, and a missing cancel is fine', async () => {
    const at = new Date('2031-05-06T07:08:09.876Z');
    await scheduler().schedule({ name: 'vessel-a', at, body: '{"vesselId":"a"}' });
    expect(stand_in.pending()).toEqual([{ name: 'vessel-a', at: '2031-05-06T07:08:09.000Z', body: '{"vesselId":"a"}' }]);
    expect(JSON.parse(readFileSync(file, 'utf8'))).toEqual(stand_in.pending());

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
    expect(stand_in.pending()).toEqual([{ name: 'vessel-a', at: '2031-05-06T07:08:09.000Z', body: '{"vesselId":"a"}' }]);

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
      message: expect.stringContaining('is not the queue the stand-in delivers to'),
    });
    expect(await refused(createInput('r', { ScheduleExpression: 'rate(5 minutes)' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('c', { ScheduleExpression: 'at(2030-01-01T00:00:00.123)' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('z', { ScheduleExpressionTimezone: 'Europe/Paris' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('n', { ActionAfterCompletion: 'NONE' }))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('bad name!'))).toBeInstanceOf(ValidationException);
    expect(await refused(createInput('x'.repeat(65)))).toBeInstanceOf(ValidationException);
    expect(stand_in.pending()).toEqual([]);
    await expect(raw.send(new DeleteScheduleCommand({ Name: 'g', GroupName: 'default' }))).rejects.toBeInstanceOf(ResourceNotFoundException);
    // Operations the gateway never makes are refused by name.
    await expect(raw.send(new GetScheduleCommand({ Name: 'g', GroupName: 'local' }))).rejects.toMatchObject({ name: 'UnknownOperationException', $metadata: { httpStatusCode: 404 } });
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
