import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GetCommand, UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDynamoLocal, type LocalDynamo } from '../../bin/local/dynamodb.ts';
import { DEV_DEVELOPER, DEV_PROJECT } from '../../bin/local/seed.ts';
import { startAnthropicUpstream, type SimulatedUpstream } from '../../bin/local/upstreams/anthropic.ts';
import type { RecordedRequest } from '../../bin/local/upstreams/types.ts';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { developerComputeUsed } from '../../lambdas/budgets/developer-month.ts';
import { sweepExpired, windowFor } from '../../lambdas/budgets/ledger.ts';
import { env } from '../../lambdas/config/env.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { leaseTtlMs, TURN_STALE_MS } from '../../lambdas/config/timing.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { sessionKey } from '../../lambdas/sessions/record.ts';
import { getSession } from '../../lambdas/sessions/store.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { groupMembers } from '../support/gateway-process.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { startRuntimeChild, type RuntimeChild } from '../support/runtime-child.ts';
import { connectWs, type WsClient } from '../support/ws.ts';

/**
 * A real crash of the process running a /ws turn (docs/ws.md, "How a turn runs": the sweeper frees a turn whose
 * worker stopped). The local runtime runs as `npm start` does (test/support/runtime-child.ts), against a simulated
 * Anthropic upstream in this test process (so it outlives the crash and records every request), on a DATA_DIR of its
 * own — as test/vessels/crash.test.ts does.
 *
 * 1. A session has one finished turn (2 messages); a second turn hangs in its model call (`[[hang]]`) and is
 *    `running`; then `kill -9` of the whole process group (gateway, npx/tsx and DynamoDB Local's java).
 * 2. With no gateway running, the stored session is still `running`: its worker died and nothing moved it. The
 *    sweeper would free it once the dead worker's last claim (sweepAt) is TURN_STALE_MS old; instead of waiting that
 *    minute, the test moves sweepAt into the past, as limits.test.ts does — through a DynamoDB Local of its own on the
 *    same data, since the runtime's died with it. Then `npm start` again on the same DATA_DIR: its SessionSweeper runs
 *    at start-up (bin/local/runtime.ts), and every second after, and frees the turn.
 * 3. The session is `idle` with the conversation it had before the crashed turn; a new connection resumes it, and a
 *    new turn sends the upstream exactly the first turn's two messages and the new one.
 * The ledger: the dead worker never settled what it reserved (the turn's compute, its model call's AI). Those holds
 * stay, unchanged, until the ledger's sweep of expired reservations (docs/contract.md, "Abandoned reservations"),
 * which charges them at their held amount — the turn's compute to the developer's month as well (the hold names the
 * developer); the test runs that sweep (lambdas/budgets/ledger.ts sweepExpired) at a
 * `now` past their expiry, as test/budgets/ledger.test.ts does, after which no hold remains. The crashed turn's
 * concurrency lease is not released either: it lapses a lease's length after its last renewal.
 *
 * Both runtimes run with a 3 s lease (LEASE_TTL_SECONDS, renewed every second) and their schedule functions every
 * second (LOCAL_SCHEDULE_INTERVAL_SECONDS), as test/vessels/crash.test.ts does; this process reads the leases with the
 * same lease length.
 */
const USER = 'ws-crash-user';
const SHORT_TIMINGS = { LEASE_TTL_SECONDS: '3', LOCAL_SCHEDULE_INTERVAL_SECONDS: '1' };
/** A lifetime window: the holds stay in one window item however long the test takes (no midnight in between). */
const BUDGET: BudgetClaim = { ai: 100_000_000, compute: 100_000, window: 'lifetime' };
const FIRST = 'Remember: the crash colour is blue.';
const CRASHED = 'This turn never ends [[hang]]';
const AFTER = 'What colour did I say?';

