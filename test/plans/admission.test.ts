import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Caller } from '../../lambdas/auth/claims.ts';
import { admitRun, concurrencyRefusal, developerBudgetRefusal, type RunAdmission } from '../../lambdas/plans/admission.ts';
import { addDeveloperCompute } from '../../lambdas/budgets/developer-month.ts';
import { developerAllowance } from '../../lambdas/plans/compute.ts';
import { leaseTtlMs } from '../../lambdas/config/timing.ts';
import { releaseLease, type Lease } from '../../lambdas/plans/leases.ts';
import { anthropicRefusal } from '../../lambdas/refusals/anthropic.ts';
import { conjureRefusal } from '../../lambdas/refusals/conjure.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { createDeveloper, createProject, setDeveloperPlan } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { connectWs } from '../support/ws.ts';

/**
 * The one admission step of every run: the developer's plan first (402), then a lease at the tier the plan gives at
 * that moment (429). Time is a fake clock passed in; the refusals are checked as the conjure surface renders them.
 */
let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const T0 = new Date('2031-05-10T08:00:00.000Z');
const at = (ms: number) => new Date(T0.getTime() + ms);
let runs = 0;

async function developerWithProjects(planSeconds: number, poolSeconds = 0, projects = 1) {
  const developerId = `dev-${randomBytes(4).toString('hex')}`;
  await createDeveloper({ developerId, planSeconds, poolSeconds });
  const ids: string[] = [];
  for (let i = 0; i < projects; i++) ids.push((await createProject({ developerId })).projectId);
  return { developerId, projects: ids };
}

const caller = (projectId: string, userId = 'u1'): Caller => ({ projectId, userId, budget: { ai: 1_000_000, compute: 3_600, window: 'day' }, expiresAt: 0 });
const admit = (projectId: string, now = T0, userId = 'u1') => admitRun(caller(projectId, userId), { sessionId: `run-${++runs}`, kind: 'prompt' }, now);
const admittedCount = (results: RunAdmission[]) => results.filter((r) => r.ok).length;
const parallel = (n: number, run: () => Promise<RunAdmission>) => Promise.all(Array.from({ length: n }, run));

async function body(res: Response) {
  return { status: res.status, body: await res.json() };
}

describe('concurrency by tier, across projects', () => {
  it('hobby admits 2 of 100; raised to 3.5M, 5; to 15M, 10 — the plan counts from the next run', async () => {
    const { developerId, projects } = await developerWithProjects(1_000_000);
    const [p] = projects as [string];
    expect(admittedCount(await parallel(100, () => admit(p)))).toBe(2);
    await setDeveloperPlan(developerId, { planSeconds: 3_500_000 });
    expect(admittedCount(await parallel(100, () => admit(p)))).toBe(3);
    await setDeveloperPlan(developerId, { planSeconds: 15_000_000 });
    const last = await parallel(100, () => admit(p));
    expect(admittedCount(last)).toBe(5);
    const refused = last.find((r) => !r.ok);
    expect(refused && !refused.ok && refused.refusal).toMatchObject({ kind: 'concurrent_limit_reached', active: 10, max: 10 });
  });

  it("two projects of one developer share the limit; another developer's runs do not count", async () => {
    const shared = await developerWithProjects(1_000_000, 0, 2);
    const other = await developerWithProjects(1_000_000);
    const [a, b] = shared.projects as [string, string];
    const results = await Promise.all([
      ...Array.from({ length: 10 }, () => admit(a)),
      ...Array.from({ length: 10 }, () => admit(b)),
      ...Array.from({ length: 10 }, () => admit(other.projects[0]!)),
    ]);
    expect(admittedCount(results.slice(0, 20))).toBe(2);
    expect(admittedCount(results.slice(20))).toBe(2);
  });

  it('a crashed run frees its slot at the lease expiry; a released one at once', async () => {
    const { projects } = await developerWithProjects(1_000_000);
    const [p] = projects as [string];
    const crashed = await admit(p, T0);
    const finished = await admit(p, T0);
    expect(crashed.ok && finished.ok).toBe(true);
    expect((await admit(p, at(1))).ok).toBe(false);
    await releaseLease((finished as { lease: Lease }).lease);
    expect((await admit(p, at(2))).ok).toBe(true);
    expect((await admit(p, at(leaseTtlMs() - 1))).ok).toBe(false);
    // The crashed run's lease (never renewed) has expired: its slot is free.
    expect((await admit(p, at(leaseTtlMs()))).ok).toBe(true);
  });
});

