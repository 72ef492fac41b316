import { createServer, connect, type Server, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { idempotencyItems, MODEL, runQueueCounts, vesselApi, vesselItems } from './incubate-client.ts';

/**
 * A queue (or scheduler) that does not take the trigger: 503 trigger_failed, and nothing half-made — no vessel that
 * would never run, no idempotency key that would block the retry (docs/incubate.md, "Errors"). Once it is back, the
 * same key queues the vessel and it runs.
 *
 * The handlers reach SQS and the scheduler stand-in through a switch of this test's (SQS_ENDPOINT and
 * SCHEDULER_ENDPOINT point at it): while "down" it resets every connection, as an unreachable service does; once "up"
 * it relays to fauxqs and to the stand-in. The runtime's own pollers and the stand-in's deliveries talk to fauxqs
 * directly, so only the handlers' sends are cut.
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let sqsSwitch: Relay;
let schedulerSwitch: Relay;

interface Relay {
  url: string;
  up: boolean;
  target?: string;
  close(): Promise<void>;
}

/** A TCP relay that resets connections while down and pipes them to `target` while up. */
async function relay(): Promise<Relay> {
  const sockets = new Set<Socket>();
  const state: { up: boolean; target?: string } = { up: false };
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => undefined);
    if (!state.up || !state.target) {
      client.resetAndDestroy();
      return;
    }
    const { hostname, port } = new URL(state.target);
    const upstream = connect(Number(port), hostname);
    sockets.add(upstream);
    upstream.on('close', () => sockets.delete(upstream));
    upstream.on('error', () => client.destroy());
    client.on('error', () => upstream.destroy());
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    get up() {
      return state.up;
    },
    set up(v: boolean) {
      state.up = v;
      // Connections kept alive from before do not outlive a switch.
      for (const s of sockets) s.destroy();
    },
    get target() {
      return state.target;
    },
    set target(t: string | undefined) {
      state.target = t;
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy();
        server.close(() => r());
      }),
  };
}

beforeAll(async () => {
  sqsSwitch = await relay();
  schedulerSwitch = await relay();
  gw = await startTestGateway({ env: { SQS_ENDPOINT: sqsSwitch.url, SCHEDULER_ENDPOINT: schedulerSwitch.url } });
  sqsSwitch.target = gw.queues.endpoint;
  schedulerSwitch.target = gw.scheduler.endpoint;
  api = vesselApi(gw);
});
afterAll(async () => {
  await gw?.stop();
  await sqsSwitch?.close();
  await schedulerSwitch?.close();
});

const runQueueDown = {
  error: 'trigger_failed',
  message: 'The run queue is unavailable, so the vessel was not queued (nothing was kept; retry with the same idempotencyKey)',
};

