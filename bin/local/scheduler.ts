import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { atExpression, ScheduleConflictError, type Scheduler } from '../../lambdas/scheduling/scheduler.ts';
import type { QueueName } from '../../lambdas/store/queues.ts';

export interface StoredSchedule {
  name: string;
  /** When it fires: an ISO time, to the second (EventBridge's `at()` has no milliseconds). */
  at: string;
  /** The message body it delivers (the schedule target's Input). */
  body: string;
  /** The queue it delivers to; absent (schedules kept by an older runtime) means `targetQueueUrl`. */
  queueUrl?: string;
}

export interface LocalSchedulerOptions {
  /** Where pending schedules are kept (DATA_DIR/schedules.json); none keeps them in memory. */
  file?: string;
  sqs: SQSClient;
  /** The queue a schedule delivers to when it names no other (the run queue's fauxqs URL). */
  targetQueueUrl: string;
  /**
   * The queues a schedule created through the endpoint may target, by ARN (RUN_QUEUE_ARN, WEBHOOK_QUEUE_ARN): its
   * Target.Arn must be one of them. Any ARN, delivered to `targetQueueUrl`, when unset.
   */
  targets?: Readonly<Record<string, string>>;
  /** The queues `schedule()` (in process, by queue name) delivers to; a queue not listed is `targetQueueUrl`. */
  queueUrls?: Readonly<Partial<Record<QueueName, string>>>;
  /** The schedule group the endpoint serves (SCHEDULE_GROUP_NAME); default `local`. */
  groupName?: string;
  region?: string;
  tickMs?: number;
}

/** The one-time expression the stand-in accepts: `at(yyyy-mm-ddThh:mm:ss)`, read in UTC. */
const AT_EXPRESSION = /^at\((\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})\)$/;
/** EventBridge Scheduler's rule for schedule names. */
const SCHEDULE_NAME = /^[0-9a-zA-Z\-_.]{1,64}$/;
const MAX_REQUEST_BYTES = 1 << 20;

