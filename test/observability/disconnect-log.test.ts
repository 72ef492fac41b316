import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { unfinishedCount } from '../../lambdas/instance/unfinished.ts';
import type { RequestAccess } from '../../lambdas/observability/access-log.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { RawConn } from '../support/raw-conn.ts';

/**
 * Exactly one access line per request, whatever the client does: it reads the answer to its end, leaves mid-stream
 * (SSE from /prompt, `stream: true` from /v1/messages) or leaves before the headers. The line of an abandoned stream
 * carries the charge the ledger recorded for it, so cost totals summed from the log match the ledger. The gateway is
 * the in-process local runtime; the client is a bare socket the test destroys at the moment it chooses.
 */
let gw: TestGateway;
const records: RequestAccess[] = [];
/** A fresh user per attempt, so a retried test reads its own ledger. */
let seq = 0;
const fresh = (name: string) => `${name}-${++seq}`;
beforeAll(async () => {
  gw = await startTestGateway({ accessLog: (line) => records.push((JSON.parse(line) as { access: RequestAccess }).access), accessLogJson: true });
});
afterAll(async () => {
  await gw?.stop();
});

const linesFor = (requestId: string) => records.filter((r) => r.requestId === requestId);
const count = (text: string, event: string) => text.split(`event: ${event}\n`).length - 1;

/** A POST written by hand, so the test decides when the socket dies. */
async function post(path: string, body: unknown, headers: Record<string, string>): Promise<RawConn> {
  const text = JSON.stringify(body);
  const conn = await RawConn.open(gw.url);
  const head = Object.entries({ host: new URL(gw.url).host, 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(text)), ...headers })
    .map(([k, v]) => `${k}: ${v}\r\n`)
    .join('');
  await conn.write(`POST ${path} HTTP/1.1\r\n${head}\r\n${text}`);
  return conn;
}

/**
 * The lines `match` picks, once one is written and nothing the requests left to do after their responses is still
 * running: every invocation has returned and the registry of work after the response is empty — the settlements and
 * the access lines chained on them have all been written, so a second line, were there one, would be there too.
 */
async function settledLines(match: (r: RequestAccess) => boolean): Promise<RequestAccess[]> {
  await expect.poll(() => records.filter(match).length, { timeout: 10_000, interval: 20 }).toBeGreaterThanOrEqual(1);
  await gw.invocationsDone();
  await expect.poll(() => unfinishedCount(), { timeout: 10_000, interval: 20 }).toBe(0);
  return records.filter(match);
}
const theLinesOf = (requestId: string) => settledLines((r) => r.requestId === requestId);

async function usedBy(token: string): Promise<number> {
  const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
  return ((await res.json()) as { ai: { used: number } }).ai.used;
}

describe('one access line per request', () => {
  it('/v1/messages, stream: true, the client leaves mid-stream: one line, clientClosed, with the charge', async () => {
    const user = fresh('leaves-proxy');
    const token = await gw.token({ user });
    const conn = await post(
      '/v1/messages',
      { model: 'claude-sonnet-4-6', max_tokens: 400, stream: true, messages: [{ role: 'user', content: '[[delay:50]] [[words:200]]' }] },
      { 'x-api-key': token, 'anthropic-version': '2023-06-01' },
    );
    await conn.waitFor('3 deltas', () => count(conn.body, 'content_block_delta') >= 3);
    const requestId = conn.headers['request-id']!;
    expect(requestId).toMatch(/^req_gw_/);
    conn.destroy();
    const lines = await theLinesOf(requestId);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ method: 'POST', path: '/v1/messages', status: 200, clientClosed: true, user });
    await expect.poll(() => usedBy(token), { timeout: 10_000, interval: 50 }).toBe(lines[0]!.costMicrodollars);
    expect(lines[0]!.costMicrodollars).toBeGreaterThan(0);
    // Written once the settlement has landed, not before.
    expect(lines[0]!.phases?.settle).toEqual(expect.any(Number));
  });

  it('/prompt as SSE, the client leaves mid-run: one line, clientClosed, with the charge', async () => {
    const user = fresh('leaves-prompt');
    const token = await gw.token({ user });
    const conn = await post(
      '/prompt',
      { message: '[[delay:50]] [[words:200]]', options: { token, model: 'claude-sonnet-4-6' } },
      { accept: 'text/event-stream' },
    );
    await conn.waitFor('3 events', () => count(conn.body, 'message') >= 3);
    const requestId = conn.headers['request-id']!;
    conn.destroy();
    const lines = await theLinesOf(requestId);
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ method: 'POST', path: '/prompt', status: 200, clientClosed: true });
    await expect.poll(() => usedBy(token), { timeout: 10_000, interval: 50 }).toBe(lines[0]!.costMicrodollars);
    expect(lines[0]!.costMicrodollars).toBeGreaterThan(0);
    // Written once the settlement has landed, not before.
    expect(lines[0]!.phases?.settle).toEqual(expect.any(Number));
  });

  it('the client leaves before the headers (the upstream still thinking): one line', async () => {
    const user = fresh('leaves-early');
    const token = await gw.token({ user });
    const conn = await post(
      '/v1/messages',
      { model: 'claude-sonnet-4-6', max_tokens: 400, stream: true, messages: [{ role: 'user', content: `${user} [[latency:1000]] [[words:5]]` }] },
      { 'x-api-key': token, 'anthropic-version': '2023-06-01' },
    );
    // The upstream has the request and is still thinking (a second, before any byte of its answer).
    await expect.poll(() => gw.upstreams.anthropic!.requests.some((r) => JSON.stringify(r.body).includes(user)), { timeout: 10_000, interval: 20 }).toBe(true);
    expect(conn.received).toBe(0);
    conn.destroy();
    const lines = await settledLines((r) => r.user === user && r.path === '/v1/messages');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatchObject({ status: 200, clientClosed: true });
    expect(lines[0]!.costMicrodollars).toBe(await usedBy(token));
  });

  it('clients that read to the end: one line each, /v1/messages and /prompt, streamed or not', async () => {
    const user = fresh('reads-all');
    const token = await gw.token({ user });
    const ids: string[] = [];
    for (const stream of [false, true]) {
      const res = await fetch(`${gw.url}/v1/messages`, {
        method: 'POST',
        headers: { 'x-api-key': token, 'anthropic-version': '2023-06-01', 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: 50, stream, messages: [{ role: 'user', content: '[[words:5]]' }] }),
      });
      await res.text();
      ids.push(res.headers.get('request-id')!);
    }
    for (const sse of [false, true]) {
      const res = await fetch(`${gw.url}/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(sse ? { accept: 'text/event-stream' } : {}) },
        body: JSON.stringify({ message: '[[words:5]]', options: { token, model: 'claude-sonnet-4-6' } }),
      });
      await res.text();
      ids.push(res.headers.get('request-id')!);
    }
    for (const id of ids) expect(await theLinesOf(id)).toHaveLength(1);
    const summed = ids.reduce((sum, id) => sum + (linesFor(id)[0]!.costMicrodollars ?? 0), 0);
    expect(summed).toBe(await usedBy(token));
  });
});
