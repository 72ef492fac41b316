import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/** The local runtime's access log: one readable line per request, with the fields that matter, never a token. */
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
});
