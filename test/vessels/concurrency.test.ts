import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { tierFor } from '../../lambdas/plans/tiers.ts';
import { createDeveloper, createProject, getDeveloper } from '../../lambdas/registry/registry.ts';
import type { VesselView } from '../../lambdas/vessels/record.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { requestText, trackInFlight, type InFlightTracker } from '../support/inflight.ts';
import { scaled } from '../support/scale.ts';
import { incubateBatch, mapLimit, pollUntil, vesselRecord } from '../support/vessels.ts';

/**
 * Issue 14, "Done when" 3: a hobby developer (tier max 2) queues 1,000 vessels as 10 batches of 100 (200 in `npm test`)
 * and they all complete, never more than 2 executing at once; a starter developer (tier max 5) queues 50 (10) alongside, which run 5 at
 * a time and are not slowed by the hobby developer's backlog.
 *
 * "Executing" is recorded on the simulated upstream's side, independently of the gateway's bookkeeping: each vessel's
 * message carries its own tag (`hobby-17`, `starter-3`) and a `[[latency:MS]]` directive, so every run holds one
 * model call open for a while, and the upstream's in-flight requests are counted per developer and per vessel
 * (test/support/inflight.ts). The developers' lease items are polled every LEASE_POLL_MS as well.
 *
 * Wall time: about 1,000 × (the run's ~350 ms: the 100 ms model call plus the gateway's own work) / 2 slots, plus
 * queuing the batches — 3.5 to 4 minutes on 2 cores. The hobby developer's 2 slots stay ~95% busy, so the capacity
 * back-off is not what bounds it; the figures are printed (`vessels concurrency figures`).
 */
/**
 * 10 batches (1,000 vessels) and 50 starter vessels in the soak tier; 2 batches and 10 in `npm test`, where the starter's
 * are still few enough to end before a quarter of the hobby backlog. VESSELS_HOBBY_BATCHES overrides the batches.
 */
const HOBBY_BATCHES = Number(process.env.VESSELS_HOBBY_BATCHES ?? scaled(2, 10));
const BATCH_SIZE = 100;
const HOBBY_TOTAL = HOBBY_BATCHES * BATCH_SIZE;
const STARTER_TOTAL = scaled(10, 50);
/** Each run's model call: long enough that runs overlap at the upstream, short enough for 1,000 runs 2 at a time. */
const HOBBY_LATENCY_MS = 100;
/** The starter's calls are longer, so that its 5 runs are seen in flight together at the upstream, not only in leases. */
const STARTER_LATENCY_MS = 500;
const LEASE_POLL_MS = 50;
/** Budgets large enough that neither user's budget nor a developer's month is ever what stops a vessel. */
const BUDGET = { ai: 1_000_000_000, compute: 10_000_000, window: 'day' as const };

let gw: TestGateway;
let starter: { developerId: string; projectId: string; token: string };
let hobbyToken: string;
let tracker: InFlightTracker;

beforeAll(async () => {
  gw = await startTestGateway();
  // startTestGateway's developer: below 3.5M plan seconds → hobby, 2 at once.
  expect(tierFor((await getDeveloper(gw.developerId))!.planSeconds)).toMatchObject({ name: 'hobby', maxConcurrency: 2 });
  hobbyToken = await gw.token({ user: 'hobby-user', budget: BUDGET, expiresInSeconds: 3600 });
  const developerId = `starter-${Date.now().toString(36)}`;
  await createDeveloper({ developerId, planSeconds: 4_000_000 });
  expect(tierFor(4_000_000)).toMatchObject({ name: 'starter', maxConcurrency: 5 });
  const project = await createProject({ developerId });
  starter = {
    developerId,
    projectId: project.projectId,
    token: await mintToken({ projectId: project.projectId, userId: 'starter-user', secret: project.secret, budget: BUDGET, expiresInSeconds: 3600 }),
  };
  tracker = trackInFlight(gw.upstreams.anthropic!, (r) => {
    const m = /\b(hobby|starter)-\d+\b/.exec(requestText(r));
    return m ? { key: m[1]!, tag: m[0] } : undefined;
  });
});

afterAll(async () => {
  tracker?.stop();
  await gw?.stop();
});

const items = (prefix: string, from: number, count: number, latencyMs: number) =>
  Array.from({ length: count }, (_, i) => ({ message: `${prefix}-${from + i} [[latency:${latencyMs}]]`, idempotencyKey: `${prefix}-${from + i}` }));

