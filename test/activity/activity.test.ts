import { randomUUID } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMMANDS } from '../../bin/cli/commands.ts';
import { groupActivity, readActivity, totalActivity } from '../../lambdas/activity/query.ts';
import { activityKey, ACTIVITY_BUCKETS, bucketOf, NO_MODEL } from '../../lambdas/activity/record.ts';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { connectWs } from '../support/ws.ts';
import { vesselApi } from '../vessels/incubate-client.ts';

/**
 * Activity records (DESIGN §12, docs/activity.md; issue 30 done-when 1): after a mixed workload run concurrently —
 * the proxy (JSON and streams), /v1/chat/completions passed through to OpenAI, /prompt runs of two model calls, a
 * vessel, a /ws session of two turns, and a user refused for its budget — the activity of the project equals the
 * ledger to the microdollar and the second, user by user, and counts each call, model by model.
 */
const CLAUDE = 'claude-sonnet-4-6';
const GPT = 'gpt-4o';
let gw: TestGateway;
const started = new Date(Date.now() - 60_000);

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
  await gw.setPricing(GPT, { inputUsdPerMtok: 2, outputUsdPerMtok: 8, cacheReadUsdPerMtok: 0.5 });
});
afterAll(() => gw?.stop());

const BUDGET: BudgetClaim = { ai: 10_000_000, compute: 3_600, window: 'day' };
async function user(id: string, budget = BUDGET) {
  const token = await gw.token({ user: id, budget });
  return { id, token, budget, ledger: () => readUsage({ projectId: gw.projectId, userId: id, budget }) };
}

