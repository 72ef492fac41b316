import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { main, type Dependencies } from '../../bin/gateway.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import type { VesselView } from '../../lambdas/vessels/record.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { reconcileVessels } from '../../lambdas/vessels/reconciler.ts';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { vesselKey } from '../../lambdas/vessels/record.ts';
import { MAX_ROUNDS } from '../../lambdas/webhooks/redeliver.ts';
import { queueClient } from '../../lambdas/queues/sender.ts';
import { ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil, vesselRecord } from '../support/vessels.ts';
import { receiverPool, type Receiver } from './receiver.ts';

/**
 * Issue 15: the operator's `gateway webhook redeliver --vessel ID` and `gateway webhook show --vessel ID`
 * (bin/gateway.ts `main`), against the in-process local gateway: a new round with the same webhook-id and body, the
 * record keeping every round, refusals and wrong invocations, concurrent redeliveries, and the local target found
 * through DATA_DIR/runtime.json.
 *
 * Rounds are short: 1 + 2 attempts, 1 s apart (WEBHOOK_RETRY_WAITS).
 */
const WAITS = '1,1';
const ATTEMPTS = 3;
const SECRET = 'redeliver-secret';

let gw: TestGateway;
let token: string;
let dataDir: string;
let emptyDir: string;
let seq = 0;
const receivers = receiverPool();

/** The CLI pointed at the running in-process gateway, whose environment is already in process.env. */
const deps: Dependencies = { resolveTarget: async () => ({ kind: 'local', secretCacheSeconds: 0, env: {} }) };

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'webhook-redeliver-'));
  emptyDir = mkdtempSync(join(tmpdir(), 'webhook-redeliver-empty-'));
  gw = await startTestGateway({ dataDir, env: { WEBHOOK_RETRY_WAITS: WAITS } });
  token = await gw.token({ user: 'webhook-redeliver' });
});
afterEach(async () => {
  vi.restoreAllMocks();
  await receivers.closeAll();
});
afterAll(async () => {
  await gw?.stop();
  for (const d of [dataDir, emptyDir]) if (d) rmSync(d, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the CLI in this process, capturing what it writes; `'real'` runs it with its own dependencies (runtime.json). */
async function cli(argv: string[], withDeps: Dependencies | 'real' = deps): Promise<Run> {
  let stdout = '';
  let stderr = '';
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stdout += String(chunk);
    return true;
  });
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    stderr += String(chunk);
    return true;
  });
  try {
    const code = withDeps === 'real' ? await main(argv) : await main(argv, withDeps);
    return { code, stdout, stderr };
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

/** Several CLI runs at once, each with its own output (split per run by the lines they write: one each). */
async function clis(argvs: string[][]): Promise<Run[]> {
  const lines: string[] = [];
  const errors: string[] = [];
  const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
    lines.push(String(chunk));
    return true;
  });
  const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => {
    errors.push(String(chunk));
    return true;
  });
  try {
    const codes = await Promise.all(argvs.map((argv) => main(argv, deps)));
    return codes.map((code) => ({ code, stdout: code === 0 ? (lines.shift() ?? '') : '', stderr: code === 0 ? '' : (errors.shift() ?? '') }));
  } finally {
    out.mockRestore();
    err.mockRestore();
  }
}

const receiver = () => receivers.start();

type Webhook = NonNullable<VesselView['webhook']>;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const record = async (vesselId: string) => (await vesselRecord(gw.url, token, vesselId)).webhook;

async function vesselCalling(url: string, extra: Record<string, unknown> = {}): Promise<string> {
  const q = await incubate(gw.url, {
    message: 'Result [[words:3]]',
    idempotencyKey: `redeliver-${++seq}`,
    options: { token },
    callback: { url, secret: SECRET },
    ...extra,
  });
  return q.vesselId;
}

/** The record once the delivery is `status` with `n` attempts in all. */
function recordWhen(vesselId: string, status: Webhook['status'], n: number, timeoutMs = 60_000): Promise<Webhook> {
  return pollUntil(
    () => record(vesselId),
    (w) => w?.status === status && w.attempts.length === n,
    { timeoutMs, what: `${status} after ${n} attempts` },
  ) as Promise<Webhook>;
}

const attempt = (round: number, n: number, statusCode: number) => ({ round, attempt: n, time: expect.any(String), statusCode, durationMs: expect.any(Number) });
const failedRound = (round: number) => Array.from({ length: ATTEMPTS }, (_, i) => attempt(round, i + 1, 500));

