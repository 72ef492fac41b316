import { describe, expect, it } from 'vitest';
import type { QueueSender } from '../../lambdas/queues/sender.ts';
import { deliverAt, delayUntil, needsSchedule, type Delivery } from '../../lambdas/scheduling/delay.ts';
import { ScheduleConflictError, type Scheduler } from '../../lambdas/scheduling/scheduler.ts';

/**
 * "Deliver at time T" (lambdas/scheduling/delay.ts) against inline fakes of the queue and the scheduler: which of the
 * two it takes, the delay's rounding, a schedule's lead, and a repeated schedule. The real queue and scheduler are
 * test/scheduling/scheduler.test.ts's and test/webhooks/long-waits.test.ts's.
 */

const NOW = new Date('2026-11-22T16:30:00.000Z');
const MINUTE = 60_000;

function channels(opts: { conflict?: boolean } = {}) {
  const sends: Array<{ queue: string; body: unknown; delaySeconds?: number }> = [];
  const schedules: Array<{ name: string; at: string; body: string; queue?: string }> = [];
  const sender: QueueSender = {
    send: async (queue, body, options = {}) => {
      sends.push({ queue, body, ...options });
      return 'id';
    },
    sendToDeadLetter: async () => 'id',
  };
  const scheduler: Scheduler = {
    schedule: async ({ name, at, body, queue }) => {
      if (opts.conflict) throw new ScheduleConflictError(name);
      schedules.push({ name, at: at.toISOString(), body, ...(queue ? { queue } : {}) });
    },
    cancel: async () => undefined,
  };
  return { sends, schedules, use: { sender, scheduler } };
}

const delivery = (over: Partial<Delivery>): Delivery => ({
  queue: 'run',
  message: { vesselId: 'v1' },
  at: NOW.getTime(),
  now: NOW,
  scheduleName: 'vessel-v1',
  round: 'down',
  ...over,
});

describe('deliverAt', () => {
  it('due now or in the past: a message at once, no delay', async () => {
    const c = channels();
    await deliverAt(delivery({ at: NOW.getTime() - 5_000 }), c.use);
    await deliverAt(delivery({}), c.use);
    expect(c.sends).toEqual([
      { queue: 'run', body: { vesselId: 'v1' }, delaySeconds: 0 },
      { queue: 'run', body: { vesselId: 'v1' }, delaySeconds: 0 },
    ]);
    expect(c.schedules).toEqual([]);
  });

  it('within 15 minutes: a delayed message, rounded down (a second early at most) or up (never early)', async () => {
    const c = channels();
    await deliverAt(delivery({ at: NOW.getTime() + 14 * MINUTE + 700 }), c.use);
    await deliverAt(delivery({ queue: 'webhook', at: NOW.getTime() + 14 * MINUTE + 700, round: 'up' }), c.use);
    await deliverAt(delivery({ at: NOW.getTime() + 15 * MINUTE }), c.use);
    expect(c.sends.map((s) => [s.queue, s.delaySeconds])).toEqual([
      ['run', 840],
      ['webhook', 841],
      ['run', 900],
    ]);
    expect(c.schedules).toEqual([]);
  });

  it("beyond 15 minutes: a schedule onto the delivery's queue, `leadMs` before it is due, with the same bytes", async () => {
    const c = channels();
    const at = NOW.getTime() + 15 * MINUTE + 1;
    await deliverAt(delivery({ at, leadMs: MINUTE }), c.use);
    await deliverAt(delivery({ queue: 'webhook', scheduleName: 'webhook-v1-1-3', at, round: 'up' }), c.use);
    expect(c.sends).toEqual([]);
    expect(c.schedules).toEqual([
      { name: 'vessel-v1', at: new Date(at - MINUTE).toISOString(), body: JSON.stringify({ vesselId: 'v1' }), queue: 'run' },
      { name: 'webhook-v1-1-3', at: new Date(at).toISOString(), body: JSON.stringify({ vesselId: 'v1' }), queue: 'webhook' },
    ]);
  });

  it('a schedule whose name is taken: thrown, unless the delivery says it is its own (`onConflict: ignore`)', async () => {
    const c = channels({ conflict: true });
    const far = NOW.getTime() + 20 * MINUTE;
    await expect(deliverAt(delivery({ at: far }), c.use)).rejects.toBeInstanceOf(ScheduleConflictError);
    await expect(deliverAt(delivery({ at: far, onConflict: 'ignore' }), c.use)).resolves.toBeUndefined();
  });

  it('any other failure of the scheduler is thrown even with `onConflict: ignore`', async () => {
    const c = channels();
    c.use.scheduler.schedule = async () => {
      throw new Error('throttled');
    };
    await expect(deliverAt(delivery({ at: NOW.getTime() + 20 * MINUTE, onConflict: 'ignore' }), c.use)).rejects.toThrow('throttled');
  });
});

describe('needsSchedule and delayUntil', () => {
  it('exactly 15 minutes is still a delay; a millisecond more is a schedule', () => {
    expect(needsSchedule(NOW.getTime() + 15 * MINUTE, NOW)).toBe(false);
    expect(needsSchedule(NOW.getTime() + 15 * MINUTE + 1, NOW)).toBe(true);
  });

  it('whole seconds, never negative, at most 900', () => {
    expect(delayUntil(NOW.getTime() + 1_999, NOW)).toBe(1);
    expect(delayUntil(NOW.getTime() + 1_001, NOW, 'up')).toBe(2);
    expect(delayUntil(NOW.getTime() - 1_000, NOW, 'up')).toBe(0);
    expect(delayUntil(NOW.getTime() + 60 * MINUTE, NOW)).toBe(900);
  });
});