/** An error answer in the shape the SDK's REST-JSON protocol parses (the x-amzn-errortype header names it). */
class SchedulerError extends Error {
  constructor(
    readonly status: number,
    readonly type: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * EventBridge Scheduler's stand-in. Schedules are kept in a JSON file (so a restart keeps them) and a timer sends
 * each due one to the target queue, then deletes it, as `ActionAfterCompletion: DELETE` does in AWS.
 *
 * Handlers reach it through the real `@aws-sdk/client-scheduler` (lambdas/scheduling/scheduler.ts): `listen()` serves
 * a small endpoint on 127.0.0.1 speaking Scheduler's REST-JSON protocol for the two calls the gateway makes,
 * CreateSchedule (`POST /schedules/{Name}`: one-time `at()` schedules in UTC onto the target queue; an existing name
 * is a 409 ConflictException) and DeleteSchedule (`DELETE /schedules/{Name}?groupName=…`; a missing one is a 404
 * ResourceNotFoundException). Anything else it refuses in the same error shape.
 */
export class LocalScheduler implements Scheduler {
  private readonly schedules = new Map<string, StoredSchedule>();
  private timer: NodeJS.Timeout | undefined;
  private firing = false;
  private server: Server | undefined;
  private url: string | undefined;

  constructor(private readonly opts: LocalSchedulerOptions) {
    if (opts.file && existsSync(opts.file)) {
      for (const s of JSON.parse(readFileSync(opts.file, 'utf8')) as StoredSchedule[]) this.schedules.set(s.name, s);
    }
  }

  /** The group the endpoint serves. */
  get groupName(): string {
    return this.opts.groupName ?? 'local';
  }

  /** The endpoint's URL once `listen()` resolved (SCHEDULER_ENDPOINT). */
  get endpoint(): string | undefined {
    return this.url;
  }

  /** Stores a schedule, to the second as EventBridge does; a name that exists is refused (ScheduleConflictError). */
  async schedule({ name, at, body, queue }: { name: string; at: Date; body: string; queue?: QueueName }): Promise<void> {
    // The time its at() expression names, as a schedule made through the endpoint would have.
    this.add(name, new Date(`${AT_EXPRESSION.exec(atExpression(at))![1]}Z`), body, queue ? this.opts.queueUrls?.[queue] : undefined);
  }

  async cancel(name: string): Promise<void> {
    if (this.schedules.delete(name)) this.persist();
  }

  pending(): StoredSchedule[] {
    return [...this.schedules.values()];
  }

  /** Starts the timer that fires due schedules. */
  start(): void {
    this.timer ??= setInterval(() => void this.fireDue(), this.opts.tickMs ?? 500);
  }

  /** Stops the timer and the endpoint. */
  async stop(): Promise<void> {
    clearInterval(this.timer);
    this.timer = undefined;
    const server = this.server;
    this.server = undefined;
    this.url = undefined;
    if (server) {
      await new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
    }
  }

  /** Serves the Scheduler API on 127.0.0.1 (a free port); resolves to its URL. */
  async listen(): Promise<string> {
    if (this.url) return this.url;
    const server = createServer((req, res) => void this.serve(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => {
        server.off('error', reject);
        resolve();
      });
    });
    this.server = server;
    this.url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
    return this.url;
  }

  /** Sends every schedule whose time has come; a failed send stays for the next tick. */
  async fireDue(now = new Date()): Promise<number> {
    if (this.firing) return 0;
    this.firing = true;
    let fired = 0;
    try {
      for (const s of [...this.schedules.values()]) {
        if (new Date(s.at) > now) continue;
        try {
          await this.opts.sqs.send(new SendMessageCommand({ QueueUrl: s.queueUrl ?? this.opts.targetQueueUrl, MessageBody: s.body }));
          // Unless it was cancelled (and perhaps created anew) while the message was on its way.
          if (this.schedules.get(s.name) === s) this.schedules.delete(s.name);
          fired++;
        } catch {
          // retried on the next tick
        }
      }
      if (fired) this.persist();
    } finally {
      this.firing = false;
    }
    return fired;
  }

  private add(name: string, at: Date, body: string, queueUrl?: string): void {
    if (this.schedules.has(name)) throw new ScheduleConflictError(name);
    this.schedules.set(name, { name, at: at.toISOString(), body, ...(queueUrl ? { queueUrl } : {}) });
    this.persist();
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const url = new URL(req.url ?? '/', 'http://scheduler.local');
      const match = /^\/schedules\/([^/]+)$/.exec(url.pathname);
      const body = await readRequest(req);
      if (!match)
        throw new SchedulerError(
          404,
          'UnknownOperationException',
          `The scheduler stand-in serves CreateSchedule and DeleteSchedule only, not ${req.method} ${url.pathname}`,
        );
      const name = decodeURIComponent(match[1]!);
      if (req.method === 'POST') {
        answer(res, 200, this.create(name, parseJson(body)));
      } else if (req.method === 'DELETE') {
        this.remove(name, url.searchParams.get('groupName') ?? 'default');
        answer(res, 200, {});
      } else {
        throw new SchedulerError(
          404,
          'UnknownOperationException',
          `The scheduler stand-in serves CreateSchedule and DeleteSchedule only, not ${req.method} ${url.pathname}`,
        );
      }
    } catch (err) {
      if (err instanceof SchedulerError) {
        answer(res, err.status, { Message: err.message }, err.type);
      } else {
        console.error(`scheduler stand-in failed: ${(err as Error)?.stack ?? String(err)}`);
        answer(res, 500, { Message: (err as Error).message }, 'InternalServerException');
      }
    }
  }