/** A vessel whose first round was exhausted (its receiver answered 500 throughout) and dead-lettered. */
async function exhaustedVessel(): Promise<{ vesselId: string; rx: Receiver; webhook: Webhook }> {
  const rx = await receiver();
  rx.setDefault({ status: 500 });
  const vesselId = await vesselCalling(rx.url);
  const webhook = await recordWhen(vesselId, 'failed', ATTEMPTS);
  expect(webhook).toEqual({ status: 'failed', failure: 'exhausted', attempts: failedRound(1) });
  await pollUntil(
    () => getVessel(vesselId),
    (v) => v?.webhook?.deadLetteredAt !== undefined,
    { timeoutMs: 30_000, what: 'deadLetteredAt' },
  );
  expect(rx.requests).toHaveLength(ATTEMPTS);
  return { vesselId, rx, webhook };
}

/** Every request to `rx` is the same delivery of `vesselId`: one webhook-id, the same body bytes. */
function expectSameDelivery(rx: Receiver, vesselId: string): void {
  for (const req of rx.requests) {
    expect(req.headers['webhook-id']).toBe(`msg_${vesselId}`);
    expect(req.body.equals(rx.requests[0]!.body)).toBe(true);
  }
  expect(JSON.parse(rx.requests[0]!.text)).toMatchObject({ vesselId, status: 'COMPLETED' });
}

/** Each round's attempts are numbered 1, 2, … without gaps or repeats, in order. */
function expectRoundsNumbered(w: Webhook): void {
  const byRound = new Map<number, number[]>();
  for (const a of w.attempts) byRound.set(a.round, [...(byRound.get(a.round) ?? []), a.attempt]);
  for (const [round, numbers] of byRound) expect(numbers, `round ${round}`).toEqual(numbers.map((_, i) => i + 1));
}

