import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { connectWs } from '../support/ws.ts';

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const caller = (user: string) => ({ projectId: gw.projectId, userId: user, budget: { ai: 10_000_000, compute: 3600, window: 'day' as const } });

describe('/ws sessions', () => {
  it('two turns that remember the first, streamed deltas, results whose costs sum to the ledger delta', async () => {
    const user = 'ws-user-1';
    const token = await gw.token({ user });
    const client = await connectWs(gw.websocket!.url, token);
    const before = await readUsage(caller(user));
    client.send({ type: 'session.start', options: {} });
    const session = await client.next((f) => f.type === 'session');
    expect(session).toMatchObject({ type: 'session', resumed: false, state: 'idle', messages: 0 });
    client.send({ type: 'user', message: 'My name is Ada. [[words:40]] [[delay:20]]' });
    const first = await client.untilResult();
    const deltas = first.filter((f) => f.type === 'assistant');
    expect(deltas.length).toBeGreaterThan(1);
    // Over time, as the model streams them (40 words 20 ms apart), not all at the end.
    expect(deltas.at(-1)!.at - deltas[0]!.at).toBeGreaterThan(400);
    expect(first.at(-1)!.at - deltas.at(-1)!.at).toBeLessThan(deltas.at(-1)!.at - deltas[0]!.at);
    expect(deltas.map((d) => d.text).join('')).toBe(Array.from({ length: 40 }, (_, i) => `word${i + 1}`).join(' '));
    const result1 = first.at(-1)!;
    expect(result1).toMatchObject({ type: 'result', subtype: 'success', sessionId: session.sessionId });
    client.send({ type: 'user', message: 'What is my name?' });
    const second = await client.untilResult();
    const result2 = second.at(-1)!;
    expect(result2).toMatchObject({ type: 'result', subtype: 'success', text: 'Echo: What is my name?' });
    const requests = gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages');
    const last = requests.at(-1)!.body as { messages: { role: string; content: unknown }[] };
    expect(last.messages).toHaveLength(3);
    expect(JSON.stringify(last.messages[0])).toContain('My name is Ada.');
    expect(last.messages[1]!.role).toBe('assistant');
    const after = await readUsage(caller(user));
    expect(after.used.ai - before.used.ai).toBe((result1.total_cost_microdollars as number) + (result2.total_cost_microdollars as number));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    await client.close();
  });
});