describe('the 429 body', () => {
  it('is {error, active, max, sessions:[{sessionId, userId, ageMs}]}, ages in milliseconds growing with the clock', async () => {
    const { projects } = await developerWithProjects(1_000_000);
    const [a] = projects as [string];
    const first = await admitRun(caller(a, 'alice'), { sessionId: 'vessel-1', kind: 'vessel' }, T0);
    const second = await admitRun(caller(a, 'bob'), { sessionId: 'ws-1', kind: 'ws' }, at(400));
    expect(first.ok && second.ok).toBe(true);

    for (const [now, ages] of [
      [at(1_000), [1_000, 600]],
      [at(30_000), [30_000, 29_600]],
    ] as const) {
      const refused = await admit(a, now);
      if (refused.ok) throw new Error('expected a refusal');
      expect(await body(conjureRefusal(refused.refusal))).toEqual({
        status: 429,
        body: {
          error: 'concurrent_limit_reached',
          active: 2,
          max: 2,
          sessions: [
            { sessionId: 'vessel-1', userId: 'alice', ageMs: ages[0] },
            { sessionId: 'ws-1', userId: 'bob', ageMs: ages[1] },
          ],
        },
      });
    }
  });

  it("shows the caller's own project's runs in full, another project's only in `active`", async () => {
    // Two projects of one developer share the hobby tier's 2 slots: A's alice holds one, B's bob the other.
    const { projects } = await developerWithProjects(1_000_000, 0, 2);
    const [a, b] = projects as [string, string];
    expect((await admitRun(caller(a, 'alice@example.com'), { sessionId: 'vessel-of-a', kind: 'vessel' }, T0)).ok).toBe(true);
    expect((await admitRun(caller(b, 'bob@example.com'), { sessionId: 'ws-of-b', kind: 'ws' }, at(400))).ok).toBe(true);

    const refusedB = await admit(b, at(1_000), 'carol');
    if (refusedB.ok) throw new Error('expected a refusal');
    const seenByB = await body(conjureRefusal(refusedB.refusal));
    expect(seenByB).toEqual({
      status: 429,
      body: { error: 'concurrent_limit_reached', active: 2, max: 2, sessions: [{ sessionId: 'ws-of-b', userId: 'bob@example.com', ageMs: 600 }] },
    });
    expect(JSON.stringify(seenByB)).not.toMatch(/alice|vessel-of-a/);

    const refusedA = await admit(a, at(1_000), 'dave');
    if (refusedA.ok) throw new Error('expected a refusal');
    expect(await body(conjureRefusal(refusedA.refusal))).toEqual({
      status: 429,
      body: { error: 'concurrent_limit_reached', active: 2, max: 2, sessions: [{ sessionId: 'vessel-of-a', userId: 'alice@example.com', ageMs: 1_000 }] },
    });
  });

  it("a project whose developer's slots are all another project's sees active: 2 and no session", async () => {
    const { projects } = await developerWithProjects(1_000_000, 0, 2);
    const [a, b] = projects as [string, string];
    expect((await admitRun(caller(a, 'alice@example.com'), { sessionId: 'a-run-1', kind: 'prompt' }, T0)).ok).toBe(true);
    expect((await admitRun(caller(a, 'alice2@example.com'), { sessionId: 'a-run-2', kind: 'vessel' }, T0)).ok).toBe(true);
    const refused = await admit(b, at(5), 'bob');
    expect(!refused.ok && refused.refusal).toEqual({ kind: 'concurrent_limit_reached', active: 2, max: 2, sessions: [] });
  });

  it('comes from one function, which the proxy envelope renders too', async () => {
    const live = [
      { sessionId: 's', userId: 'u', ageMs: 5, projectId: 'p1' },
      { sessionId: 'other', userId: 'someone@example.com', ageMs: 9, projectId: 'p2' },
    ];
    const refusal = concurrencyRefusal(live, 2, 'p1');
    expect(refusal).toEqual({ kind: 'concurrent_limit_reached', active: 2, max: 2, sessions: [{ sessionId: 's', userId: 'u', ageMs: 5 }] });
    const res = anthropicRefusal(refusal);
    expect(res.status).toBe(429);
    expect(res.headers.get('x-should-retry')).toBe('true');
    expect((await res.json()).error.type).toBe('rate_limit_error');
  });
});