describe('webhook redeliver', () => {
  it('the gateway running in this process has put its queue settings into process.env', () => {
    expect(process.env.WEBHOOK_QUEUE_URL).toBe(gw.queues.urls.WEBHOOK_QUEUE_URL);
    expect(process.env.SQS_ENDPOINT).toBe(gw.queues.endpoint);
  });

  it('after an exhausted round, with the receiver fixed: round 2 delivers the same webhook-id and body; the record keeps both rounds', async () => {
    const { vesselId, rx } = await exhaustedVessel();
    rx.setDefault({ status: 204 });

    const run = await cli(['webhook', 'redeliver', '--vessel', vesselId]);
    expect(run).toEqual({
      code: 0,
      stdout: `Redelivering the callback of vessel ${vesselId}: round 2, first attempt now (gateway webhook show --vessel ${vesselId} follows it)\n`,
      stderr: '',
    });

    const webhook = await recordWhen(vesselId, 'delivered', ATTEMPTS + 1);
    expect(webhook).toEqual({ status: 'delivered', attempts: [...failedRound(1), attempt(2, 1, 204)] });
    await rx.waitFor(ATTEMPTS + 1);
    expectSameDelivery(rx, vesselId);
    const stored = await getVessel(vesselId);
    expect(stored!.webhook).toMatchObject({ status: 'delivered', round: 2, tried: 1 });
    expect(stored!.webhook!.failure).toBeUndefined();
    expect(stored!.webhook!.deadLetteredAt).toBeUndefined();
    // One attempt in round 2, no more (nothing running, nothing due for 3 s).
    await drained(gw, { quietMs: 3_000 });
    expect(rx.requests).toHaveLength(ATTEMPTS + 1);
  }, 120_000);

  it('--json: {vesselId, round: 2, webhook: {status: pending, …}}; webhook show --json prints the record', async () => {
    const { vesselId, rx, webhook: first } = await exhaustedVessel();
    rx.setDefault({ status: 200 });

    const run = await cli(['webhook', 'redeliver', '--vessel', vesselId, '--json']);
    expect(run.code).toBe(0);
    expect(run.stderr).toBe('');
    expect(run.stdout.endsWith('\n')).toBe(true);
    expect(run.stdout.trim().split('\n')).toHaveLength(1);
    // Pending, earlier attempts kept, the failure and the next-attempt time gone.
    expect(JSON.parse(run.stdout)).toEqual({ vesselId, round: 2, handedOff: true, webhook: { status: 'pending', attempts: first.attempts } });

    const delivered = await recordWhen(vesselId, 'delivered', ATTEMPTS + 1);
    expect(delivered).toEqual({ status: 'delivered', attempts: [...first.attempts, attempt(2, 1, 200)] });
    expectSameDelivery(rx, vesselId);

    const shown = await cli(['webhook', 'show', '--vessel', vesselId, '--json']);
    expect(shown.code).toBe(0);
    expect(shown.stderr).toBe('');
    expect(JSON.parse(shown.stdout)).toEqual({ vesselId, status: 'COMPLETED', url: rx.url, signed: true, webhook: delivered });

    const text = await cli(['webhook', 'show', '--vessel', vesselId]);
    expect(text.code).toBe(0);
    const lines = text.stdout.trimEnd().split('\n');
    expect(lines[0]).toBe(`Vessel ${vesselId} (COMPLETED) → ${rx.url} (signed)`);
    expect(lines[1]).toBe('  delivery: delivered');
    expect(lines.slice(2)).toEqual(
      delivered.attempts.map((a) => `    round ${a.round} attempt ${a.attempt} at ${a.time}: ${a.statusCode} in ${a.durationMs} ms`),
    );
    // The secret is nowhere in what the CLI prints.
    expect(shown.stdout + text.stdout + run.stdout).not.toContain(SECRET);
  }, 120_000);

  it('redelivering a delivered vessel: round 2 is delivered again, with the same webhook-id and body', async () => {
    const rx = await receiver();
    const vesselId = await vesselCalling(rx.url);
    const first = await recordWhen(vesselId, 'delivered', 1);
    expect(first).toEqual({ status: 'delivered', attempts: [attempt(1, 1, 204)] });

    const run = await cli(['webhook', 'redeliver', '--vessel', vesselId, '--json']);
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout)).toEqual({ vesselId, round: 2, handedOff: true, webhook: { status: 'pending', attempts: first.attempts } });
    const again = await recordWhen(vesselId, 'delivered', 2);
    expect(again).toEqual({ status: 'delivered', attempts: [first.attempts[0], attempt(2, 1, 204)] });
    await rx.waitFor(2);
    expect(rx.requests).toHaveLength(2);
    expectSameDelivery(rx, vesselId);
  }, 90_000);

  it('two redeliveries at once: each starts its own round (or one in total); the record ends delivered and consistent', async () => {
    const rx = await receiver();
    const vesselId = await vesselCalling(rx.url);
    await recordWhen(vesselId, 'delivered', 1);

    const runs = await clis([
      ['webhook', 'redeliver', '--vessel', vesselId, '--json'],
      ['webhook', 'redeliver', '--vessel', vesselId, '--json'],
    ]);
    const ok = runs.filter((r) => r.code === 0);
    expect(ok.length, JSON.stringify(runs)).toBeGreaterThanOrEqual(1);
    for (const r of runs.filter((r) => r.code !== 0))
      expect(r, 'a refused concurrent redelivery says why').toMatchObject({ code: 1, stderr: expect.stringContaining('kept changing') });
    const rounds = ok.map((r) => (JSON.parse(r.stdout) as { round: number }).round).sort((a, b) => a - b);
    // No two redeliveries were told the same round.
    expect(rounds).toEqual(ok.length === 2 ? [2, 3] : [2]);
    const last = rounds.at(-1)!;

    const stored = await pollUntil(
      () => getVessel(vesselId),
      (v) => v?.webhook?.status === 'delivered' && v.webhook.round === last,
      { timeoutMs: 60_000, what: `round ${last} delivered` },
    );
    expect(stored!.webhook!.tried).toBe(1);
    const webhook = (await record(vesselId))!;
    expect(webhook.status).toBe('delivered');
    expectRoundsNumbered(webhook);
    expect(webhook.attempts[0]).toEqual(attempt(1, 1, 204));
    expect(webhook.attempts.filter((a) => a.round === last)).toEqual([attempt(last, 1, 204)]);
    // Rounds appear in order; none beyond the last one started.
    expect(webhook.attempts.map((a) => a.round)).toEqual(webhook.attempts.map((a) => a.round).sort((a, b) => a - b));
    expect(Math.max(...webhook.attempts.map((a) => a.round))).toBe(last);
    expectSameDelivery(rx, vesselId);
    // Every recorded attempt reached the receiver.
    expect(rx.requests.length).toBeGreaterThanOrEqual(webhook.attempts.length);
  }, 90_000);
});