describe('activity records', () => {
  it('after a concurrent mixed workload, equal the ledger user by user (AI µ$ and compute s), with every call counted by model', async () => {
    const proxyUser = await user(`proxy-${randomUUID()}`);
    const chatUser = await user(`chat-${randomUUID()}`);
    const promptUser = await user(`prompt-${randomUUID()}`);
    const runUser = await user(`run-${randomUUID()}`);
    const broke = await user(`broke-${randomUUID()}`, { ...BUDGET, ai: 10 });
    const anthropic = new Anthropic({ baseURL: gw.url, apiKey: proxyUser.token, maxRetries: 0 });
    const api = vesselApi(gw);

    const proxyCalls = Array.from({ length: 12 }, async (_, i) => {
      const params = { model: CLAUDE, max_tokens: 100, messages: [{ role: 'user' as const, content: `hi ${i} [[words:${3 + i}]]` }] };
      if (i % 2) await anthropic.messages.stream(params).finalMessage();
      else await anthropic.messages.create(params);
    });
    const chatCalls = Array.from({ length: 6 }, async (_, i) => {
      const res = await fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${chatUser.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: GPT, stream: i % 2 === 1, messages: [{ role: 'user', content: `q ${i} [[words:4]] [[cache:read=5,write=0]]` }] }),
      });
      expect(res.status).toBe(200);
      await res.text();
    });
    const schema = { type: 'object', properties: { answer: { type: 'number' } }, required: ['answer'] };
    const prompt = async () => {
      const res = await fetch(`${gw.url}/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          message: 'Answer [[1> json-invalid]] [[2> json:{"answer":7}]]',
          options: { token: promptUser.token, model: CLAUDE, outputFormat: { type: 'json_schema', schema } },
        }),
      });
      expect(res.status).toBe(200);
      await res.json();
    };
    const vessel = async () => {
      const res = await api.incubate({ message: 'Four words [[words:4]]', idempotencyKey: randomUUID(), options: { token: runUser.token, model: CLAUDE } });
      expect(res.status).toBe(202);
      const ended = await api.ended((res.body as { vesselId: string }).vesselId, runUser.token);
      expect(ended.status).toBe('COMPLETED');
    };
    const session = async () => {
      const client = await connectWs(gw.websocket!.url, runUser.token);
      client.send({ type: 'session.start', options: { model: CLAUDE } });
      await client.next((f) => f.type === 'session');
      for (const message of ['Hello [[words:6]]', 'Again [[words:9]]']) {
        client.send({ type: 'user', message });
        const last = (await client.untilResult()).at(-1);
        expect(last, JSON.stringify(last)).toMatchObject({ type: 'result', subtype: 'success' });
      }
      client.close();
    };
    // The developer's tier runs two at once: the runs go two by two, beside the proxy's calls.
    const runs = (async () => {
      await Promise.all([prompt(), prompt()]);
      await Promise.all([vessel(), session()]);
    })();
    const refused = (async () => {
      const res = await new Anthropic({ baseURL: gw.url, apiKey: broke.token, maxRetries: 0 }).messages
        .create({ model: CLAUDE, max_tokens: 100, messages: [{ role: 'user', content: 'too dear' }] })
        .catch((e: unknown) => e);
      expect((res as { status?: number }).status).toBe(429);
    })();
    await Promise.all([...proxyCalls, ...chatCalls, runs, refused]);
    await drained(gw, { quietMs: 300 });

    const rows = await readActivity(gw.projectId, started, new Date(Date.now() + 60_000));
    const byUser = new Map(groupActivity(rows, 'user').map((g) => [g.key, g]));
    for (const u of [proxyUser, chatUser, promptUser, runUser]) {
      const ledger = await u.ledger();
      expect(ledger.reserved).toEqual({ ai: 0, compute: 0 });
      expect(ledger.used.ai).toBeGreaterThan(0);
      expect({ user: u.id, ai: byUser.get(u.id)?.aiMicros, compute: byUser.get(u.id)?.computeSeconds }).toEqual({
        user: u.id,
        ai: ledger.used.ai,
        compute: ledger.used.compute,
      });
    }
    const models = (id: string) =>
      Object.fromEntries(
        groupActivity(
          rows.filter((r) => r.userId === id),
          'model',
        ).map((g) => [g.key, g.requests]),
      );
    expect(models(proxyUser.id)).toEqual({ [CLAUDE]: 12 });
    expect(models(chatUser.id)).toEqual({ [GPT]: 6 });
    // Two calls per /prompt run, and its compute on a row of its own (no model).
    expect(models(promptUser.id)).toEqual({ [CLAUDE]: 4, [NO_MODEL]: 0 });
    // The vessel's call and the two /ws turns' calls, and three runs' compute.
    expect(models(runUser.id)).toEqual({ [CLAUDE]: 3, [NO_MODEL]: 0 });
    const chat = rows.filter((r) => r.userId === chatUser.id);
    expect(chat.reduce((n, r) => n + r.cacheReadTokens, 0)).toBe(30);
    expect(chat.every((r) => r.outputTokens === 4 * r.requests)).toBe(true);
    const brokeRows = rows.filter((r) => r.userId === broke.id);
    expect(brokeRows.map((r) => ({ model: r.model, refusals: r.refusals, aiMicros: r.aiMicros, requests: r.requests }))).toEqual([
      { model: CLAUDE, refusals: 1, aiMicros: 0, requests: 0 },
    ]);
    expect((await broke.ledger()).used.ai).toBe(0);

    // The CLI reads the same records: `gateway activity --project P --by user --json`.
    const out = await COMMANDS.activity!.run(
      { project: gw.projectId, since: '2h', by: 'user' },
      { connect: async () => ({ kind: 'local', secretCacheSeconds: 0 }) },
    );
    const data = out.data as { total: { aiMicros: number }; groups: { key: string; aiMicros: number }[] };
    expect(data.total.aiMicros).toBe(totalActivity(rows).aiMicros);
    expect(data.groups.find((g) => g.key === proxyUser.id)?.aiMicros).toBe((await proxyUser.ledger()).used.ai);
    expect(out.text).toContain(`Activity of ${gw.projectId}`);
  });

  it('the layout: a project-month is spread over the buckets by user, each item one (hour, user, model)', () => {
    const at = new Date('2026-11-27T10:42:00Z');
    expect(activityKey('p1', 'user#1', 'or:a/b', at)).toEqual({
      pk: `p1#2026-11#${bucketOf('user#1')}`,
      sk: '2026-11-27T10:00:00.000Z#user%231#or%3Aa%2Fb',
    });
    const buckets = new Set(Array.from({ length: 200 }, (_, i) => bucketOf(`u${i}`)));
    expect(buckets.size).toBe(ACTIVITY_BUCKETS);
  });
});
