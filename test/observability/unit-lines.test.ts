import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import WebSocket from 'ws';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import type { AccessRecord, RequestAccess, VesselRunAccess, WsTurnAccess } from '../../lambdas/observability/access-log.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { connectWs, type WsClient } from '../support/ws.ts';
import { vesselApi } from '../vessels/incubate-client.ts';

/**
 * One access line per unit of work, with its whole cost (docs/contract.md, "Access log"): a /prompt run's line carries
 * every model call of the run, not the last one; each /ws turn — across the segments it pauses between for client
 * tools — and each vessel run logs exactly one line with its outcome, its AI cost and its compute, equal to what the
 * ledger was charged; a /ws upgrade, accepted or refused, logs a request's line. The in-process local runtime, the
 * simulated upstream (`[[N> …]]` scripts turn N), DynamoDB Local and real HTTP and WebSocket clients; the lines are
 * read as the JSON records the sink is given.
 */
const MODEL = 'claude-sonnet-4-6';
let gw: TestGateway;
const records: AccessRecord[] = [];
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ accessLog: (line) => records.push((JSON.parse(line) as { access: AccessRecord }).access), accessLogJson: true });
});
afterAll(async () => {
  await gw?.stop();
});

/** A fresh user: its token and its meters, read from the ledger. */
async function newUser(name: string, budget: Partial<BudgetClaim> = {}) {
  const id = `${name}-${++seq}`;
  const full: BudgetClaim = { ai: 10_000_000, compute: 3_600, window: 'day', ...budget };
  const token = await gw.token({ user: id, budget: full });
  const usage = async () => {
    const u = await readUsage({ projectId: gw.projectId, userId: id, budget: full });
    return { ai: u.used.ai, compute: u.used.compute };
  };
  return { id, token, usage };
}

/** Every line `match` picks, once the gateway has nothing left running or due (so a second line would be there too). */
async function linesOnceDrained<T extends AccessRecord>(match: (r: AccessRecord) => r is T): Promise<T[]> {
  await expect.poll(() => records.filter(match).length, { timeout: 20_000, interval: 20 }).toBeGreaterThanOrEqual(1);
  await drained(gw, { quietMs: 200 });
  return records.filter(match);
}
const turnLinesOf = (user: string) => linesOnceDrained((r): r is WsTurnAccess => r.unit === 'ws_turn' && r.user === user);
const vesselLinesOf = (vesselId: string) => linesOnceDrained((r): r is VesselRunAccess => r.unit === 'vessel_run' && r.vesselId === vesselId);

const schema = { type: 'object', properties: { answer: { type: 'number' } }, required: ['answer'] };
/** Two model calls: an answer that does not match the schema, then the corrected one. */
const TWO_CALLS = 'Answer [[1> json-invalid]] [[2> json:{"answer":7}]]';

describe('/prompt: the line carries the run, not its last call', () => {
  it('a two-call run: one line whose cost is the run’s total = the ledger’s AI delta, and whose compute is the ledger’s', async () => {
    const u = await newUser('prompt-two');
    const before = await u.usage();
    const res = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: TWO_CALLS, options: { token: u.token, model: MODEL, outputFormat: { type: 'json_schema', schema } } }),
    });
    const answer = (await res.json()) as { result: { subtype: string; num_turns: number; total_cost_microdollars: number } };
    expect(answer.result).toMatchObject({ subtype: 'success', num_turns: 2 });
    const requestId = res.headers.get('request-id')!;
    const lines = await linesOnceDrained((r): r is RequestAccess => r.unit === 'request' && r.requestId === requestId);
    expect(lines).toHaveLength(1);
    const after = await u.usage();
    const total = answer.result.total_cost_microdollars;
    expect(after.ai - before.ai).toBe(total);
    expect(lines[0]).toMatchObject({
      unit: 'request',
      method: 'POST',
      path: '/prompt',
      status: 200,
      model: MODEL,
      project: gw.projectId,
      user: u.id,
      costMicrodollars: total,
      computeSeconds: after.compute - before.compute,
    });
    expect(lines[0]!.computeSeconds).toBeGreaterThanOrEqual(1);
    // Both calls were charged something, so the total is not the last call's.
    const calls = gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages' && JSON.stringify(r.body).includes('json-invalid'));
    expect(calls.length).toBeGreaterThanOrEqual(2);
  });
});

