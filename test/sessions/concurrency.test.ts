import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { TIERS } from '../../lambdas/plans/tiers.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import { getSession } from '../../lambdas/sessions/store.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { connectWs, type Frame, type WsClient } from '../support/ws.ts';

/**
 * Admission per /ws turn (issue 16, done-when 5): each turn — each segment of a turn that pauses for client tools —
 * is admitted as a /prompt run: the developer's plan (402), a concurrency lease (429), the user's budget (429). A
 * refusal is an `error` frame carrying exactly /prompt's body, plus `type` and `status`; a session waiting for its
 * client's tools holds no lease.
 */
let gw: TestGateway;
let seq = 0;
const HOBBY = TIERS.find((t) => t.name === 'hobby')!;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const FULL: BudgetClaim = { ai: 10_000_000, compute: 3600, window: 'day' };

/** A developer on the hobby tier, with one project. */
async function hobbyDeveloper() {
  const developerId = `dev-ws-hobby-${++seq}`;
  await createDeveloper({ developerId, planSeconds: 1_000 });
  const project = await createProject({ developerId });
  return { developerId, project };
}

async function userOf(project: { projectId: string; secret: string }, budget: Partial<BudgetClaim> = {}) {
  const userId = `ws-conc-${++seq}`;
  const claim = { ...FULL, ...budget };
  const token = await mintToken({ projectId: project.projectId, userId, secret: project.secret, budget: claim, expiresInSeconds: 3600 });
  return { userId, token, caller: { projectId: project.projectId, userId, budget: claim } };
}

async function openSession(token: string, options: Record<string, unknown> = {}): Promise<{ client: WsClient; sessionId: string }> {
  const client = await connectWs(gw.websocket!.url, token);
  client.send({ type: 'session.start', options });
  const session = await client.next((f) => f.type === 'session');
  return { client, sessionId: session.sessionId as string };
}