describe("the 429 as /prompt and /ws answer it: another project's ids are never shown", () => {
  it("project B's user sees A's run only in `active`; A's second user sees it in full", async () => {
    // The hobby tier (2 slots) of a developer with projects A and B; A's alice holds one slot, B's bob the other,
    // taken at the real clock so the gateway's own admissions see them live.
    const developerId = `dev-${randomBytes(4).toString('hex')}`;
    await createDeveloper({ developerId, planSeconds: 1_000_000 });
    const [a, b] = [await createProject({ developerId }), await createProject({ developerId })];
    const held = [
      await admitRun(caller(a.projectId, 'alice@example.com'), { sessionId: 'vessel-of-alice', kind: 'vessel' }),
      await admitRun(caller(b.projectId, 'bob@example.com'), { sessionId: 'ws-of-bob', kind: 'ws' }),
    ];
    const token = (project: { projectId: string; secret: string }, userId: string) =>
      mintToken({
        projectId: project.projectId,
        userId,
        secret: project.secret,
        budget: { ai: 1_000_000, compute: 3_600, window: 'day' },
        expiresInSeconds: 3600,
      });
    const promptRefusal = async (t: string) => {
      const res = await fetch(`${gw.url}/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message: 'hi', options: { token: t } }),
      });
      return { status: res.status, body: (await res.json()) as Record<string, unknown> };
    };
    const wsRefusal = async (t: string) => {
      const client = await connectWs(gw.websocket!.url, t);
      client.send({ type: 'session.start', options: {} });
      await client.next((f) => f.type === 'session');
      client.send({ type: 'user', message: 'hi' });
      const { type: _type, at: _at, ...frame } = await client.next((f) => f.type === 'error' || f.type === 'result');
      await client.close();
      return frame;
    };
    const age = { ageMs: expect.any(Number) };
    try {
      const carol = await token(b, 'carol@example.com');
      const seenByB = [await promptRefusal(carol), await wsRefusal(carol)];
      expect(seenByB).toEqual([
        {
          status: 429,
          body: { error: 'concurrent_limit_reached', active: 2, max: 2, sessions: [{ sessionId: 'ws-of-bob', userId: 'bob@example.com', ...age }] },
        },
        { status: 429, error: 'concurrent_limit_reached', active: 2, max: 2, sessions: [{ sessionId: 'ws-of-bob', userId: 'bob@example.com', ...age }] },
      ]);
      expect(JSON.stringify(seenByB)).not.toMatch(/alice|vessel-of-alice/);

      const dave = await token(a, 'dave@example.com');
      const seenByA = [await promptRefusal(dave), await wsRefusal(dave)];
      expect(seenByA).toEqual([
        {
          status: 429,
          body: { error: 'concurrent_limit_reached', active: 2, max: 2, sessions: [{ sessionId: 'vessel-of-alice', userId: 'alice@example.com', ...age }] },
        },
        {
          status: 429,
          error: 'concurrent_limit_reached',
          active: 2,
          max: 2,
          sessions: [{ sessionId: 'vessel-of-alice', userId: 'alice@example.com', ...age }],
        },
      ]);
      expect(JSON.stringify(seenByA)).not.toMatch(/bob|ws-of-bob/);
    } finally {
      for (const h of held) if (h.ok) await releaseLease(h.lease);
    }
  });
});

describe('the developer plan (402)', () => {
  it('is checked before any lease: {error, used, available, planSeconds, poolSeconds}', async () => {
    const { developerId, projects } = await developerWithProjects(100, 20);
    const [p] = projects as [string];
    await addDeveloperCompute(developerId, 119, T0);
    const admitted = await admit(p);
    expect(admitted.ok).toBe(true);
    await releaseLease((admitted as { lease: Lease }).lease);

    await addDeveloperCompute(developerId, 1, T0);
    const refused = await admit(p);
    if (refused.ok) throw new Error('expected a refusal');
    expect(await body(conjureRefusal(refused.refusal))).toEqual({
      status: 402,
      body: { error: 'developer_budget_exhausted', used: 120, available: 0, planSeconds: 100, poolSeconds: 20 },
    });
    // Over the plan (runs are charged whole seconds after they end): available never goes negative.
    await addDeveloperCompute(developerId, 30, T0);
    const over = await admit(p);
    expect(!over.ok && over.refusal).toEqual({ kind: 'developer_budget_exhausted', used: 150, available: 0, planSeconds: 100, poolSeconds: 20 });
    // The pool is part of the allowance; the month turns over.
    await setDeveloperPlan(developerId, { planSeconds: 100, poolSeconds: 100 });
    expect((await admit(p)).ok).toBe(true);
    expect((await admit(p, new Date('2031-06-01T00:00:00.000Z'))).ok).toBe(true);
  });

  it('available = max(0, plan + pool − used), from one function', () => {
    expect(developerBudgetRefusal(developerAllowance({ planSeconds: 10, poolSeconds: 5 }, 12))).toEqual({
      kind: 'developer_budget_exhausted',
      used: 12,
      available: 3,
      planSeconds: 10,
      poolSeconds: 5,
    });
    expect(developerBudgetRefusal(developerAllowance({ planSeconds: 10, poolSeconds: 5 }, 99))).toMatchObject({ available: 0 });
  });
});
