import { randomBytes } from 'node:crypto';
import { DeleteMessageCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { developerComputeUsed } from '../../lambdas/budgets/developer-month.ts';
import { acquireLease, liveLeases, releaseLease, type Lease } from '../../lambdas/plans/leases.ts';
import { wakeParkedVessels } from '../../lambdas/vessels/park.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import type { StoredVessel } from '../../lambdas/vessels/record.ts';
import { callbackBodyText } from '../../lambdas/webhooks/body.ts';
import { FUNCTIONS } from '../../lambdas/handlers/manifest.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { keyCipher } from '../../lambdas/registry/key-cipher.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { pollUntil } from '../support/vessels.ts';
import { idempotencyItems, MODEL, msBetween, vesselApi, vesselItems, type QueueResponse } from './incubate-client.ts';

/**
 * POST /incubate, /incubate/batch and GET /incubate/vessel/{id} over real HTTP against the in-process local runtime
 * (simulated upstream, fauxqs, DynamoDB Local): a vessel's whole life and its money, idempotency (replays, conflicts,
 * 20 concurrent duplicates), batches, a user whose budget is spent by the time the vessel runs, and the callback handed
 * to the webhook queue (docs/incubate.md).
 *
 * The gateway runs without the webhook sender: nothing consumes the webhook queue, so the tests read the hand-off there
 * themselves (delivery is test/webhooks/'s).
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let webhooks: SQSClient;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ functions: FUNCTIONS.filter((f) => f.id !== 'WebhookSender') });
  api = vesselApi(gw);
  webhooks = sqsClient(gw.queues.endpoint);
});
afterAll(async () => {
  webhooks?.destroy();
  await gw?.stop();
});

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const freshKey = (what: string) => `inc-${what}-${++seq}-${randomBytes(3).toString('hex')}`;

/** A project of its own (under a developer of its own when a plan is given), and a token maker for it. */
async function project(plan?: { planSeconds: number }) {
  const developerId = plan ? `dev-inc-${randomBytes(4).toString('hex')}` : gw.developerId;
  if (plan) await createDeveloper({ developerId, planSeconds: plan.planSeconds });
  const p = await createProject({ developerId });
  const token = (userId: string, budget: Partial<BudgetClaim> = {}, expiresInSeconds = 3_600) =>
    mintToken({ projectId: p.projectId, userId, secret: p.secret, budget: { ai: 10_000_000, compute: 3_600, window: 'day', ...budget }, expiresInSeconds });
  return { projectId: p.projectId, developerId, token };
}

/** The webhook queue's message about `vesselId` (received and deleted), waiting for it up to `timeoutMs`. */
async function webhookMessage(vesselId: string, timeoutMs = 10_000): Promise<Record<string, unknown>> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const out = await webhooks.send(
      new ReceiveMessageCommand({ QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 1 }),
    );
    for (const m of out.Messages ?? []) {
      const body = JSON.parse(m.Body!) as Record<string, unknown>;
      if (body.vesselId !== vesselId) continue;
      await webhooks.send(new DeleteMessageCommand({ QueueUrl: gw.queues.urls.WEBHOOK_QUEUE_URL, ReceiptHandle: m.ReceiptHandle! }));
      return body;
    }
  }
  throw new Error(`no webhook message for vessel ${vesselId} within ${timeoutMs} ms`);
}