/** Where a hobby run's time goes: the upstream call, the rest of the run, and the idle gaps between runs. */
function diagnostics(records: { createdAt: string; startedAt?: string; completedAt?: string }[], calls: { start: number; end?: number }[]) {
  const mean = (xs: number[]) => Math.round(xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length));
  const spans = records.map((r) => Date.parse(r.completedAt!) - Date.parse(r.startedAt!));
  const upstream = calls.map((c) => (c.end ?? c.start) - c.start);
  const first = Math.min(...calls.map((c) => c.start));
  const last = Math.max(...calls.map((c) => c.end ?? c.start));
  const busy = upstream.reduce((a, b) => a + b, 0);
  return {
    hobbyMeanRunSpanMs: mean(spans),
    hobbyMeanUpstreamMs: mean(upstream),
    hobbyUpstreamUtilisation: +(busy / (2 * (last - first))).toFixed(2),
  };
}

/** What the scenario measured; the tests below assert on it. */
interface Run {
  hobbyRecords: VesselView[];
  starterRecords: VesselView[];
  leaseMax: { hobby: number; starter: number };
  hobbyDoneWhenStarterDone: number;
  figures: Record<string, unknown>;
}
let run: Run;

/**
 * The scenario, once (it takes minutes): the hobby developer's 10 batches, then — with that backlog in the queue —
 * the starter's, both until every vessel has ended.
 */
async function scenario(): Promise<Run> {
  const started = performance.now();
  const at = () => Math.round(performance.now() - started);

  // The developers' lease items, every LEASE_POLL_MS, for as long as the scenario runs; and, for the report, the run
  // queue's backlog (messages visible, i.e. waiting for one of the executor's 20 pollers) every second.
  const leaseMax = { hobby: 0, starter: 0 };
  const backlog: [number, number][] = [];
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const [h, s] = await Promise.all([liveLeases(gw.developerId), liveLeases(starter.developerId)]);
      leaseMax.hobby = Math.max(leaseMax.hobby, h.length);
      leaseMax.starter = Math.max(leaseMax.starter, s.length);
      await new Promise((r) => setTimeout(r, LEASE_POLL_MS));
    }
  })();
  const sqs = sqsClient(gw.queues.endpoint);
  const sampler = (async () => {
    while (polling) {
      const out = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: gw.queues.urls.RUN_QUEUE_URL, AttributeNames: ['ApproximateNumberOfMessages'] }));
      backlog.push([Math.round(at() / 1000), Number(out.Attributes?.ApproximateNumberOfMessages ?? 0)]);
      await new Promise((r) => setTimeout(r, 1_000));
    }
  })();

  try {
    // The hobby developer's 10 batches of 100, two requests at a time.
    const batches = await mapLimit(
      Array.from({ length: HOBBY_BATCHES }, (_, b) => b),
      2,
      (b) => incubateBatch(gw.url, { items: items('hobby', b * BATCH_SIZE, BATCH_SIZE, HOBBY_LATENCY_MS), options: { token: hobbyToken } }),
    );
    const hobbyIds = batches.flatMap((b) => b.items.map((i) => (i.status === 'queued' ? i.vesselId : '')));
    expect(new Set(hobbyIds).size).toBe(HOBBY_TOTAL);
    const hobbyQueuedAt = at();

    // The starter developer's vessels, once the hobby backlog is in the queue.
    const starterSent = at();
    const starterBatch = await incubateBatch(gw.url, { items: items('starter', 0, STARTER_TOTAL, STARTER_LATENCY_MS), options: { token: starter.token } });
    const starterIds = starterBatch.items.map((i) => (i.status === 'queued' ? i.vesselId : ''));
    expect(starterIds.every(Boolean)).toBe(true);

    const starterGroup = tracker.group('starter');
    const hobbyGroup = tracker.group('hobby');
    await pollUntil(
      async () => starterGroup.ended,
      (n) => n >= STARTER_TOTAL,
      { timeoutMs: 300_000, everyMs: 20, what: "the starter vessels' model calls" },
    );
    const starterDoneAt = at();
    const hobbyDoneWhenStarterDone = hobbyGroup.ended;
    const starterRecords = await pollUntil(
      () => mapLimit(starterIds, 10, (id) => vesselRecord(gw.url, starter.token, id)),
      (rs) => rs.every((r) => r.isCompleted),
      { timeoutMs: 30_000, what: "the starter vessels' ends" },
    );

    await pollUntil(
      async () => hobbyGroup.ended,
      (n) => n >= HOBBY_TOTAL,
      { timeoutMs: 900_000, everyMs: 100, what: "the hobby vessels' model calls" },
    );
    const hobbyDoneAt = at();
    const hobbyRecords = await pollUntil(
      () => mapLimit(hobbyIds, 20, (id) => vesselRecord(gw.url, hobbyToken, id)),
      (rs) => rs.every((r) => r.isCompleted),
      { timeoutMs: 30_000, what: "the hobby vessels' ends" },
    );

    const figures = {
      wallMs: at(),
      hobbyQueuedAt,
      starterSent,
      starterDoneAfterMs: starterDoneAt - starterSent,
      hobbyDoneWhenStarterDone,
      hobbyDoneAt,
      hobbyRunsPerSecond: +(HOBBY_TOTAL / ((hobbyDoneAt - hobbyQueuedAt) / 1000)).toFixed(2),
      upstreamMax: { hobby: hobbyGroup.max, starter: starterGroup.max },
      leaseMax,
      // The records' [startedAt, completedAt] spans, overlapped: reported only. startedAt is taken before the
      // admission step and completedAt written after the lease is given back, so these spans overlap more than runs.
      recordSpanOverlap: { hobby: overlap(hobbyRecords), starter: overlap(starterRecords) },
      ...diagnostics(
        hobbyRecords,
        tracker.intervals.filter((i) => i.key === 'hobby'),
      ),
      // When each starter model call began, in seconds after the starter's batch was sent.
      starterCallStarts: tracker.intervals.filter((i) => i.key === 'starter').map((i) => +((i.start - started - starterSent) / 1000).toFixed(1)),
      runQueueBacklog: backlog
        .filter(([, n], i) => i % 5 === 0 || n > 0)
        .map(([t, n]) => `${t}s:${n}`)
        .join(' '),
    };
    console.log(`vessels concurrency figures: ${JSON.stringify(figures)}`);
    return { hobbyRecords, starterRecords, leaseMax, hobbyDoneWhenStarterDone, figures };
  } finally {
    polling = false;
    await Promise.all([poller, sampler]);
    sqs.destroy();
  }
}