describe('/ws: one line per turn, one per upgrade', () => {
  async function openSession(client: WsClient, options: Record<string, unknown> = {}): Promise<string> {
    client.send({ type: 'session.start', options: { model: MODEL, ...options } });
    const session = await client.next((f) => f.type === 'session');
    return session.sessionId as string;
  }

  it('two turns: a line each, with the turn’s cost and compute as charged; the upgrade’s line names the caller', async () => {
    const u = await newUser('ws-turns');
    const client = await connectWs(gw.websocket!.url, u.token);
    const sessionId = await openSession(client);
    const results: Record<string, unknown>[] = [];
    const charged: { ai: number; compute: number }[] = [];
    for (const message of ['Hello [[words:12]]', 'Again [[words:30]]']) {
      const before = await u.usage();
      client.send({ type: 'user', message });
      results.push((await client.untilResult()).at(-1)!);
      // The turn's compute is settled after its result is sent: the line is there once it is.
      await expect.poll(async () => records.filter((r) => r.unit === 'ws_turn' && r.user === u.id).length, { timeout: 10_000 }).toBe(results.length);
      const after = await u.usage();
      charged.push({ ai: after.ai - before.ai, compute: after.compute - before.compute });
    }
    const lines = await turnLinesOf(u.id);
    expect(lines).toHaveLength(2);
    for (const [i, line] of lines.entries()) {
      expect(results[i]).toMatchObject({ type: 'result', subtype: 'success', sessionId });
      expect(line).toMatchObject({
        unit: 'ws_turn',
        sessionId,
        turnId: expect.any(String),
        outcome: 'success',
        model: MODEL,
        project: gw.projectId,
        user: u.id,
        costMicrodollars: results[i]!.total_cost_microdollars,
        computeSeconds: charged[i]!.compute,
        totalMs: expect.any(Number),
      });
      expect(line.costMicrodollars).toBe(charged[i]!.ai);
      expect(line.computeSeconds).toBeGreaterThanOrEqual(1);
    }
    expect(lines[0]!.turnId).not.toBe(lines[1]!.turnId);
    expect(records.filter((r) => r.unit === 'request' && r.path === '/ws' && r.user === u.id)).toEqual([
      expect.objectContaining({ method: 'GET', path: '/ws', status: 101, project: gw.projectId, user: u.id, totalMs: expect.any(Number) }),
    ]);
    await client.close();
    expect(JSON.stringify(records)).not.toContain(u.token);
  });

  it('a turn paused for a client tool: one line when it ends, with both segments’ calls and compute', async () => {
    const u = await newUser('ws-paused');
    const client = await connectWs(gw.websocket!.url, u.token);
    await openSession(client, {
      tools: [{ name: 'device_time', description: 'The time on the device', input_schema: { type: 'object', properties: {} } }],
    });
    const before = await u.usage();
    client.send({ type: 'user', message: 'What time is it? [[tool:device_time {}]]' });
    const call = await client.next((f) => f.type === 'tool_use' && f.subtype === 'client');
    // Paused: no line yet (the turn goes on once the client answers).
    await drained(gw, { quietMs: 200 });
    expect(records.filter((r) => r.unit === 'ws_turn' && r.user === u.id)).toEqual([]);
    client.send({ type: 'tool_result', tool_use_id: call.id, content: '14:00' });
    const result = (await client.untilResult()).at(-1)!;
    expect(result).toMatchObject({ type: 'result', subtype: 'success', num_turns: 2 });
    const lines = await turnLinesOf(u.id);
    expect(lines).toHaveLength(1);
    const after = await u.usage();
    expect(lines[0]).toMatchObject({ outcome: 'success', costMicrodollars: result.total_cost_microdollars, computeSeconds: after.compute - before.compute });
    expect(lines[0]!.costMicrodollars).toBe(after.ai - before.ai);
    // Each segment is charged its own seconds, rounded up.
    expect(lines[0]!.computeSeconds).toBeGreaterThanOrEqual(2);
    await client.close();
  });

  it('a turn interrupted while it waits for a client tool: one line, written by the frame handler, with the first segment’s charge', async () => {
    const u = await newUser('ws-interrupted');
    const client = await connectWs(gw.websocket!.url, u.token);
    await openSession(client, {
      tools: [{ name: 'device_time', description: 'The time on the device', input_schema: { type: 'object', properties: {} } }],
    });
    const before = await u.usage();
    client.send({ type: 'user', message: 'What time is it? [[tool:device_time {}]]' });
    await client.next((f) => f.type === 'tool_use' && f.subtype === 'client');
    client.send({ type: 'interrupt' });
    const result = await client.next((f) => f.type === 'result');
    expect(result).toMatchObject({ subtype: 'interrupted', num_turns: 1 });
    const lines = await turnLinesOf(u.id);
    expect(lines).toHaveLength(1);
    const after = await u.usage();
    expect(lines[0]).toMatchObject({
      outcome: 'interrupted',
      costMicrodollars: result.total_cost_microdollars,
      computeSeconds: after.compute - before.compute,
    });
    expect(lines[0]!.costMicrodollars).toBe(after.ai - before.ai);
    expect(lines[0]!.costMicrodollars).toBeGreaterThan(0);
    await client.close();
  });

  it('a turn refused for the user’s budget: one line, refused with the error frame’s status and type, nothing charged', async () => {
    const u = await newUser('ws-refused', { ai: 10 });
    const client = await connectWs(gw.websocket!.url, u.token);
    await openSession(client);
    const before = await u.usage();
    client.send({ type: 'user', message: 'Hello' });
    const refusal = await client.next((f) => f.type === 'error');
    expect(refusal).toMatchObject({ error: 'user_budget_exhausted', status: 429 });
    const lines = await turnLinesOf(u.id);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ outcome: 'refused', status: 429, error: 'user_budget_exhausted', costMicrodollars: 0, computeSeconds: 0 });
    expect(await u.usage()).toEqual(before);
    await client.close();
  });

  it('refused upgrades: a line each, with the status and the error type, never the token', async () => {
    const bad = `${await gw.token({ user: 'ws-bad' })}x`;
    const from = records.length;
    await expect(connectWs(gw.websocket!.url, bad)).rejects.toThrow(/401/);
    const other = await mintToken({
      projectId: gw.projectId,
      userId: 'ws-elsewhere',
      secret: gw.secret,
      budget: { ai: 1_000, compute: 60, window: 'day' },
      origins: ['https://app.example'],
      expiresInSeconds: 600,
    });
    const socket = new WebSocket(gw.websocket!.url, { headers: { authorization: `Bearer ${other}`, origin: 'https://elsewhere.example' } });
    // Refused: `ws` reports the status as an error ("Unexpected server response: 403").
    const refused = await new Promise<string>((resolve) => socket.on('error', (err) => resolve(err.message)));
    expect(refused).toMatch(/\b403\b/);
    await expect.poll(() => records.slice(from).filter((r) => r.unit === 'request' && r.path === '/ws').length, { timeout: 10_000 }).toBe(2);
    const lines = records.slice(from).filter((r): r is RequestAccess => r.unit === 'request' && r.path === '/ws');
    expect(lines[0]).toMatchObject({
      method: 'GET',
      path: '/ws',
      status: 401,
      error: 'invalid_token',
      requestId: expect.any(String),
      totalMs: expect.any(Number),
    });
    expect(lines[1]).toMatchObject({ method: 'GET', path: '/ws', status: 403, error: 'origin_not_allowed', project: gw.projectId, user: 'ws-elsewhere' });
    expect(JSON.stringify(lines)).not.toContain(bad);
    expect(JSON.stringify(lines)).not.toContain(other);
  });
});

