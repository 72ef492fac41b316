import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient, GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startAnthropicUpstream, type SimulatedUpstream } from '../../bin/local/upstreams/anthropic.ts';
import { DEV_PROJECT } from '../../bin/local/seed.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { INTERRUPTED_TEXT } from '../../lambdas/vessels/reconciler.ts';
import type { VesselView } from '../../lambdas/vessels/record.ts';
import { groupMembers } from '../support/gateway-process.ts';
import { requestText, trackInFlight, type InFlightTracker } from '../support/inflight.ts';
import { startRuntimeChild, type RuntimeChild } from '../support/runtime-child.ts';
import { incubate, incubateBatch, pollUntil, vesselRecord } from '../support/vessels.ts';

/**
 * Issue 14, "Done when" 5: `kill -9` the whole local runtime (the gateway, npx/tsx and DynamoDB Local's java: its
 * process group) while vessels are executing, queued at capacity, pending a few seconds ahead and scheduled beyond 15
 * minutes; start it again on the same DATA_DIR. Every vessel reaches a terminal state — the executing ones once their
 * lease and heartbeat have lapsed, FAILED and never run again (a vessel runs at most once: its cut run was charged,
 * docs/incubate.md) —, none is lost, the far one is still PENDING with its schedule kept, and no vessel is ever
 * executed by two workers at once.
 *
 * The runtime runs as `npm start` does (`npm start`'s command), against a simulated Anthropic upstream that runs in
 * this test process, so it survives the kill and records every request with its vessel's tag on both sides of it
 * (test/support/inflight.ts). The development project's developer is on the starter tier: 5 at once.
 *
 * What a crash loses: fauxqs (the run queue) lives in the runtime's memory, so every trigger in flight is gone;
 * DynamoDB Local (on disk in DATA_DIR) and DATA_DIR/schedules.json survive. The reconciler, at start-up and then
 * every LOCAL_SCHEDULE_INTERVAL_SECONDS (a second here, instead of a minute), re-drives the waiting vessels whose
 * `reconcileAt` passed (VESSEL_REDRIVE_AFTER_SECONDS=3 here) and ends the executing ones FAILED once their heartbeat
 * has lapsed. The lease is 9 s here (LEASE_TTL_SECONDS, instead of 60 s): the heartbeat is renewed every 3 s and
 * lapses 9 s after the last one, and so do the dead runs' concurrency leases.
 */
const REDRIVE_SECONDS = 3;
const LEASE_TTL_SECONDS = 9;
const SCHEDULE_INTERVAL_SECONDS = 1;
const TIER_MAX = 5;
/** The executing vessels' model call: long enough to be cut by the kill. */
const EXEC_LATENCY_MS = 10_000;
const SHORT_LATENCY_MS = 500;

let upstream: SimulatedUpstream;
let tracker: InFlightTracker;
let dataDir: string;
let runtime: RuntimeChild | undefined;
const pgids: number[] = [];

beforeAll(async () => {
  upstream = await startAnthropicUpstream();
  tracker = trackInFlight(upstream, (r) => {
    const m = /\bcrash-(exec|queued|pending|far)-\d+\b/.exec(requestText(r));
    return m ? { key: 'crash', tag: m[0] } : undefined;
  });
  dataDir = mkdtempSync(join(tmpdir(), 'vessels-crash-'));
});

afterAll(async () => {
  try {
    await runtime?.kill9();
  } finally {
    for (const pgid of pgids) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    tracker?.stop();
    await upstream?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }
});

const start = async () => {
  runtime = undefined;
  const child = await startRuntimeChild({
    dataDir,
    env: {
      ANTHROPIC_BASE_URL: upstream.url,
      ANTHROPIC_API_KEY: 'sk-ant-crash-test',
      VESSEL_REDRIVE_AFTER_SECONDS: String(REDRIVE_SECONDS),
      LEASE_TTL_SECONDS: String(LEASE_TTL_SECONDS),
      LOCAL_SCHEDULE_INTERVAL_SECONDS: String(SCHEDULE_INTERVAL_SECONDS),
    },
  });
  pgids.push(child.pgid);
  runtime = child;
  return child;
};