describe('refusals and wrong invocations', () => {
  it('an unknown vessel: exit 1, "does not exist" (redeliver and show)', async () => {
    const redeliver = await cli(['webhook', 'redeliver', '--vessel', 'ves_doesnotexist']);
    expect(redeliver.code).toBe(1);
    expect(redeliver.stdout).toBe('');
    expect(redeliver.stderr).toMatch(/^error: Vessel ves_doesnotexist does not exist/);
    const show = await cli(['webhook', 'show', '--vessel', 'ves_doesnotexist', '--json']);
    expect(show.code).toBe(1);
    expect(JSON.parse(show.stderr)).toEqual({ error: expect.stringContaining('does not exist') });
  });

  it('a vessel without a callback: exit 1, "has no callback"', async () => {
    const q = await incubate(gw.url, { message: 'No callback [[words:1]]', idempotencyKey: `redeliver-${++seq}`, options: { token } });
    const run = await cli(['webhook', 'redeliver', '--vessel', q.vesselId]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`Vessel ${q.vesselId} has no callback`);
  });

  it('a vessel that has not ended (PENDING, ttl 600): exit 1, "has not ended"; nothing is delivered', async () => {
    const rx = await receiver();
    const vesselId = await vesselCalling(rx.url, { ttl: 600 });
    expect((await vesselRecord(gw.url, token, vesselId)).status).toBe('PENDING');
    const run = await cli(['webhook', 'redeliver', '--vessel', vesselId]);
    expect(run.code).toBe(1);
    expect(run.stdout).toBe('');
    expect(run.stderr).toContain(`Vessel ${vesselId} has not ended`);
    expect((await getVessel(vesselId))!.webhook).toBeUndefined();
    // Nothing running, nothing due for 2 s (the vessel's own trigger comes in ten minutes).
    await drained(gw, { quietMs: 2_000 });
    expect(rx.requests).toHaveLength(0);
  });

  it(`a vessel redelivered ${MAX_ROUNDS} rounds already: exit 1, the record is left as it is`, async () => {
    const rx = await receiver();
    const vesselId = await vesselCalling(rx.url);
    await recordWhen(vesselId, 'delivered', 1);
    // Round 20 as if redelivered 19 times (each round's attempts do not matter here).
    await documentClient().send(
      new UpdateCommand({
        TableName: process.env.VESSELS_TABLE,
        Key: vesselKey(vesselId),
        UpdateExpression: 'SET webhook.#r = :r',
        ExpressionAttributeNames: { '#r': 'round' },
        ExpressionAttributeValues: { ':r': MAX_ROUNDS },
      }),
    );
    const run = await cli(['webhook', 'redeliver', '--vessel', vesselId]);
    expect(run).toEqual({
      code: 1,
      stdout: '',
      stderr: `error: Vessel ${vesselId}'s callback has been delivered in ${MAX_ROUNDS} rounds already, the most a vessel keeps\n`,
    });
    expect((await getVessel(vesselId))!.webhook).toMatchObject({ status: 'delivered', round: MAX_ROUNDS, tried: 1 });
    await drained(gw, { quietMs: 1_500 });
    expect(rx.requests).toHaveLength(1);
  });

  it('missing --vessel, or an unknown flag: exit 2', async () => {
    const missing = await cli(['webhook', 'redeliver']);
    expect(missing.code).toBe(2);
    expect(missing.stdout).toBe('');
    expect(missing.stderr).toMatch(/^error: .*--vessel/);
    const bogus = await cli(['webhook', 'redeliver', '--vessel', 'ves_x', '--bogus', '1']);
    expect(bogus.code).toBe(2);
    expect(bogus.stderr).toMatch(/^error: unknown flag --bogus/);
    const showMissing = await cli(['webhook', 'show', '--json']);
    expect(showMissing.code).toBe(2);
    expect(JSON.parse(showMissing.stderr)).toEqual({ error: expect.stringContaining('--vessel') });
  });
});

describe("a CLI run inside a running gateway's process", () => {
  it("leaves the clients the gateway's requests are using alone: a request in flight meanwhile completes", async () => {
    // The gateway's own SQS client, in a long poll of an empty queue (as a webhook sender's call would be in flight).
    const client = queueClient();
    const inFlight = client.send(new ReceiveMessageCommand({ QueueUrl: gw.queues.deadLetterUrls.RUN_DEAD_LETTER_QUEUE_URL!, WaitTimeSeconds: 2 }));
    await sleep(200);
    const run = await cli(['webhook', 'show', '--vessel', 'ves_in_flight']);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain('does not exist');
    // Before: the run rebuilt every per-instance client, destroying this one under its request ("socket hang up").
    await expect(inFlight).resolves.toMatchObject({ $metadata: { httpStatusCode: 200 } });
    expect(queueClient()).toBe(client);
  });
});

