import { chmodSync, existsSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { Scheduler } from '../../lambdas/scheduling/scheduler.ts';

interface StoredSchedule {
  name: string;
  at: string;
  body: string;
}

/**
 * EventBridge Scheduler's stand-in: schedules are kept in a JSON file (so a restart keeps them) and a timer sends
 * each due one to the target queue, then deletes it, as `ActionAfterCompletion: DELETE` does in AWS.
 */
export class LocalScheduler implements Scheduler {
  private readonly schedules = new Map<string, StoredSchedule>();
  private timer: NodeJS.Timeout | undefined;
  private firing = false;

  constructor(
    private readonly opts: { file?: string; sqs: SQSClient; targetQueueUrl: string; tickMs?: number },
  ) {
    if (opts.file && existsSync(opts.file)) {
      for (const s of JSON.parse(readFileSync(opts.file, 'utf8')) as StoredSchedule[]) this.schedules.set(s.name, s);
    }
  }

  async schedule({ name, at, body }: { name: string; at: Date; body: string }): Promise<void> {
    if (this.schedules.has(name)) throw Object.assign(new Error(`Schedule ${name} already exists`), { name: 'ConflictException' });
    this.schedules.set(name, { name, at: at.toISOString(), body });
    this.persist();
  }

  async cancel(name: string): Promise<void> {
    if (this.schedules.delete(name)) this.persist();
  }

  pending(): StoredSchedule[] {
    return [...this.schedules.values()];
  }

  start(): void {
    this.timer ??= setInterval(() => void this.fireDue(), this.opts.tickMs ?? 500);
  }

  stop(): void {
    clearInterval(this.timer);
    this.timer = undefined;
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
          await this.opts.sqs.send(new SendMessageCommand({ QueueUrl: this.opts.targetQueueUrl, MessageBody: s.body }));
          this.schedules.delete(s.name);
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