/** A token of the development project (its secret read from the runtime's DynamoDB Local) with a large budget. */
async function devToken(): Promise<string> {
  const info = JSON.parse(readFileSync(join(dataDir, 'runtime.json'), 'utf8')) as { dynamoEndpoint: string; tables: Record<string, string> };
  const client = DynamoDBDocumentClient.from(
    new DynamoDBClient({ endpoint: info.dynamoEndpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }),
  );
  try {
    const out = await client.send(new GetCommand({ TableName: info.tables.REGISTRY_TABLE, Key: { pk: `project#${DEV_PROJECT}` }, ConsistentRead: true }));
    const secret = (out.Item as { secret?: string } | undefined)?.secret;
    if (!secret) throw new Error(`no ${DEV_PROJECT} in the runtime's registry`);
    // Far more compute than the tier's 5 runs can hold (each holds up to 870 s): the crash, not the budget, is tested.
    return await mintToken({
      projectId: DEV_PROJECT,
      userId: 'crash-user',
      secret,
      budget: { ai: 1_000_000_000, compute: 1_000_000, window: 'day' },
      expiresInSeconds: 3600,
    });
  } finally {
    client.destroy();
  }
}

const schedules = (): { name: string; at: string; body: string }[] => {
  const file = join(dataDir, 'schedules.json');
  return existsSync(file) ? (JSON.parse(readFileSync(file, 'utf8')) as { name: string; at: string; body: string }[]) : [];
};