describe('a vessel, end to end', () => {
  it('QUEUED while the capacity is taken, then EXECUTING, then COMPLETED with its output; its cost is the ledger delta to the microdollar', async () => {
    // A hobby developer (2 at once) whose two slots are held: the vessel waits QUEUED until they are given back.
    const p = await project({ planSeconds: 1_000 });
    const token = await p.token('e2e-user');
    const held: Lease[] = [];
    for (const sessionId of ['held-1', 'held-2']) {
      const got = await acquireLease(p.developerId, { sessionId, userId: 'other', projectId: p.projectId, kind: 'prompt' }, 2);
      if (!got.ok) throw new Error('could not take the lease');
      held.push(got.lease);
    }
    const before = await api.usage(token);
    expect(before.ai).toMatchObject({ used: 0, reserved: 0 });
    const monthBefore = await developerComputeUsed(p.developerId);

    const idempotencyKey = freshKey('e2e');
    const sent = Date.now();
    const res = await api.incubate({ message: 'Four words please [[words:4]] [[latency:1500]]', idempotencyKey, options: { token, model: MODEL } });
    expect(res.status).toBe(202);
    expect(res.headers.get('idempotent-replayed')).toBeNull();
    expect(res.body).toEqual({ vesselId: expect.stringMatching(UUID), idempotencyKey, status: 'queued', scheduledFor: expect.stringMatching(ISO) });
    const { vesselId, scheduledFor } = res.body;
    expect(new Date(scheduledFor).getTime()).toBeGreaterThanOrEqual(sent - 5);

    const queued = await api.status(vesselId, token);
    expect(queued.status).toBe(200);
    expect(queued.body).toEqual({
      vesselId,
      status: 'QUEUED',
      taskIdentifier: 'agent-run',
      isCompleted: false,
      isSuccess: false,
      isFailed: false,
      isCanceled: false,
      idempotencyKey,
      createdAt: expect.stringMatching(ISO),
      updatedAt: expect.stringMatching(ISO),
      scheduledFor,
      attempts: 0,
    });
    // It stays QUEUED while there is no room: parked in the developer's line, never failed (nothing running, nothing
    // due for 1.5 s).
    await drained(gw, { quietMs: 1_500 });
    expect((await api.status(vesselId, token)).body).toMatchObject({ status: 'QUEUED', attempts: 0 });
    expect(await getVessel(vesselId)).toMatchObject({ parkedFor: p.developerId });

    // What the end of a run does when it gives its lease back: wake the oldest parked vessel of the developer.
    for (const lease of held) await releaseLease(lease);
    expect(await wakeParkedVessels(p.developerId)).toBe(1);
    const seen: string[] = ['QUEUED'];
    const executing = await api.until(vesselId, token, (r) => r.status !== 'QUEUED', { seen, timeout: 10_000 });
    expect(executing).toEqual({
      ...queued.body,
      status: 'EXECUTING',
      updatedAt: expect.stringMatching(ISO),
      attempts: 1,
      startedAt: expect.stringMatching(ISO),
    });
    const done = await api.until(vesselId, token, (r) => r.isCompleted, { seen, timeout: 10_000 });
    expect(seen).toEqual(['QUEUED', 'EXECUTING', 'COMPLETED']);

    const micro = charge(priceFor(MODEL, 'anthropic')!, done.output!.result.usage).microdollars;
    expect(done).toEqual({
      ...executing,
      status: 'COMPLETED',
      isCompleted: true,
      isSuccess: true,
      updatedAt: done.completedAt,
      completedAt: expect.stringMatching(ISO),
      output: {
        success: true,
        text: 'word1 word2 word3 word4',
        result: {
          type: 'result',
          subtype: 'success',
          total_cost_usd: micro / 1_000_000,
          total_cost_microdollars: micro,
          usage: { input_tokens: expect.any(Number), output_tokens: 4 },
          num_turns: 1,
          duration_secs: expect.any(Number),
          model: MODEL,
        },
      },
    });
    expect(micro).toBeGreaterThan(0);
    expect(done.output!.result.duration_secs).toBeGreaterThanOrEqual(1.5);
    expect(msBetween(done.startedAt!, done.completedAt!)).toBeGreaterThanOrEqual(1_500);

    // The money: the ledger moved by exactly the vessel's cost; compute is the run's seconds rounded up, on the user's
    // meter and on the developer's month; nothing is left reserved or leased.
    const after = await api.usage(token);
    expect(after.ai.used - before.ai.used).toBe(micro);
    expect(after.ai.reserved).toBe(0);
    expect(after.compute.reserved).toBe(0);
    const seconds = after.compute.used - before.compute.used;
    expect(seconds).toBeGreaterThanOrEqual(Math.ceil(done.output!.result.duration_secs));
    expect(seconds).toBeLessThanOrEqual(Math.ceil(msBetween(done.startedAt!, done.completedAt!) / 1_000));
    expect((await developerComputeUsed(p.developerId)) - monthBefore).toBe(seconds);
    expect(await liveLeases(p.developerId)).toEqual([]);
  });

  it('a failing run ends FAILED with the agent’s subtype and its text, and is charged what it used', async () => {
    const token = await gw.token({ user: `fail-${++seq}` });
    const before = await api.usage(token);
    const res = await api.incubate({
      message: 'Loop [[1> tool:get_weather {}]] [[2> tool:get_weather {}]]',
      idempotencyKey: freshKey('turns'),
      options: {
        token,
        model: MODEL,
        maxTurns: 1,
        tools: [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object' }, url: 'http://127.0.0.1:9/weather' }],
      },
    });
    expect(res.status).toBe(202);
    const done = await api.ended(res.body.vesselId, token);
    expect(done).toMatchObject({ status: 'FAILED', isCompleted: true, isSuccess: false, isFailed: true, isCanceled: false, attempts: 1 });
    expect(done.output).toMatchObject({ success: false, result: { type: 'result', subtype: 'error_max_turns', num_turns: 1 } });
    expect(done.output!.text.length).toBeGreaterThan(0);
    const after = await api.usage(token);
    expect(after.ai.used - before.ai.used).toBe(done.output!.result.total_cost_microdollars);
    expect(after.ai.reserved).toBe(0);
  });

  it('a user whose budget is spent when the vessel is due: FAILED with error_user_budget_exhausted and the reason, never run, nothing charged', async () => {
    for (const [budget, reason] of [
      [{ ai: 0 }, 'AI (0 of 0 microdollars)'],
      [{ compute: 0 }, 'compute (0 of 0 seconds)'],
    ] as const) {
      const token = await gw.token({ user: `spent-${++seq}`, budget });
      gw.upstreams.anthropic!.requests.length = 0;
      // Budgets are not checked at enqueue (the window may have room again when the vessel is due): 202.
      const res = await api.incubate({ message: 'Never runs [[words:2]]', idempotencyKey: freshKey('spent'), options: { token, model: MODEL } });
      expect(res.status).toBe(202);
      const done = await api.ended(res.body.vesselId, token);
      expect(done).toEqual({
        vesselId: res.body.vesselId,
        status: 'FAILED',
        taskIdentifier: 'agent-run',
        isCompleted: true,
        isSuccess: false,
        isFailed: true,
        isCanceled: false,
        idempotencyKey: res.body.idempotencyKey,
        createdAt: expect.stringMatching(ISO),
        updatedAt: done.completedAt,
        scheduledFor: res.body.scheduledFor,
        attempts: 0,
        completedAt: expect.stringMatching(ISO),
        output: {
          success: false,
          text: `The vessel could not run: The user's budget is used up for the current day window: ${reason}`,
          result: {
            type: 'result',
            subtype: 'error_user_budget_exhausted',
            total_cost_usd: 0,
            total_cost_microdollars: 0,
            usage: { input_tokens: 0, output_tokens: 0 },
            num_turns: 0,
            duration_secs: 0,
          },
        },
      });
      expect(gw.upstreams.anthropic!.requests).toEqual([]);
      const usage = await api.usage(token);
      expect(usage.ai).toMatchObject({ used: 0, reserved: 0 });
      expect(usage.compute).toMatchObject({ used: 0, reserved: 0 });
    }
    expect(await liveLeases(gw.developerId)).toEqual([]);
  });

  it("a user's AI budget below the smallest call when the vessel runs: FAILED error_user_budget_exhausted, no model call, nothing charged", async () => {
    const token = await gw.token({ user: `poor-${++seq}`, budget: { ai: 500 } });
    gw.upstreams.anthropic!.requests.length = 0;
    const res = await api.incubate({ message: 'Never answered [[words:2]]', idempotencyKey: freshKey('poor'), options: { token, model: MODEL } });
    expect(res.status).toBe(202);
    const done = await api.ended(res.body.vesselId, token);
    expect(done).toMatchObject({ status: 'FAILED', isFailed: true, attempts: 1 });
    expect(done.output).toEqual({
      success: false,
      text: expect.stringMatching(/^The vessel could not run: AI budget too low for this request: 500 of 500 microdollars remain/),
      result: {
        type: 'result',
        subtype: 'error_user_budget_exhausted',
        total_cost_usd: 0,
        total_cost_microdollars: 0,
        usage: { input_tokens: 0, output_tokens: 0 },
        num_turns: 0,
        duration_secs: 0,
      },
    });
    expect(gw.upstreams.anthropic!.requests).toEqual([]);
    const usage = await api.usage(token);
    expect(usage.ai).toMatchObject({ used: 0, reserved: 0 });
    expect(usage.compute).toMatchObject({ used: 0, reserved: 0 });
  });

  it('a user whose budget is only held by their run in flight (not spent): the vessel waits QUEUED, then runs', async () => {
    // Each run holds the compute it may use (up to 870 s): with 870 s of budget, a second run finds it all held.
    const p = await project({ planSeconds: 20_000_000 });
    const token = await p.token('held-user', { compute: 870 });
    const first = await api.incubate({ message: 'Slow [[latency:2500]] [[words:1]]', idempotencyKey: freshKey('held-1'), options: { token, model: MODEL } });
    await api.until(first.body.vesselId, token, (r) => r.status === 'EXECUTING', { timeout: 5_000 });
    const usage = await api.usage(token);
    expect(usage.compute).toMatchObject({ used: 0, reserved: 870 });

    const second = await api.incubate({ message: 'Waits [[words:2]]', idempotencyKey: freshKey('held-2'), options: { token, model: MODEL } });
    expect(second.status).toBe(202);
    await new Promise((r) => setTimeout(r, 800));
    expect((await api.status(second.body.vesselId, token)).body).toMatchObject({ status: 'QUEUED', attempts: 0 });
    expect((await api.ended(first.body.vesselId, token)).status).toBe('COMPLETED');
    const done = await api.ended(second.body.vesselId, token);
    expect(done).toMatchObject({ status: 'COMPLETED', attempts: 1, output: { success: true, text: 'word1 word2' } });
  });
});

describe('idempotency', () => {
  it('a replay — also with a fresh token of the same user — is 200 with the same queue response and Idempotent-Replayed: true; nothing new is queued', async () => {
    const p = await project();
    const token = await p.token('idem-user');
    const body = { message: 'Once [[words:1]]', idempotencyKey: 'order-42', options: { token, model: MODEL, maxTurns: 2 } };
    const first = await api.incubate(body);
    expect(first.status).toBe(202);
    expect(first.headers.get('idempotent-replayed')).toBeNull();

    const replay = await api.incubate(body);
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(first.body);

    // A token minted later (another string, same project and user): the same request.
    const fresh = await p.token('idem-user', {}, 7_200);
    expect(fresh).not.toBe(token);
    const again = await api.incubate({ ...body, options: { ...body.options, token: fresh } });
    expect(again.status).toBe(200);
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(again.body).toEqual(first.body);

    // The options' key order is not part of the body's identity.
    const reordered = await api.incubate({ options: { maxTurns: 2, model: MODEL, token }, idempotencyKey: 'order-42', message: 'Once [[words:1]]' });
    expect(reordered.status).toBe(200);
    expect(reordered.body).toEqual(first.body);

    expect(await vesselItems(p.projectId)).toHaveLength(1);
    expect(await idempotencyItems(p.projectId)).toHaveLength(1);
    // A replay after the vessel ended still answers the original queue response.
    await api.ended(first.body.vesselId, token);
    const late = await api.incubate(body);
    expect(late.status).toBe(200);
    expect(late.body).toEqual(first.body);
  });

  it('the same key with another body, or from another user of the project: 409 idempotency_key_conflict, revealing nothing of the vessel', async () => {
    const p = await project();
    const [alice, bob] = [await p.token('alice'), await p.token('bob')];
    const body = { message: 'Original [[words:1]]', idempotencyKey: 'shared-key', options: { token: alice, model: MODEL } };
    const first = await api.incubate(body);
    expect(first.status).toBe(202);
    const conflict = {
      error: 'idempotency_key_conflict',
      message: 'idempotencyKey "shared-key" was already used with a different request body or by another user; use a new key for a new request',
    };
    for (const other of [
      { ...body, message: 'Changed [[words:1]]' },
      { ...body, options: { ...body.options, maxTurns: 3 } },
      { ...body, ttl: 0 },
      { ...body, callback: { url: 'https://hooks.example.com/x' } },
      // Bob sends exactly Alice's request with his own token.
      { ...body, options: { ...body.options, token: bob } },
    ]) {
      const res = await api.incubate(other);
      expect(res.status, JSON.stringify(other)).toBe(409);
      expect(res.body).toEqual(conflict);
      expect(res.headers.get('idempotent-replayed')).toBeNull();
    }
    // Bob cannot read Alice's vessel either; Alice's is untouched.
    expect((await api.status(first.body.vesselId, bob)).status).toBe(404);
    expect(await vesselItems(p.projectId)).toHaveLength(1);
    // The key is per project: another project may use it.
    const q = await project();
    const elsewhere = await api.incubate({ ...body, options: { ...body.options, token: await q.token('alice') } });
    expect(elsewhere.status).toBe(202);
    expect(elsewhere.body.vesselId).not.toBe(first.body.vesselId);
  });

  it('20 concurrent identical requests: exactly one vessel — one 202 and nineteen 200 replays, all naming it', async () => {
    const p = await project();
    const token = await p.token('burst-user');
    const body = JSON.stringify({ message: 'Burst [[words:2]]', idempotencyKey: 'burst-1', options: { token, model: MODEL } });
    const answers = await Promise.all(Array.from({ length: 20 }, () => api.incubate<QueueResponse>(body)));
    const statuses = answers.map((a) => a.status).sort();
    expect(statuses).toEqual([200, ...Array<number>(18).fill(200), 202].sort());
    expect(answers.filter((a) => a.status === 200).every((a) => a.headers.get('idempotent-replayed') === 'true')).toBe(true);
    const ids = new Set(answers.map((a) => a.body.vesselId));
    expect(ids.size).toBe(1);
    expect(answers.every((a) => JSON.stringify(a.body) === JSON.stringify(answers[0]!.body))).toBe(true);
    const items = await vesselItems(p.projectId);
    expect(items.map((i) => i.vesselId)).toEqual([...ids]);
    expect(await idempotencyItems(p.projectId)).toEqual([expect.objectContaining({ vesselId: [...ids][0], idempotencyKey: 'burst-1' })]);
    // It runs once.
    gw.upstreams.anthropic!.requests.length = 0;
    const done = await api.ended([...ids][0]!, token);
    expect(done).toMatchObject({ status: 'COMPLETED', attempts: 1 });
  });
});

describe('batch', () => {
  it('each item its own vessel and key; per-item failures with index and code; the others queued and run', async () => {
    const p = await project();
    const token = await p.token('batch-user');
    // One key already used with this batch's options (a replay), one with another body (a conflict).
    const replayed = await api.incubate({ message: 'Earlier [[words:1]]', idempotencyKey: 'b-replay', options: { token, model: MODEL } });
    const conflicting = await api.incubate({ message: 'Other [[words:1]]', idempotencyKey: 'b-conflict', options: { token, model: MODEL, maxTurns: 4 } });
    expect([replayed.status, conflicting.status]).toEqual([202, 202]);

    const items = [
      { message: 'First [[words:1]]', idempotencyKey: 'b-1' },
      { message: 'Second [[words:2]]', idempotencyKey: 'b-2' },
      { message: 'Again', idempotencyKey: 'b-1' },
      { message: 'No key' },
      { message: '', idempotencyKey: 'b-empty' },
      { message: 'Extra', idempotencyKey: 'b-extra', priority: 1 },
      'not an item',
      { message: 'Earlier [[words:1]]', idempotencyKey: 'b-replay' },
      { message: 'Other [[words:1]]', idempotencyKey: 'b-conflict' },
    ];
    const res = await api.batch({ items, options: { token, model: MODEL } });
    expect(res.status).toBe(202);
    const queued = (index: number, idempotencyKey: string) => ({
      index,
      idempotencyKey,
      status: 'queued',
      vesselId: expect.stringMatching(UUID),
      scheduledFor: expect.stringMatching(ISO),
    });
    const failed = (index: number, idempotencyKey: string | null, code: string, message: string) => ({
      index,
      idempotencyKey,
      status: 'failed',
      error: { code, message },
    });
    expect(res.body).toEqual({
      total: 9,
      queued: 3,
      failed: 6,
      items: [
        queued(0, 'b-1'),
        queued(1, 'b-2'),
        failed(2, 'b-1', 'duplicate_idempotency_key', 'items.2: idempotencyKey "b-1" appears earlier in this batch'),
        failed(3, null, 'missing_idempotency_key', 'items.3.idempotencyKey is required'),
        failed(4, 'b-empty', 'invalid_request', 'items.4.message: message must not be empty'),
        failed(5, 'b-extra', 'invalid_request', 'items.5: Unrecognized key: "priority"'),
        failed(6, null, 'invalid_request', 'items.6: Invalid input: expected object, received string'),
        { ...queued(7, 'b-replay'), vesselId: replayed.body.vesselId, scheduledFor: replayed.body.scheduledFor, replayed: true },
        failed(
          8,
          'b-conflict',
          'idempotency_key_conflict',
          'idempotencyKey "b-conflict" was already used with a different request body or by another user; use a new key for a new request',
        ),
      ],
    });
    const entries = (res.body as { items: { vesselId?: string }[] }).items;
    // Two new vessels (plus the two queued before), and both run.
    expect(await vesselItems(p.projectId)).toHaveLength(4);
    const first = await api.ended(entries[0]!.vesselId!, token);
    const second = await api.ended(entries[1]!.vesselId!, token);
    expect([first.status, first.output!.text, first.idempotencyKey]).toEqual(['COMPLETED', 'word1', 'b-1']);
    expect([second.status, second.output!.text, second.idempotencyKey]).toEqual(['COMPLETED', 'word1 word2', 'b-2']);

    // The same batch again: the queued items replay, the failures fail the same way.
    const again = await api.batch({ items, options: { token, model: MODEL } });
    expect(again.status).toBe(202);
    expect((again.body as { queued: number; failed: number }).queued).toBe(3);
    expect((again.body as { items: unknown[] }).items.slice(0, 2)).toEqual([
      { ...queued(0, 'b-1'), vesselId: entries[0]!.vesselId, replayed: true },
      { ...queued(1, 'b-2'), vesselId: entries[1]!.vesselId, replayed: true },
    ]);
    expect(await vesselItems(p.projectId)).toHaveLength(4);
  });

  it('shared timing: a batch with ttl queues every item PENDING for the same time', async () => {
    const token = await gw.token({ user: `batch-ttl-${++seq}` });
    const res = await api.batch({
      items: [
        { message: 'a', idempotencyKey: freshKey('bt') },
        { message: 'b', idempotencyKey: freshKey('bt') },
      ],
      options: { token, model: MODEL },
      ttl: 600,
    });
    expect(res.status).toBe(202);
    const entries = (res.body as { items: { vesselId: string; scheduledFor: string }[] }).items;
    expect(entries[0]!.scheduledFor).toBe(entries[1]!.scheduledFor);
    for (const e of entries) {
      expect((await api.status(e.vesselId, token)).body).toMatchObject({ status: 'PENDING', scheduledFor: e.scheduledFor });
      expect((await api.cancel(e.vesselId, token)).body.status).toBe('CANCELED');
    }
  });
});

describe('callbacks', () => {
  /** The delivery state a vessel with a callback has from its end on, until the webhook sender's first attempt. */
  const PENDING_RECORD = { status: 'pending', attempts: [] };
  const PENDING_STORED = { status: 'pending', round: 1, tried: 0, attempts: [] };

  it('a vessel that ends leaves the exact webhook message on the webhook queue; the secret is stored encrypted and never shown', async () => {
    const token = await gw.token({ user: `cb-${++seq}` });
    const secret = `whsec_${randomBytes(12).toString('hex')}`;
    const idempotencyKey = freshKey('cb');
    const url = 'https://hooks.example.com/vessels?x=1';
    const res = await api.incubate({ message: 'Call me [[words:2]]', idempotencyKey, options: { token, model: MODEL }, callback: { url, secret } });
    expect(res.status).toBe(202);
    const { vesselId } = res.body;
    const done = await api.ended(vesselId, token);
    expect(done.status).toBe('COMPLETED');
    expect(done.callback).toEqual({ url, signed: true });
    // The delivery is pending from the end on (set in the same write as the status).
    expect(done.webhook).toEqual(PENDING_RECORD);

    // The message only says "attempt 1 of round 1 of this vessel": no URL, no secret, no body (all read from the vessel).
    const message = await webhookMessage(vesselId);
    expect(message).toEqual({ vesselId, round: 1, attempt: 1 });

    // The hand-off is noted on the vessel just after the message is sent: wait for that write.
    const stored = await pollUntil(
      async () => (await vesselItems(gw.projectId)).find((i) => i.vesselId === vesselId)! as unknown as StoredVessel,
      (v) => v.callbackHandedOffAt !== undefined,
      { timeoutMs: 5_000, everyMs: 50, what: 'the hand-off noted' },
    );
    expect(stored.callbackHandedOffAt).toEqual(expect.any(Number));
    expect(stored.webhook).toEqual(PENDING_STORED);
    expect(stored.callback).toEqual({ url, secretCiphertext: expect.any(String) });
    // Encrypted for this project: it decrypts to the secret, and to nothing under another project.
    const ciphertext = stored.callback!.secretCiphertext!;
    expect(ciphertext).not.toContain(secret);
    expect(await keyCipher().decrypt(ciphertext, { projectId: gw.projectId })).toBe(secret);
    await expect(keyCipher().decrypt(ciphertext, { projectId: 'prj_other' })).rejects.toThrow();
    // What the sender will sign and send, from the stored vessel.
    const { output } = done;
    expect(callbackBodyText(stored)).toBe(
      JSON.stringify({
        success: true,
        text: 'word1 word2',
        result: { type: 'result', subtype: 'success', total_cost_usd: output!.result.total_cost_usd, usage: output!.result.usage },
        vesselId,
        idempotencyKey,
        status: 'COMPLETED',
      }),
    );

    // Never in clear: not in the record, not in the stored item; nor in the message.
    const shownRes = await api.status(vesselId, token);
    expect(shownRes.body.webhook).toEqual(PENDING_RECORD);
    const shown = JSON.stringify(shownRes.body);
    expect(shown).not.toContain(secret);
    expect(shown).not.toContain('secretCiphertext');
    expect(shown).not.toContain(ciphertext);
    expect(JSON.stringify(stored)).not.toContain(secret);
    expect(JSON.stringify(message)).not.toContain(secret);
  });

  it('a canceled vessel with an unsigned callback is handed off too: status CANCELED, no secret', async () => {
    const token = await gw.token({ user: `cb-${++seq}` });
    const idempotencyKey = freshKey('cb-cancel');
    const url = 'https://hooks.example.com/canceled';
    const res = await api.incubate({ message: 'Later', idempotencyKey, options: { token, model: MODEL }, ttl: 600, callback: { url } });
    expect(res.status).toBe(202);
    const { vesselId } = res.body;
    const canceled = await api.cancel(vesselId, token);
    expect(canceled.status).toBe(200);
    expect(canceled.body.callback).toEqual({ url, signed: false });
    expect(canceled.body.webhook).toEqual(PENDING_RECORD);
    const message = await webhookMessage(vesselId);
    expect(message).toEqual({ vesselId, round: 1, attempt: 1 });
    expect((await api.status(vesselId, token)).body.webhook).toEqual(PENDING_RECORD);
    const stored = (await vesselItems(gw.projectId)).find((i) => i.vesselId === vesselId)! as unknown as StoredVessel;
    expect(stored.webhook).toEqual(PENDING_STORED);
    // Unsigned: nothing to encrypt.
    expect(stored.callback).toEqual({ url });
    expect(callbackBodyText(stored)).toBe(
      JSON.stringify({
        success: false,
        text: 'The vessel was canceled before it ran',
        result: { type: 'result', subtype: 'canceled', total_cost_usd: 0, usage: { input_tokens: 0, output_tokens: 0 } },
        vesselId,
        idempotencyKey,
        status: 'CANCELED',
      }),
    );
  });

  it('a vessel without a callback puts nothing on the webhook queue', async () => {
    const token = await gw.token({ user: `cb-${++seq}` });
    const res = await api.incubate({ message: 'Quiet [[words:1]]', idempotencyKey: freshKey('no-cb'), options: { token, model: MODEL } });
    const done = await api.ended(res.body.vesselId, token);
    expect(done.callback).toBeUndefined();
    expect(done.webhook).toBeUndefined();
    await expect(webhookMessage(res.body.vesselId, 1_500)).rejects.toThrow('no webhook message');
    const stored = (await vesselItems(gw.projectId)).find((i) => i.vesselId === res.body.vesselId)!;
    expect(stored.webhook).toBeUndefined();
  });
});