/** The most spans of `rs` ([startedAt, completedAt]) that overlap at one instant. */
function overlap(rs: VesselView[]): number {
  const edges = rs.flatMap((r) => [
    { t: Date.parse(r.startedAt!), d: 1 },
    { t: Date.parse(r.completedAt!), d: -1 },
  ]);
  edges.sort((a, b) => a.t - b.t || a.d - b.d);
  let now = 0;
  let max = 0;
  for (const e of edges) {
    now += e.d;
    max = Math.max(max, now);
  }
  return max;
}

describe(`${HOBBY_TOTAL} hobby vessels (${HOBBY_BATCHES} batches of 100) and ${STARTER_TOTAL} starter vessels alongside`, () => {
  beforeAll(async () => {
    run = await scenario();
  }, 1_200_000);

  it('every vessel completes, each run once (one model call per vessel, never two at once for the same vessel)', () => {
    for (const r of [...run.hobbyRecords, ...run.starterRecords]) {
      expect(r, JSON.stringify(r)).toMatchObject({
        status: 'COMPLETED',
        isSuccess: true,
        attempts: 1,
        output: { success: true, result: { subtype: 'success' } },
      });
    }
    expect(run.hobbyRecords).toHaveLength(HOBBY_TOTAL);
    expect(run.starterRecords).toHaveLength(STARTER_TOTAL);
    expect(tracker.group('hobby').total).toBe(HOBBY_TOTAL);
    expect(tracker.group('starter').total).toBe(STARTER_TOTAL);
    expect(new Set(tracker.intervals.map((i) => i.tag)).size).toBe(HOBBY_TOTAL + STARTER_TOTAL);
    expect(tracker.maxPerTag().max).toBe(1);
    // Each vessel's end wakes the next parked one through the run queue, so one chain invokes the executor once per
    // vessel: in AWS, Lambda's recursive-loop detection would stop it at 16 unless the executor allows recursion
    // (lambdas/handlers/manifest.ts); the local runtime stops such chains as Lambda does (bin/local/recursion.ts).
    expect(gw.activity().recursionStopped).toBe(0);
  });

  it('the hobby developer never has more than 2 executing at once (upstream side and leases), and reaches 2', () => {
    expect(tracker.group('hobby').max).toBe(2);
    expect(run.leaseMax.hobby).toBeLessThanOrEqual(2);
  });

  it('the starter developer runs 5 at a time (upstream side), never more (leases)', () => {
    expect(tracker.group('starter').max).toBe(5);
    expect(run.leaseMax.starter).toBeLessThanOrEqual(5);
  });

  it("the starter's vessels are not slowed by the hobby backlog: all done before a quarter of the hobby's are", () => {
    expect(run.hobbyDoneWhenStarterDone, `figures: ${JSON.stringify(run.figures)}`).toBeLessThan(HOBBY_TOTAL / 4);
  });
});