describe('a crash of the whole local runtime', () => {
  it('kill -9 with vessels executing, queued, pending and scheduled far ahead: after a restart every vessel ends, none lost, none run twice at once', async () => {
    const t0 = Date.now();
    const phases: Record<string, number> = {};
    const mark = (name: string) => (phases[name] = Date.now() - t0);

    const first = await start();
    mark('firstReady');
    const token = await devToken();
    const records = (ids: string[]) => Promise.all(ids.map((id) => vesselRecord(runtime!.url, token, id)));
    const tagged = (kind: string, n: number, latency: number) =>
      Array.from({ length: n }, (_, i) => ({ message: `crash-${kind}-${i} [[latency:${latency}]]`, idempotencyKey: `crash-${kind}-${i}` }));

    // 5 executing: the tier's every slot, each in a long model call.
    const exec = (await incubateBatch(first.url, { items: tagged('exec', TIER_MAX, EXEC_LATENCY_MS), options: { token } })).items.map((i) =>
      i.status === 'queued' ? i.vesselId : '',
    );
    await pollUntil(
      () => records(exec),
      (rs) => rs.every((r) => r.status === 'EXECUTING'),
      { timeoutMs: 30_000, everyMs: 200, what: 'the first 5 vessels executing' },
    );
    await pollUntil(
      async () => tracker.group('crash').now,
      (n) => n === TIER_MAX,
      { timeoutMs: 10_000, everyMs: 50, what: '5 model calls in flight' },
    );

    // 3 due now, waiting for capacity; 3 a few seconds ahead; 1 beyond SQS's 15 minutes (a schedule).
    const queued = (await incubateBatch(first.url, { items: tagged('queued', 3, SHORT_LATENCY_MS), options: { token } })).items.map((i) =>
      i.status === 'queued' ? i.vesselId : '',
    );
    const pending = (await incubateBatch(first.url, { items: tagged('pending', 3, SHORT_LATENCY_MS), options: { token }, ttl: 8 })).items.map((i) =>
      i.status === 'queued' ? i.vesselId : '',
    );
    const far = await incubate(first.url, {
      ...tagged('far', 1, SHORT_LATENCY_MS)[0]!,
      options: { token },
      executeAt: new Date(Date.now() + 20 * 60_000).toISOString(),
    });
    // The queued ones have met the full tier at least once (the executor moved them on and sent them back).
    await new Promise((r) => setTimeout(r, 1_500));

    const beforeKill = {
      exec: await records(exec),
      queued: await records(queued),
      pending: await records(pending),
      far: await vesselRecord(first.url, token, far.vesselId),
    };
    const farSchedule = schedules().find((s) => s.name.startsWith(`vessel-${far.vesselId}-`));
    expect(farSchedule, JSON.stringify(schedules())).toBeDefined();
    expect(tracker.group('crash').now).toBe(TIER_MAX);

    // The crash: SIGKILL to the whole process group, java included; nothing of it is left running.
    await first.kill9();
    mark('killed');
    expect(groupMembers(first.pgid)).toEqual([]);
    expect(first.output()).not.toMatch(/Stopped\./);

    expect(beforeKill.exec.map((r) => [r.status, r.attempts])).toEqual(exec.map(() => ['EXECUTING', 1]));
    expect(beforeKill.queued.map((r) => r.status)).toEqual(['QUEUED', 'QUEUED', 'QUEUED']);
    expect(beforeKill.pending.map((r) => r.status)).toEqual(['PENDING', 'PENDING', 'PENDING']);
    expect(beforeKill.far).toMatchObject({ status: 'PENDING', attempts: 0 });
    // The executing model calls were cut by the kill (the upstream saw the client go).
    await pollUntil(
      async () => tracker.group('crash').now,
      (n) => n === 0,
      { timeoutMs: 5_000, everyMs: 50, what: 'the cut model calls closed' },
    );
    const execTags = exec.map((_, i) => `crash-exec-${i}`);
    expect(tracker.intervals.filter((i) => execTags.includes(i.tag)).map((i) => i.outcome)).toEqual(execTags.map(() => 'client_closed'));

    // The restart, on the same data.
    const second = await start();
    mark('secondReady');
    const all = [...exec, ...queued, ...pending];
    const ended = await pollUntil(
      () => records(all),
      (rs) => rs.every((r) => r.isCompleted),
      {
        timeoutMs: 120_000,
        everyMs: 500,
        what: 'every vessel ended after the restart',
      },
    ).catch((err: Error) => {
      throw new Error(`${err.message}\nruntime output:\n${second.output().slice(-3000)}`);
    });
    mark('allEnded');
    const byId = new Map<string, VesselView>(ended.map((r) => [r.vesselId, r]));

    // The executing ones: FAILED once their lease lapsed, never run again — their one model call is the one the kill cut.
    for (const [i, id] of exec.entries()) {
      expect(byId.get(id), `exec ${i}`).toMatchObject({
        status: 'FAILED',
        isFailed: true,
        attempts: 1,
        output: { success: false, text: INTERRUPTED_TEXT, result: { subtype: 'error_during_execution' } },
      });
      const calls = tracker.intervals.filter((c) => c.tag === `crash-exec-${i}`);
      expect(calls.map((c) => c.outcome)).toEqual(['client_closed']);
    }
    // The waiting ones: their triggers died with fauxqs; re-driven, each ran once.
    for (const [kind, ids] of [
      ['queued', queued],
      ['pending', pending],
    ] as const) {
      for (const [i, id] of ids.entries()) {
        expect(byId.get(id), `${kind} ${i}`).toMatchObject({
          status: 'COMPLETED',
          isSuccess: true,
          attempts: 1,
          output: { success: true, text: `Echo: crash-${kind}-${i}` },
        });
        expect(tracker.intervals.filter((c) => c.tag === `crash-${kind}-${i}`).map((c) => c.outcome)).toEqual(['completed']);
      }
    }
    // None executed by two workers at once (upstream side), and never more than the tier at once, across the crash.
    expect(tracker.maxPerTag().max).toBe(1);
    expect(tracker.group('crash').max).toBeLessThanOrEqual(TIER_MAX);

    // The far one: still PENDING, its schedule kept in DATA_DIR/schedules.json and loaded again; it never ran.
    expect(await vesselRecord(second.url, token, far.vesselId)).toMatchObject({ status: 'PENDING', attempts: 0, scheduledFor: far.scheduledFor });
    expect(schedules().find((s) => s.name === farSchedule!.name)).toEqual(farSchedule);
    expect(tracker.intervals.filter((c) => c.tag === 'crash-far-0')).toEqual([]);
    // …and it can still be ended: a cancel removes its schedule.
    const cancel = await fetch(`${second.url}/incubate/vessel/${far.vesselId}/cancel`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    expect(cancel.status).toBe(200);
    expect(await cancel.json()).toMatchObject({ status: 'CANCELED', isCanceled: true });
    expect(schedules().find((s) => s.name === farSchedule!.name)).toBeUndefined();

    console.log(`vessels crash figures: ${JSON.stringify({ phases, wallMs: Date.now() - t0 })}`);
    await second.kill9();
    expect(groupMembers(second.pgid)).toEqual([]);
    runtime = undefined;
  }, 300_000);
});