type RuntimeInfo = { url: string; dynamoEndpoint: string; tables: Record<string, string> };
type Hold = { ai: number; compute: number; expiresAt: number; developerId?: string };

let upstream: SimulatedUpstream;
let dataDir: string;
let runtime: RuntimeChild | undefined;
let bridge: LocalDynamo | undefined;
const pgids: number[] = [];
const clients: WsClient[] = [];
const savedEnv = { ...process.env };

beforeAll(async () => {
  upstream = await startAnthropicUpstream();
  dataDir = mkdtempSync(join(tmpdir(), 'sessions-crash-'));
});

afterAll(async () => {
  try {
    for (const c of clients) c.socket.terminate();
    await runtime?.kill9();
    await bridge?.stop();
  } finally {
    for (const pgid of pgids) {
      try {
        process.kill(-pgid, 'SIGKILL');
      } catch {
        // gone
      }
    }
    resetInstanceState();
    for (const k of Object.keys(process.env)) if (!(k in savedEnv)) delete process.env[k];
    Object.assign(process.env, savedEnv);
    await upstream?.close();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  }
});

const start = async (env: Record<string, string> = {}) => {
  runtime = undefined;
  const child = await startRuntimeChild({
    dataDir,
    env: { ANTHROPIC_BASE_URL: upstream.url, ANTHROPIC_API_KEY: 'sk-ant-ws-crash-test', ...SHORT_TIMINGS, ...env },
  });
  pgids.push(child.pgid);
  runtime = child;
  return child;
};

const runtimeInfo = (): RuntimeInfo => JSON.parse(readFileSync(join(dataDir, 'runtime.json'), 'utf8')) as RuntimeInfo;

/**
 * Points this test process's lambdas modules (getSession, the ledger, the leases, documentClient) at a DynamoDB Local
 * holding the runtime's tables, as the local runtime points its handlers (Object.assign + resetInstanceState). The
 * runtime child starts from a clean environment (runtime-child.ts), so none of this leaks into it.
 */
function useData(endpoint: string, tables: Record<string, string>): void {
  Object.assign(process.env, {
    DYNAMODB_ENDPOINT: endpoint,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
    LEASE_TTL_SECONDS: SHORT_TIMINGS.LEASE_TTL_SECONDS,
    ...tables,
  });
  resetInstanceState();
}

const wsUrl = (child: RuntimeChild) => `${child.url.replace(/^http/, 'ws')}/ws`;
const messagesRequests = (): RecordedRequest[] => upstream.requests.filter((r) => r.method === 'POST' && r.path === '/v1/messages');

async function usageWindow(): Promise<{ aiUsed: number; computeUsed: number; holds: Record<string, Hold> }> {
  const key = windowFor({ projectId: DEV_PROJECT, userId: USER, budget: BUDGET }, new Date());
  const out = await documentClient().send(new GetCommand({ TableName: env().USAGE_TABLE, Key: { pk: key.pk }, ConsistentRead: true }));
  const item = out.Item ?? {};
  return { aiUsed: Number(item.aiUsed ?? 0), computeUsed: Number(item.computeUsed ?? 0), holds: (item.holds ?? {}) as Record<string, Hold> };
}

/** The developer's leases as stored (epoch-millisecond expiries), live or not. */
async function storedLeases(): Promise<Record<string, { sessionId: string; kind: string; expiresAt: number }>> {
  const out = await documentClient().send(
    new GetCommand({ TableName: env().LEASES_TABLE, Key: { pk: `leases#${DEV_DEVELOPER}`, sk: 'leases' }, ConsistentRead: true }),
  );
  return (out.Item?.leases ?? {}) as Record<string, { sessionId: string; kind: string; expiresAt: number }>;
}