describe('the local target from DATA_DIR/runtime.json', () => {
  it('without injected dependencies, the CLI finds the SQS endpoint and the webhook queue in runtime.json', async () => {
    const runtime = JSON.parse(readFileSync(join(dataDir, 'runtime.json'), 'utf8')) as { sqsEndpoint?: string; queues?: Record<string, string> };
    expect(runtime.sqsEndpoint).toBe(gw.queues.endpoint);
    expect(runtime.queues?.WEBHOOK_QUEUE_URL).toBe(gw.queues.urls.WEBHOOK_QUEUE_URL);

    // No runtime.json there: refused.
    const none = await cli(['webhook', 'redeliver', '--vessel', 'ves_x', '--data-dir', emptyDir], 'real');
    expect(none.code).toBe(1);
    expect(none.stderr).toContain('No running local gateway found');

    const rx = await receiver();
    const vesselId = await vesselCalling(rx.url);
    await recordWhen(vesselId, 'delivered', 1);
    const throwaway = await vesselCalling(rx.url);
    await recordWhen(throwaway, 'delivered', 1);
    // Nothing of the gateway's own is sending while its environment is taken away below: nothing running, nothing due
    // for 1 s.
    await drained(gw, { quietMs: 1_000 });

    const saved = { SQS_ENDPOINT: process.env.SQS_ENDPOINT, WEBHOOK_QUEUE_URL: process.env.WEBHOOK_QUEUE_URL };
    try {
      // The process's own settings are taken away: only runtime.json can supply them.
      process.env.SQS_ENDPOINT = 'http://127.0.0.1:9';
      delete process.env.WEBHOOK_QUEUE_URL;
      resetInstanceState();
      // Control: a target that supplies no queue cannot hand the redelivery off (so the run below owes its queue to
      // runtime.json). The round is started all the same, and the vessel is left to the reconciler, as at its end.
      const control = await cli(['webhook', 'redeliver', '--vessel', throwaway]);
      expect(control).toEqual({
        code: 0,
        stdout: `Redelivering the callback of vessel ${throwaway}: round 2, the webhook queue did not answer: the reconciler hands it off within minutes (gateway webhook show --vessel ${throwaway} follows it)\n`,
        stderr: '',
      });
      const waiting = (await getVessel(throwaway))!;
      expect(waiting.webhook).toMatchObject({ status: 'pending', round: 2, tried: 0 });
      expect(waiting.callbackHandedOffAt).toBeUndefined();
      expect(waiting.reconcileAt).toEqual(expect.any(Number));

      resetInstanceState();
      const run = await cli(['webhook', 'redeliver', '--vessel', vesselId, '--data-dir', dataDir], 'real');
      expect(run).toEqual({
        code: 0,
        stdout: `Redelivering the callback of vessel ${vesselId}: round 2, first attempt now (gateway webhook show --vessel ${vesselId} follows it)\n`,
        stderr: '',
      });
      expect(process.env.SQS_ENDPOINT).toBe(saved.SQS_ENDPOINT);
      expect(process.env.WEBHOOK_QUEUE_URL).toBe(saved.WEBHOOK_QUEUE_URL);
    } finally {
      Object.assign(process.env, saved);
      resetInstanceState();
    }
    const webhook = await recordWhen(vesselId, 'delivered', 2);
    expect(webhook).toEqual({ status: 'delivered', attempts: [attempt(1, 1, 204), attempt(2, 1, 204)] });
    expect(rx.requests.filter((r) => r.headers['webhook-id'] === `msg_${vesselId}`)).toHaveLength(2);

    // The control's round, handed off by the reconciler once its look is due (a clock past VESSEL_REDRIVE_AFTER_SECONDS).
    expect(rx.requests.filter((r) => r.headers['webhook-id'] === `msg_${throwaway}`)).toHaveLength(1);
    const report = await reconcileVessels(new Date(Date.now() + 10 * 60_000));
    expect(report.handedOff).toBeGreaterThanOrEqual(1);
    expect(await recordWhen(throwaway, 'delivered', 2)).toEqual({ status: 'delivered', attempts: [attempt(1, 1, 204), attempt(2, 1, 204)] });
    expect((await getVessel(throwaway))!.callbackHandedOffAt).toEqual(expect.any(Number));
  }, 120_000);
});