describe('vessels: one line per run', () => {
  it('COMPLETED after two model calls: one line, its cost the vessel’s recorded cost = the ledger’s, its compute the ledger’s', async () => {
    const api = vesselApi(gw);
    const u = await newUser('vessel-ok');
    const before = await u.usage();
    const res = await api.incubate({
      message: TWO_CALLS,
      idempotencyKey: `lines-ok-${seq}`,
      options: { token: u.token, model: MODEL, outputFormat: { type: 'json_schema', schema } },
    });
    expect(res.status).toBe(202);
    const { vesselId } = res.body;
    const done = await api.ended(vesselId, u.token);
    expect(done).toMatchObject({ status: 'COMPLETED', output: { result: { subtype: 'success', num_turns: 2 } } });
    const lines = await vesselLinesOf(vesselId);
    expect(lines).toHaveLength(1);
    const after = await u.usage();
    const cost = done.output!.result.total_cost_microdollars;
    expect(after.ai - before.ai).toBe(cost);
    expect(lines[0]).toMatchObject({
      unit: 'vessel_run',
      vesselId,
      runId: expect.any(String),
      outcome: 'COMPLETED',
      subtype: 'success',
      model: MODEL,
      project: gw.projectId,
      user: u.id,
      costMicrodollars: cost,
      computeSeconds: after.compute - before.compute,
      totalMs: expect.any(Number),
    });
    expect(lines[0]!.computeSeconds).toBeGreaterThanOrEqual(1);
  });

  it('FAILED (maxTurns reached): one line with the outcome, the subtype and what the run was charged', async () => {
    const api = vesselApi(gw);
    const u = await newUser('vessel-failed');
    const before = await u.usage();
    const res = await api.incubate({
      message: 'Loop [[1> tool:get_weather {}]] [[2> tool:get_weather {}]]',
      idempotencyKey: `lines-failed-${seq}`,
      options: {
        token: u.token,
        model: MODEL,
        maxTurns: 1,
        tools: [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object' }, url: 'http://127.0.0.1:9/weather' }],
      },
    });
    expect(res.status).toBe(202);
    const done = await api.ended(res.body.vesselId, u.token);
    expect(done).toMatchObject({ status: 'FAILED', output: { result: { subtype: 'error_max_turns' } } });
    const lines = await vesselLinesOf(res.body.vesselId);
    expect(lines).toHaveLength(1);
    const after = await u.usage();
    expect(lines[0]).toMatchObject({
      outcome: 'FAILED',
      subtype: 'error_max_turns',
      costMicrodollars: done.output!.result.total_cost_microdollars,
      computeSeconds: after.compute - before.compute,
    });
    expect(lines[0]!.costMicrodollars).toBe(after.ai - before.ai);
    expect(lines[0]!.costMicrodollars).toBeGreaterThan(0);
  });
});