describe('the run queue unreachable', () => {
  it('503 trigger_failed; no vessel and no key left; once the queue is back the same key queues the vessel, and it runs', async () => {
    sqsSwitch.up = false;
    const token = await gw.token({ user: 'tf-user' });
    const body = { message: 'Retry me [[words:2]]', idempotencyKey: 'tf-1', options: { token, model: MODEL } };
    for (const attempt of [1, 2]) {
      const res = await api.incubate(body);
      expect({ status: res.status, body: res.body }, `attempt ${attempt}`).toEqual({ status: 503, body: runQueueDown });
      expect(await vesselItems(gw.projectId)).toEqual([]);
      expect(await idempotencyItems(gw.projectId)).toEqual([]);
    }
    // A delayed vessel (ttl) rides the same queue.
    const delayed = await api.incubate({ ...body, idempotencyKey: 'tf-2', ttl: 30 });
    expect({ status: delayed.status, body: delayed.body }).toEqual({ status: 503, body: runQueueDown });
    expect(await vesselItems(gw.projectId)).toEqual([]);
    expect(await runQueueCounts(gw)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });

    sqsSwitch.up = true;
    const res = await api.incubate(body);
    expect(res.status).toBe(202);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(res.body).toMatchObject({ idempotencyKey: 'tf-1', status: 'queued' });
    const done = await api.ended(res.body.vesselId, token);
    expect(done).toMatchObject({ status: 'COMPLETED', output: { success: true, text: 'word1 word2' } });
    expect(await vesselItems(gw.projectId)).toHaveLength(1);
    expect((await api.incubate(body)).status).toBe(200);
  });

  it('a batch: every item failed with trigger_failed is the 503; nothing kept', async () => {
    sqsSwitch.up = false;
    const token = await gw.token({ user: 'tf-batch' });
    const before = (await vesselItems(gw.projectId)).length;
    const items = [
      { message: 'a', idempotencyKey: 'tfb-1' },
      { message: 'b', idempotencyKey: 'tfb-2' },
    ];
    const res = await api.batch({ items, options: { token, model: MODEL } });
    expect({ status: res.status, body: res.body }).toEqual({
      status: 503,
      body: { error: 'trigger_failed', message: 'The run queue is unavailable, so no vessel of the batch was queued (nothing was kept; retry the batch)' },
    });
    expect(await vesselItems(gw.projectId)).toHaveLength(before);

    // One item that fails on its own (a duplicate) does not turn the batch into a 503 for the others' sake: it is
    // still the 202 with every item's failure, since not every failure is the queue's.
    const mixed = await api.batch({ items: [...items, { message: 'c', idempotencyKey: 'tfb-1' }], options: { token, model: MODEL } });
    expect(mixed.status).toBe(202);
    expect(mixed.body).toEqual({
      total: 3,
      queued: 0,
      failed: 3,
      items: [
        { index: 0, idempotencyKey: 'tfb-1', status: 'failed', error: { code: 'trigger_failed', message: runQueueDown.message } },
        { index: 1, idempotencyKey: 'tfb-2', status: 'failed', error: { code: 'trigger_failed', message: runQueueDown.message } },
        {
          index: 2,
          idempotencyKey: 'tfb-1',
          status: 'failed',
          error: { code: 'duplicate_idempotency_key', message: 'items.2: idempotencyKey "tfb-1" appears earlier in this batch' },
        },
      ],
    });
    expect(await vesselItems(gw.projectId)).toHaveLength(before);

    sqsSwitch.up = true;
    const retried = await api.batch({ items, options: { token, model: MODEL } });
    expect(retried.status).toBe(202);
    expect(retried.body).toMatchObject({ total: 2, queued: 2, failed: 0 });
    for (const e of (retried.body as { items: { vesselId: string }[] }).items) expect((await api.ended(e.vesselId, token)).status).toBe('COMPLETED');
  });
});

describe('the scheduler unreachable', () => {
  it('a far vessel: 503 trigger_failed naming the scheduler; nothing kept; once it is back the same key is scheduled', async () => {
    sqsSwitch.up = true;
    schedulerSwitch.up = false;
    const token = await gw.token({ user: 'tf-far' });
    const before = (await vesselItems(gw.projectId)).length;
    const executeAt = new Date(Math.ceil((Date.now() + 3 * 3_600_000) / 1_000) * 1_000).toISOString();
    const body = { message: 'Far', idempotencyKey: 'tf-far-1', options: { token, model: MODEL }, executeAt };
    const res = await api.incubate(body);
    expect({ status: res.status, body: res.body }).toEqual({
      status: 503,
      body: {
        error: 'trigger_failed',
        message: 'The scheduler is unavailable, so the vessel was not queued (nothing was kept; retry with the same idempotencyKey)',
      },
    });
    expect(await vesselItems(gw.projectId)).toHaveLength(before);
    expect(gw.scheduler.pending()).toEqual([]);

    schedulerSwitch.up = true;
    const ok = await api.incubate(body);
    expect(ok.status).toBe(202);
    expect(ok.body).toMatchObject({ idempotencyKey: 'tf-far-1', scheduledFor: executeAt });
    expect(gw.scheduler.pending().map((s) => s.name)).toEqual([expect.stringMatching(new RegExp(`^vessel-${ok.body.vesselId}-[0-9a-f]{8}$`))]);
    expect((await api.cancel(ok.body.vesselId, token)).body.status).toBe('CANCELED');
    expect(gw.scheduler.pending()).toEqual([]);
  });
});
