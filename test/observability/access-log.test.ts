import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { connectWs } from '../support/ws.ts';
import { vesselApi } from '../vessels/incubate-client.ts';

/**
 * The local runtime's access log: one readable line per unit of work — a request, a /ws turn, a vessel run — with the
 * fields that matter, never a token.
 */
let gw: TestGateway;
const lines: string[] = [];
beforeAll(async () => {
  gw = await startTestGateway({ accessLog: (line) => lines.push(line) });
});
afterAll(async () => {
  await gw?.stop();
});

const until = async (pred: () => boolean) => {
  for (let i = 0; i < 100 && !pred(); i++) await new Promise((r) => setTimeout(r, 20));
};

describe('access log (local runtime)', () => {
  it('logs method, path, status, model, project/user, cost, latencies and request id; refusals too', async () => {
    const token = await gw.token({ user: 'logged' });
    const client = gw.client(token);
    const { data: message, response } = await client.messages
      .create({ model: 'claude-sonnet-4-6', max_tokens: 20, messages: [{ role: 'user', content: 'hi [[words:3]]' }] })
      .withResponse();
    const cost = response.headers.get('x-gateway-cost-microdollars');
    await until(() => lines.length >= 1);
    expect(lines[0]).toMatch(
      new RegExp(
        `^POST /v1/messages 200 claude-sonnet-4-6 ${gw.projectId}/logged ${cost}µ\\$ upstream \\d+ ms, total \\d+ ms ${response.headers.get('request-id')}$`,
      ),
    );
    expect(message.type).toBe('message');

    const stream = await client.messages.create({
      model: 'claude-sonnet-4-6',
      max_tokens: 20,
      stream: true,
      messages: [{ role: 'user', content: '[[words:4]]' }],
    });
    for await (const _ of stream) void _;
    await until(() => lines.length >= 2);
    expect(lines[1]).toMatch(new RegExp(`^POST /v1/messages 200 claude-sonnet-4-6 ${gw.projectId}/logged \\d+µ\\$ upstream \\d+ ms, total \\d+ ms req_gw_`));

    await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': 'nope' }, body: '{}' });
    await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
    await until(() => lines.length >= 4);
    expect(lines[2]).toMatch(/^POST \/v1\/messages 401 authentication_error total \d+ ms req_gw_[0-9a-f]{24}$/);
    expect(lines[3]).toMatch(new RegExp(`^GET /usage 200 ${gw.projectId}/logged total \\d+ ms req_gw_`));
    expect(lines.join('\n')).not.toContain(token);
  });

  it('a /prompt run, a /ws upgrade and turn, a vessel run: one line each, with the whole charge (AI + compute)', async () => {
    const token = await gw.token({ user: 'units' });
    const owner = `${gw.projectId}/units`;
    const lineWith = async (pattern: RegExp) => {
      await expect.poll(() => lines.filter((l) => pattern.test(l)).length, { timeout: 10_000, interval: 20 }).toBe(1);
      return lines.find((l) => pattern.test(l))!;
    };
    const res = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: '[[words:3]]', options: { token, model: 'claude-sonnet-4-6' } }),
    });
    const prompt = (await res.json()) as { result: { total_cost_microdollars: number } };
    await lineWith(
      new RegExp(
        `^POST /prompt 200 claude-sonnet-4-6 ${owner} ${prompt.result.total_cost_microdollars}µ\\$ \\+ [1-9]\\d* s compute upstream \\d+ ms, total \\d+ ms ${res.headers.get('request-id')}$`,
      ),
    );

    const client = await connectWs(gw.websocket!.url, token);
    await lineWith(new RegExp(`^GET /ws 101 ${owner} total \\d+ ms \\S+$`));
    client.send({ type: 'session.start', options: { model: 'claude-sonnet-4-6' } });
    const { sessionId } = await client.next((f) => f.type === 'session');
    client.send({ type: 'user', message: '[[words:5]]' });
    const turn = (await client.untilResult()).at(-1)!;
    await lineWith(
      new RegExp(
        `^ws_turn success claude-sonnet-4-6 ${owner} ${turn.total_cost_microdollars}µ\\$ \\+ [1-9]\\d* s compute upstream \\d+ ms, total \\d+ ms ${sessionId}/[0-9a-f-]{36}$`,
      ),
    );
    await client.close();
    await expect(connectWs(gw.websocket!.url, 'not-a-token')).rejects.toThrow(/401/);
    await lineWith(/^GET \/ws 401 invalid_token total \d+ ms \S+$/);

    const api = vesselApi(gw);
    const queued = await api.incubate({ message: '[[words:4]]', idempotencyKey: 'access-log-vessel', options: { token, model: 'claude-sonnet-4-6' } });
    const vessel = await api.ended(queued.body.vesselId, token);
    await lineWith(
      new RegExp(
        `^vessel_run COMPLETED success claude-sonnet-4-6 ${owner} ${vessel.output!.result.total_cost_microdollars}µ\\$ \\+ [1-9]\\d* s compute upstream \\d+ ms, total \\d+ ms ${vessel.vesselId}$`,
      ),
    );
    expect(lines.join('\n')).not.toContain(token);
  });
});