  /** CreateSchedule: a one-time schedule in UTC onto the target queue, deleted once it has fired. */
  private create(name: string, input: Record<string, unknown>): { ScheduleArn: string } {
    const invalid = (message: string) => new SchedulerError(400, 'ValidationException', message);
    if (!SCHEDULE_NAME.test(name)) throw invalid(`Schedule name ${JSON.stringify(name)} must be 1 to 64 of [0-9a-zA-Z-_.]`);
    this.checkGroup(typeof input.GroupName === 'string' ? input.GroupName : 'default');
    const expression = typeof input.ScheduleExpression === 'string' ? input.ScheduleExpression : '';
    const at = AT_EXPRESSION.exec(expression);
    const when = at ? new Date(`${at[1]}Z`) : undefined;
    if (!when || Number.isNaN(when.getTime())) {
      throw invalid(`ScheduleExpression ${JSON.stringify(expression)}: the stand-in takes one-time schedules only, at(yyyy-mm-ddThh:mm:ss)`);
    }
    const zone = input.ScheduleExpressionTimezone;
    if (zone !== undefined && zone !== 'UTC') throw invalid(`ScheduleExpressionTimezone ${JSON.stringify(zone)}: the stand-in takes UTC only`);
    const window = input.FlexibleTimeWindow as { Mode?: unknown } | undefined;
    if (window?.Mode !== 'OFF') throw invalid('FlexibleTimeWindow must be {"Mode":"OFF"} (the stand-in fires at the time given)');
    if (input.ActionAfterCompletion !== 'DELETE') throw invalid('ActionAfterCompletion must be DELETE (the stand-in deletes a schedule once it has fired)');
    const target = (input.Target ?? {}) as { Arn?: unknown; RoleArn?: unknown; Input?: unknown };
    if (typeof target.Arn !== 'string' || typeof target.RoleArn !== 'string') throw invalid('Target needs Arn and RoleArn');
    const targets = this.opts.targets;
    const queueUrl = targets ? targets[target.Arn] : undefined;
    if (targets && !queueUrl) {
      throw invalid(`Target.Arn ${target.Arn} is not a queue the stand-in delivers to (${Object.keys(targets).join(', ')})`);
    }
    if (typeof target.Input !== 'string') throw invalid('Target.Input (the message body) is required');
    try {
      this.add(name, when, target.Input, queueUrl);
    } catch (err) {
      if (err instanceof ScheduleConflictError) throw new SchedulerError(409, 'ConflictException', `Schedule ${name} already exists.`);
      throw err;
    }
    return { ScheduleArn: `arn:aws:scheduler:${this.opts.region ?? 'us-east-1'}:000000000000:schedule/${this.groupName}/${name}` };
  }

  /** DeleteSchedule. */
  private remove(name: string, group: string): void {
    this.checkGroup(group);
    if (!this.schedules.delete(name)) throw new SchedulerError(404, 'ResourceNotFoundException', `Schedule ${name} does not exist.`);
    this.persist();
  }

  private checkGroup(group: string): void {
    if (group !== this.groupName) throw new SchedulerError(404, 'ResourceNotFoundException', `Schedule group ${group} does not exist.`);
  }

  private persist(): void {
    if (!this.opts.file) return;
    // Owner-only, like everything in DATA_DIR. `mode` applies only to a new file, so a temp file left behind by a
    // crash is tightened before it is written again.
    const tmp = `${this.opts.file}.tmp`;
    writeFileSync(tmp, JSON.stringify(this.pending(), null, 2), { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, this.opts.file);
  }
}

function readRequest(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      // Past the limit the rest is read and dropped, so the refusal can still be answered.
      if (size <= MAX_REQUEST_BYTES) chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > MAX_REQUEST_BYTES) reject(new SchedulerError(400, 'ValidationException', `Request larger than ${MAX_REQUEST_BYTES} bytes`));
      else resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', reject);
  });
}

function parseJson(text: string): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text || '{}');
    if (value && typeof value === 'object' && !Array.isArray(value)) return value as Record<string, unknown>;
  } catch {
    // answered below
  }
  throw new SchedulerError(400, 'ValidationException', 'The request body is not a JSON object');
}

function answer(res: ServerResponse, status: number, body: unknown, errorType?: string): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(text),
    'x-amzn-requestid': randomUUID(),
    ...(errorType ? { 'x-amzn-errortype': errorType } : {}),
  });
  res.end(text);
}