/** /prompt's refusal for the same caller: its status and body. */
async function promptRefusal(token: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${gw.url}/prompt`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ message: 'hi', options: { token } }),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** An `error` frame as /prompt's body: without the frame's own `type`, `status` and the client's `at`. */
function bodyOf(frame: Frame): Record<string, unknown> {
  const { type: _type, status: _status, at: _at, ...body } = frame;
  return body;
}

const SLOW = 'Tell me a long story [[words:300]] [[delay:30]]';

describe('concurrency: a lease per running turn', () => {
  it("a third simultaneous turn of a hobby developer gets /prompt's 429 body; its session stays idle and runs once a slot frees", async () => {
    expect(HOBBY.maxConcurrency).toBe(2);
    const { developerId, project } = await hobbyDeveloper();
    const [a, b, c] = [await userOf(project), await userOf(project), await userOf(project)];
    const [sa, sb, sc] = [await openSession(a.token), await openSession(b.token), await openSession(c.token)];

    sa.client.send({ type: 'user', message: SLOW });
    sb.client.send({ type: 'user', message: SLOW });
    await Promise.all([sa.client.next((f) => f.type === 'assistant'), sb.client.next((f) => f.type === 'assistant')]);
    const live = await liveLeases(developerId);
    expect(live.map((l) => [l.sessionId, l.userId]).sort()).toEqual(
      [
        [sa.sessionId, a.userId],
        [sb.sessionId, b.userId],
      ].sort(),
    );

    sc.client.send({ type: 'user', message: 'My turn?' });
    const refused = await sc.client.next();
    const leasesNow = await liveLeases(developerId);
    const prompt = await promptRefusal(c.token);
    expect(prompt.status).toBe(429);

    // Exactly /prompt's body, plus type and status.
    expect(refused.type).toBe('error');
    expect(refused.status).toBe(429);
    expect(Object.keys(refused).sort()).toEqual(['at', 'status', 'type', ...Object.keys(prompt.body)].sort());
    const sessions = (refused.sessions as { sessionId: string; userId: string; ageMs: number }[]) ?? [];
    expect(bodyOf(refused)).toEqual({
      error: 'concurrent_limit_reached',
      active: 2,
      max: 2,
      sessions: leasesNow.map((l) => ({ sessionId: l.sessionId, userId: l.userId, ageMs: expect.any(Number) })),
    });
    expect(sessions.map((s) => s.ageMs).every((ms) => ms >= 0)).toBe(true);
    // /prompt at the same moment names the same two runs, in the same order.
    expect({
      ...prompt.body,
      sessions: (prompt.body.sessions as { sessionId: string; userId: string }[]).map(({ sessionId, userId }) => ({ sessionId, userId })),
    }).toEqual({
      ...bodyOf(refused),
      sessions: sessions.map(({ sessionId, userId }) => ({ sessionId, userId })),
    });

    // The refused turn left the session idle, with nothing stored, and took no lease.
    const stored = await getSession(sc.sessionId);
    expect(stored).toMatchObject({ state: 'idle', conversation: [] });
    expect(stored?.turn).toBeUndefined();
    sc.client.send({ type: 'session.start', sessionId: sc.sessionId });
    expect(await sc.client.next()).toMatchObject({ type: 'session', sessionId: sc.sessionId, resumed: true, state: 'idle', messages: 0 });
    expect((await liveLeases(developerId)).length).toBe(2);

    // A slot frees (a's turn is interrupted): c's turn runs.
    sa.client.send({ type: 'interrupt' });
    expect(await sa.client.next((f) => f.type === 'result')).toMatchObject({ subtype: 'interrupted', sessionId: sa.sessionId });
    await expect.poll(async () => (await liveLeases(developerId)).length, { timeout: 3_000, interval: 50 }).toBe(1);
    sc.client.send({ type: 'user', message: 'My turn now?' });
    expect((await sc.client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: My turn now?', sessionId: sc.sessionId });

    sb.client.send({ type: 'interrupt' });
    expect(await sb.client.next((f) => f.type === 'result')).toMatchObject({ subtype: 'interrupted' });
    await expect.poll(async () => liveLeases(developerId), { timeout: 3_000, interval: 50 }).toEqual([]);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    await Promise.all([sa.client.close(), sb.client.close(), sc.client.close()]);
  });

  it('a session waiting for a client tool holds no lease and nothing on the budget; its tool_result resumes it under a new lease', async () => {
    const { developerId, project } = await hobbyDeveloper();
    const u = await userOf(project);
    const readNote = {
      name: 'read_note',
      description: "Reads one of the user's notes",
      input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
    };
    const { client, sessionId } = await openSession(u.token, { tools: [readNote] });

    // Call 1: the client tool; call 2 (after its result): a slow answer.
    client.send({ type: 'user', message: 'Read my note [[1> tool:read_note {"title":"Paris"}]] [[2> words:120]] [[2> delay:30]]' });
    const call = await client.next((f) => f.type === 'tool_use');
    expect(call).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'read_note', input: { title: 'Paris' }, id: expect.any(String) });

    // Waiting: no lease, no compute held, the session saved as awaiting_tools — for as long as the client takes.
    for (let i = 0; i < 4; i++) {
      expect(await liveLeases(developerId)).toEqual([]);
      await new Promise((r) => setTimeout(r, 150));
    }
    expect(await getSession(sessionId)).toMatchObject({ state: 'awaiting_tools', turn: { pending: [call.id] } });
    expect((await readUsage(u.caller)).reserved).toEqual({ ai: 0, compute: 0 });
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);

    // The result resumes the turn: its segment holds a lease again, under the session's id.
    client.send({ type: 'tool_result', tool_use_id: call.id, content: 'Paris, 12-14 June' });
    await client.next((f) => f.type === 'assistant' && (f.text as string).includes('word1'));
    const during = await liveLeases(developerId);
    expect(during).toEqual([{ sessionId, userId: u.userId, ageMs: expect.any(Number) }]);
    expect(await getSession(sessionId)).toMatchObject({ state: 'running' });

    const result = await client.next((f) => f.type === 'result');
    expect(result).toMatchObject({ subtype: 'success', num_turns: 2, sessionId, text: Array.from({ length: 120 }, (_, i) => `word${i + 1}`).join(' ') });
    await expect.poll(async () => liveLeases(developerId), { timeout: 3_000, interval: 50 }).toEqual([]);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    // The model's second call saw the client's result.
    const last = gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages').at(-1)!.body as { messages: { role: string; content: unknown }[] };
    expect(JSON.stringify(last.messages.at(-1))).toContain('Paris, 12-14 June');
    await client.close();
  });
});

describe('a turn resuming after client tools is admitted again', () => {
  it('refused at the resume (every slot taken): the 429 frame, no result, the tool results kept, and the next message goes on from them', async () => {
    const { developerId, project } = await hobbyDeveloper();
    const [a, b, d] = [await userOf(project), await userOf(project), await userOf(project)];
    const tool = { name: 'pick_file', description: 'Picks a file on the device', input_schema: { type: 'object' } };
    const sd = await openSession(d.token, { tools: [tool] });
    sd.client.send({ type: 'user', message: 'Pick one [[tool:pick_file {}]]' });
    const call = await sd.client.next((f) => f.type === 'tool_use');

    // While d's client works, the developer's two slots fill.
    const [sa, sb] = [await openSession(a.token), await openSession(b.token)];
    sa.client.send({ type: 'user', message: SLOW });
    sb.client.send({ type: 'user', message: SLOW });
    await Promise.all([sa.client.next((f) => f.type === 'assistant'), sb.client.next((f) => f.type === 'assistant')]);

    sd.client.send({ type: 'tool_result', tool_use_id: call.id, content: 'notes.txt' });
    const refused = await sd.client.next((f) => f.type === 'error' || f.type === 'result');
    expect(refused).toMatchObject({ type: 'error', status: 429, error: 'concurrent_limit_reached', active: 2, max: 2 });
    expect((refused.sessions as { sessionId: string }[]).map((s) => s.sessionId).sort()).toEqual([sa.sessionId, sb.sessionId].sort());
    const stored = (await getSession(sd.sessionId))!;
    expect(stored.state).toBe('idle');
    expect(stored.conversation).toHaveLength(3);
    expect(stored.conversation[2]).toEqual({ role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'notes.txt' }] });

    sa.client.send({ type: 'interrupt' });
    sb.client.send({ type: 'interrupt' });
    await Promise.all([sa.client.next((f) => f.type === 'result'), sb.client.next((f) => f.type === 'result')]);
    await expect.poll(async () => liveLeases(developerId), { timeout: 3_000, interval: 50 }).toEqual([]);
    expect(sd.client.frames.filter((f) => f.type === 'result')).toEqual([]);

    sd.client.send({ type: 'user', message: 'Go on' });
    expect((await sd.client.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success', sessionId: sd.sessionId });
    const last = gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages').at(-1)!.body as { messages: { role: string; content: unknown }[] };
    expect(last.messages).toHaveLength(3);
    expect(last.messages[2]).toEqual({
      role: 'user',
      content: [
        { type: 'tool_result', tool_use_id: call.id, content: 'notes.txt' },
        { type: 'text', text: 'Go on' },
      ],
    });
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    await Promise.all([sa.client.close(), sb.client.close(), sd.client.close()]);
  });
});

describe("budget refusals: /prompt's bodies", () => {
  it("a user whose budget is spent: user_budget_exhausted, /prompt's body and status 429; the session stays idle", async () => {
    const token = await gw.token({ user: `ws-broke-${++seq}`, budget: { ai: 0 } });
    const { client, sessionId } = await openSession(token);
    client.send({ type: 'user', message: 'hi' });
    const refused = await client.next();
    const prompt = await promptRefusal(token);
    expect(prompt.status).toBe(429);
    expect(prompt.body).toMatchObject({ error: 'user_budget_exhausted', ai: { used: 0, remaining: 0, budget: 0 } });
    expect(refused).toMatchObject({ type: 'error', status: 429 });
    expect(bodyOf(refused)).toEqual(prompt.body);
    expect(await getSession(sessionId)).toMatchObject({ state: 'idle', conversation: [] });
    expect(await liveLeases(gw.developerId)).toEqual([]);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    // Still usable: the next frame is answered (and refused the same way).
    client.send({ type: 'user', message: 'hi again' });
    expect(await client.next()).toMatchObject({ type: 'error', error: 'user_budget_exhausted', status: 429 });
    await client.close();
  });

  it("AI budget below the first model call's smallest form: the same 429 frame as /prompt's body, no model call, nothing charged", async () => {
    const user = `ws-poor-${++seq}`;
    const token = await gw.token({ user, budget: { ai: 500 } });
    const { client, sessionId } = await openSession(token);
    const calls = gw.upstreams.anthropic!.requests.length;
    client.send({ type: 'user', message: 'hi' });
    const refused = await client.next();
    const prompt = await promptRefusal(token);
    expect(prompt.status).toBe(429);
    expect(prompt.body).toMatchObject({ error: 'user_budget_exhausted', ai: { used: 0, remaining: 500, budget: 500 }, compute: { used: 0, remaining: 3600 } });
    expect(refused).toMatchObject({ type: 'error', status: 429 });
    expect(bodyOf(refused)).toEqual(prompt.body);
    expect(gw.upstreams.anthropic!.requests.length).toBe(calls);
    expect(await getSession(sessionId)).toMatchObject({ state: 'idle', conversation: [] });
    expect(await liveLeases(gw.developerId)).toEqual([]);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    const usage = await readUsage({ projectId: gw.projectId, userId: user, budget: { ai: 500, compute: 3600, window: 'day' } });
    expect(usage.used).toEqual({ ai: 0, compute: 0 });
    await client.close();
  });

  it("the developer's month spent: developer_budget_exhausted, /prompt's 402 body", async () => {
    const developerId = `dev-ws-zero-${++seq}`;
    await createDeveloper({ developerId, planSeconds: 0, poolSeconds: 0 });
    const project = await createProject({ developerId });
    const u = await userOf(project);
    const { client, sessionId } = await openSession(u.token);
    client.send({ type: 'user', message: 'hi' });
    const refused = await client.next();
    const prompt = await promptRefusal(u.token);
    expect(prompt).toEqual({ status: 402, body: { error: 'developer_budget_exhausted', used: 0, available: 0, planSeconds: 0, poolSeconds: 0 } });
    expect(refused).toEqual({ type: 'error', status: 402, ...prompt.body, at: expect.any(Number) });
    expect(await getSession(sessionId)).toMatchObject({ state: 'idle', conversation: [] });
    expect(await liveLeases(developerId)).toEqual([]);
    await client.close();
  });
});