describe('a crash of the process running a /ws turn', () => {
  it('kill -9 mid-turn: after a restart the sweeper frees the turn, the session resumes with its conversation before the turn, and the dead turn’s holds are charged by the ledger’s sweep', async () => {
    const t0 = Date.now();
    const phases: Record<string, number> = {};
    const mark = (name: string) => (phases[name] = Date.now() - t0);

    // ——— 1. A session with one finished turn, then a turn that hangs; kill -9. ———
    const first = await start();
    mark('firstReady');
    const info1 = runtimeInfo();
    useData(info1.dynamoEndpoint, info1.tables);
    const project = (
      await documentClient().send(new GetCommand({ TableName: info1.tables.REGISTRY_TABLE!, Key: { pk: `project#${DEV_PROJECT}` }, ConsistentRead: true }))
    ).Item as { secret?: string } | undefined;
    expect(project?.secret, `no ${DEV_PROJECT} in the runtime's registry`).toBeTruthy();
    const token = await mintToken({ projectId: DEV_PROJECT, userId: USER, secret: project!.secret!, budget: BUDGET, expiresInSeconds: 3600 });

    const client = await connectWs(wsUrl(first), token);
    clients.push(client);
    client.send({ type: 'session.start', options: {} });
    const opened = await client.next((f) => f.type === 'session' || f.type === 'error');
    expect(opened).toMatchObject({ type: 'session', resumed: false, state: 'idle', messages: 0 });
    const sessionId = opened.sessionId as string;

    client.send({ type: 'user', message: FIRST });
    const turn1 = (await client.untilResult(30_000)).at(-1)!;
    expect(turn1).toMatchObject({ type: 'result', subtype: 'success', text: `Echo: ${FIRST}`, sessionId });
    const conversationBefore = [
      { role: 'user', content: FIRST },
      { role: 'assistant', content: [{ type: 'text', text: `Echo: ${FIRST}` }] },
    ];
    expect(await getSession(sessionId)).toMatchObject({ state: 'idle', conversation: conversationBefore });

    const callsBefore = messagesRequests().length;
    client.send({ type: 'user', message: CRASHED });
    await expect.poll(async () => (await getSession(sessionId))?.state, { timeout: 15_000, interval: 50 }).toBe('running');
    // The model call is in flight upstream: its AI reservation was taken before it was sent.
    await expect.poll(() => messagesRequests().length, { timeout: 10_000, interval: 50 }).toBe(callsBefore + 1);
    const hung = messagesRequests().at(-1)!;
    expect(JSON.stringify(hung.body)).toContain('This turn never ends');
    const running = (await getSession(sessionId))!;
    expect(running).toMatchObject({ state: 'running', conversation: conversationBefore });
    const crashedTurnId = running.turn!.id;

    // What the running turn holds: its compute (admission) and its model call's AI, neither settled yet.
    const beforeKill = await usageWindow();
    expect(beforeKill.aiUsed).toBe(turn1.total_cost_microdollars);
    const crashedHolds = beforeKill.holds;
    const holdList = Object.values(crashedHolds);
    expect(holdList).toHaveLength(2);
    expect(holdList.filter((h) => h.ai === 0 && h.compute > 0 && h.developerId === DEV_DEVELOPER)).toHaveLength(1); // the turn's compute
    expect(holdList.filter((h) => h.ai > 0 && h.compute === 0)).toHaveLength(1); // the model call's worst case
    expect(Object.values(await storedLeases()).filter((l) => l.sessionId === sessionId)).toHaveLength(1);

    // The crash: SIGKILL to the whole group, java included; nothing of it is left running.
    await first.kill9();
    const killedAt = Date.now();
    mark('killed');
    runtime = undefined;
    expect(groupMembers(first.pgid)).toEqual([]);
    expect(first.output()).not.toMatch(/Stopped\./);
    // The client's socket closes without a close frame, and the crashed turn never answered.
    expect((await client.closed).code).toBe(1006);
    expect(client.frames.slice(client.frames.indexOf(turn1) + 1)).toEqual([]);
    // The upstream saw its client go.
    await expect.poll(() => hung.outcome, { timeout: 5_000, interval: 50 }).toBe('client_closed');

    // ——— 2. The data while no gateway runs; the dead worker's claim made due; npm start again. ———
    bridge = await startDynamoLocal({ path: join(dataDir, 'dynamodb') });
    useData(bridge.endpoint, info1.tables);
    const dead = (await getSession(sessionId))!;
    // Still running: the worker died and nothing moved the session. Its claim, still valid at the crash, lapses
    // TURN_STALE_MS after its last renewal: the sweeper would leave it alone for up to a minute after the crash.
    expect(dead).toMatchObject({ state: 'running', conversation: conversationBefore });
    expect(dead.turn?.id).toBe(crashedTurnId);
    const deadItem = (
      await documentClient().send(new GetCommand({ TableName: info1.tables.SESSIONS_TABLE!, Key: sessionKey(sessionId), ConsistentRead: true }))
    ).Item!;
    expect(deadItem).toMatchObject({ sweepShard: 'turn' });
    expect(deadItem.sweepAt as number).toBeGreaterThan(killedAt);
    expect(deadItem.sweepAt as number).toBeLessThanOrEqual(killedAt + TURN_STALE_MS);
    // Time passes for the claim: it is now TURN_STALE_MS old (only if the session is still that turn, running).
    await documentClient().send(
      new UpdateCommand({
        TableName: info1.tables.SESSIONS_TABLE!,
        Key: sessionKey(sessionId),
        UpdateExpression: 'SET sweepAt = :at',
        ConditionExpression: '#state = :running AND turn.id = :turn',
        ExpressionAttributeNames: { '#state': 'state' },
        ExpressionAttributeValues: { ':at': Date.now() - TURN_STALE_MS - 1, ':running': 'running', ':turn': crashedTurnId },
      }),
    );
    // Nothing settled the dead turn's holds.
    expect((await usageWindow()).holds).toEqual(crashedHolds);
    resetInstanceState();
    await bridge.stop();
    bridge = undefined;
    mark('madeDue');

    // The restart. WARN logs show the sweeper's own account of what it freed.
    const second = await start({ POWERTOOLS_LOG_LEVEL: 'WARN' });
    mark('secondReady');
    const info2 = runtimeInfo();
    expect(info2.url).toBe(second.url);
    useData(info2.dynamoEndpoint, info2.tables);

    // ——— 3. Freed by the restarted gateway's sweeper; resumed; a new turn from the conversation before the crash. ———
    await expect.poll(async () => (await getSession(sessionId))?.state, { timeout: 15_000, interval: 100 }).toBe('idle');
    const freed = (await getSession(sessionId))!;
    expect(freed.turn).toBeUndefined();
    expect(freed.conversation).toEqual(conversationBefore);
    const freedItem = (
      await documentClient().send(new GetCommand({ TableName: info2.tables.SESSIONS_TABLE!, Key: sessionKey(sessionId), ConsistentRead: true }))
    ).Item!;
    expect(freedItem).toMatchObject({ state: 'idle', messages: 2 });
    expect(freedItem.sweepAt).toBeUndefined();
    expect(freedItem.sweepShard).toBeUndefined();
    await expect.poll(() => second.output(), { timeout: 5_000, interval: 100 }).toMatch(/a \/ws turn was freed: its worker stopped/);
    expect(second.output()).toContain(crashedTurnId);
    // The turn_lost frame went to a connection that is gone: a 410, not a failure of the sweep.
    expect(second.output()).not.toMatch(/sweeping a turn failed/);

    const again = await connectWs(wsUrl(second), token);
    clients.push(again);
    again.send({ type: 'session.start', sessionId });
    expect(await again.next((f) => f.type === 'session' || f.type === 'error')).toMatchObject({
      type: 'session',
      sessionId,
      resumed: true,
      state: 'idle',
      messages: 2,
    });

    const callsBeforeResume = messagesRequests().length;
    again.send({ type: 'user', message: AFTER });
    const turn3 = (await again.untilResult(30_000)).at(-1)!;
    expect(turn3).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: `Echo: ${AFTER}`, sessionId });
    expect(messagesRequests().length).toBe(callsBeforeResume + 1);
    const resumedCall = messagesRequests().at(-1)!;
    expect((resumedCall.body as { messages: unknown[] }).messages).toEqual([...conversationBefore, { role: 'user', content: AFTER }]);
    expect(resumedCall.outcome).toBe('completed');
    expect((await getSession(sessionId))?.conversation).toEqual([
      ...conversationBefore,
      { role: 'user', content: AFTER },
      { role: 'assistant', content: [{ type: 'text', text: `Echo: ${AFTER}` }] },
    ]);
    await again.close();

    // ——— The ledger. ———
    // The new turn settled its own holds; the dead turn's are still there, unchanged, and not yet expired: the
    // ledger's sweep (on a reservation they stand in the way of, or a /usage read) leaves them until then.
    const afterTurn = await usageWindow();
    expect(afterTurn.holds).toEqual(crashedHolds);
    expect(afterTurn.aiUsed).toBe((turn1.total_cost_microdollars as number) + (turn3.total_cost_microdollars as number));
    const key = windowFor({ projectId: DEV_PROJECT, userId: USER, budget: BUDGET }, new Date());
    expect(await sweepExpired(key)).toBe(0);
    // Each expires RESERVATION_TTL_SECONDS after it was taken, so at most that long after the crash.
    for (const h of holdList) {
      expect(h.expiresAt).toBeGreaterThan(Math.floor(Date.now() / 1000));
      expect(h.expiresAt).toBeLessThanOrEqual(Math.ceil(killedAt / 1000) + env().RESERVATION_TTL_SECONDS);
    }
    // The sweep, once they have expired: each settled exactly once, at its held amount; no hold remains.
    const expiry = new Date(Math.max(...holdList.map((h) => h.expiresAt)) * 1000);
    const monthBefore = await developerComputeUsed(DEV_DEVELOPER, expiry);
    expect(await sweepExpired(key, expiry)).toBe(2);
    expect(await sweepExpired(key, expiry)).toBe(0);
    const swept = await usageWindow();
    expect(swept.holds).toEqual({});
    expect(await windowsWithHolds(env().USAGE_TABLE)).toEqual([]);
    const sum = (m: 'ai' | 'compute') => holdList.reduce((s, h) => s + h[m], 0);
    expect(swept.aiUsed - afterTurn.aiUsed).toBe(sum('ai'));
    expect(swept.computeUsed - afterTurn.computeUsed).toBe(sum('compute'));
    // The developer's month is charged the crashed turn's held seconds too, once.
    expect(sum('compute')).toBeGreaterThan(0);
    expect((await developerComputeUsed(DEV_DEVELOPER, expiry)) - monthBefore).toBe(sum('compute'));

    // The dead turn's lease was never released: it is the only one left, and lapses a lease's length after its last
    // renewal (before the crash) — the new turn's was released.
    const leases = Object.values(await storedLeases());
    expect(leases.map((l) => [l.sessionId, l.kind])).toEqual([[sessionId, 'ws']]);
    expect(leases[0]!.expiresAt).toBeLessThanOrEqual(killedAt + leaseTtlMs());
    expect(await liveLeases(DEV_DEVELOPER, new Date(killedAt + leaseTtlMs()))).toEqual([]);

    mark('done');
    console.log(
      `sessions crash figures: ${JSON.stringify({ phases, wallMs: Date.now() - t0, crashedHolds: holdList.map((h) => ({ ai: h.ai, compute: h.compute })) })}`,
    );
    await second.kill9();
    expect(groupMembers(second.pgid)).toEqual([]);
    runtime = undefined;
  }, 240_000);
});
