import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { addDeveloperCompute } from '../../lambdas/budgets/developer-month.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { idempotencyItems, MODEL, vesselApi, vesselItems } from './incubate-client.ts';

/**
 * What /incubate refuses, with the exact bodies (docs/incubate.md, "Errors"): 400s (the key, every kind of bad field,
 * timing, callbacks, batch size), 401s (the token is checked first), 402 (the developer's plan), and the 404 that hides
 * a vessel from anyone but its own project and user. A refused request leaves nothing in the table.
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let token: string;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  api = vesselApi(gw);
  token = await gw.token({ user: 'refused-user' });
});
afterAll(async () => {
  await gw?.stop();
});

const invalid = (message: string) => ({ error: 'invalid_request', message });

describe('400', () => {
  it('no idempotencyKey: missing_idempotency_key', async () => {
    const res = await api.incubate({ message: 'hi', options: { token } });
    expect(res.status).toBe(400);
    expect(res.body).toEqual({
      error: 'missing_idempotency_key',
      message: 'idempotencyKey is required: a key unique per project, so that a retried request never queues a second vessel',
    });
  });

  it('each bad field: invalid_request naming it', async () => {
    const ok = { message: 'hi', idempotencyKey: 'k-400', options: { token, model: MODEL } };
    const cases: [Record<string, unknown>, ReturnType<typeof invalid>][] = [
      [{ ...ok, message: '' }, invalid('message must not be empty')],
      [{ ...ok, message: undefined }, invalid('message is required and must be a string')],
      [{ ...ok, message: 42 }, invalid('message is required and must be a string')],
      [{ ...ok, idempotencyKey: '' }, invalid('idempotencyKey must not be empty')],
      [{ ...ok, idempotencyKey: 7 }, invalid('idempotencyKey must be a string')],
      [{ ...ok, idempotencyKey: 'k'.repeat(256) }, invalid('idempotencyKey must be at most 255 characters')],
      [{ ...ok, ttl: -1 }, invalid('ttl must not be negative')],
      [{ ...ok, ttl: '60' }, invalid('ttl must be a number of seconds')],
      [{ ...ok, ttl: 31_536_001 }, invalid('ttl must be at most 31536000 seconds (365 days)')],
      [{ ...ok, executeAt: 'tomorrow' }, invalid('executeAt must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T09:00:00Z')],
      [{ ...ok, executeAt: '2026-12-01T09:00:00' }, invalid('executeAt must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T09:00:00Z')],
      [{ ...ok, callback: { url: 'http://169.254.169.254/latest/meta-data/' } }, invalid('callback.url is refused: address 169.254.169.254 is not allowed')],
      [{ ...ok, callback: { url: 'http://10.0.0.1/x' } }, invalid('callback.url is refused: address 10.0.0.1 is not allowed')],
      [{ ...ok, callback: { url: '/relative' } }, invalid('callback.url is refused: not a valid absolute URL')],
      [{ ...ok, callback: { url: 'https://hooks.example.com/x', secret: '' } }, invalid('callback.secret must not be empty')],
      [{ ...ok, callback: { url: 'https://hooks.example.com/x', retries: 3 } }, invalid('callback: Unrecognized key: "retries"')],
      [{ ...ok, priority: 'high' }, invalid('Unrecognized key: "priority"')],
      [{ ...ok, options: { token, maxTurns: 'x' } }, invalid('options.maxTurns: maxTurns must be a number')],
      [{ ...ok, options: { token, maxTurn: 3 } }, invalid('options: Unrecognized key: "maxTurn"')],
    ];
    for (const [body, expected] of cases) {
      const res = await api.incubate(body);
      expect({ status: res.status, body: res.body }, JSON.stringify(body).slice(0, 200)).toEqual({ status: 400, body: expected });
    }
    const notJson = await api.incubate('{"message": "hi",');
    expect({ status: notJson.status, body: notJson.body }).toEqual({ status: 400, body: invalid('Request body is not valid JSON') });
    // Nothing of any of them was kept.
    expect(await vesselItems(gw.projectId)).toEqual([]);
    expect(await idempotencyItems(gw.projectId)).toEqual([]);
  });

  it('executeAt more than 365 days ahead', async () => {
    const executeAt = new Date(Date.now() + 366 * 86_400_000).toISOString();
    const res = await api.incubate({ message: 'hi', idempotencyKey: 'k-far', options: { token }, executeAt });
    expect(res.status).toBe(400);
    expect(res.body).toEqual(
      invalid(
        expect.stringMatching(
          new RegExp(`^executeAt must be at most 365 days ahead \\(${executeAt.replace(/\./g, '\\.')} is later than \\d{4}-\\d{2}-\\d{2}T[\\d:.]+Z\\)$`),
        ) as unknown as string,
      ),
    );
    // 365 days less a minute is accepted.
    const near = await api.incubate({
      message: 'hi',
      idempotencyKey: `k-year-${++seq}`,
      options: { token },
      executeAt: new Date(Date.now() + 365 * 86_400_000 - 60_000).toISOString(),
    });
    expect(near.status).toBe(202);
    expect((await api.cancel(near.body.vesselId, token)).status).toBe(200);
  });

  it('options are refused exactly as /prompt refuses them', async () => {
    for (const options of [
      { maxTurn: 3 },
      { maxTurns: 0 },
      { maxBudgetUsd: -1 },
      { tools: [{ name: 'pick_file', description: 'client side', input_schema: { type: 'object' } }] },
      { mcpServers: { local: { type: 'stdio', command: 'rm' } } },
      { outputFormat: { type: 'json_schema', schema: { type: 'nope' } } },
      { model: 'gpt-4o', tools: [{ type: 'web_search_20250305', name: 'web_search' }] },
    ]) {
      const viaPrompt = await fetch(`${gw.url}/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ message: 'hi', options: { token, ...options } }),
      });
      const promptBody = await viaPrompt.json();
      const res = await api.incubate({ message: 'hi', idempotencyKey: 'k-opts', options: { token, ...options } });
      expect({ status: res.status, body: res.body }, JSON.stringify(options)).toEqual({ status: viaPrompt.status, body: promptBody });
      expect(res.status, JSON.stringify(options)).toBe(400);
      expect((res.body as unknown as { error: string }).error).toBe('invalid_request');
    }
  });

  it('a batch: more than 100 items, none, or a bad shared field', async () => {
    const items = (n: number) => Array.from({ length: n }, (_, i) => ({ message: 'm', idempotencyKey: `many-${i}` }));
    const cases: [Record<string, unknown>, ReturnType<typeof invalid>][] = [
      [{ items: items(101), options: { token } }, invalid('items: at most 100 items per batch, got 101')],
      [{ items: [], options: { token } }, invalid('items must not be empty')],
      [{ options: { token } }, invalid('items is required and must be an array')],
      [{ items: items(1), options: { token }, ttl: -5 }, invalid('ttl must not be negative')],
      [
        { items: items(1), options: { token }, callback: { url: 'http://169.254.169.254/' } },
        invalid('callback.url is refused: address 169.254.169.254 is not allowed'),
      ],
      [{ items: items(1), options: { token, maxTurn: 1 } }, invalid('options: Unrecognized key: "maxTurn"')],
      [{ items: items(1), options: { token }, idempotencyKey: 'batch-level' }, invalid('Unrecognized key: "idempotencyKey"')],
    ];
    for (const [body, expected] of cases) {
      const res = await api.batch(body);
      expect({ status: res.status, body: res.body }, JSON.stringify(body).slice(0, 120)).toEqual({ status: 400, body: expected });
    }
    // Exactly 100 is a batch.
    const hundred = await api.batch({ items: items(100), options: { token }, ttl: 600 });
    expect(hundred.status).toBe(202);
    expect(hundred.body).toMatchObject({ total: 100, queued: 100, failed: 0 });
  });
});

describe('401: the token is checked first', () => {
  it('expired → {"error":"token_expired","message":"Token expired"}; missing, forged or of no project → invalid_token with the reason; on /incubate and /incubate/batch alike', async () => {
    const expired = await mintToken({
      projectId: gw.projectId,
      userId: 'late',
      secret: gw.secret,
      budget: { ai: 1_000, compute: 60, window: 'day' },
      expiresInSeconds: 60,
      now: Date.now() - 3_600_000,
    });
    const forged = token.slice(0, -4) + (token.endsWith('AAAA') ? 'BBBB' : 'AAAA');
    const stranger = await mintToken({
      projectId: 'prj_doesnotexist000000',
      userId: 'x',
      secret: 's'.repeat(32),
      budget: { ai: 1, compute: 1, window: 'day' },
      expiresInSeconds: 60,
    });
    const cases: [unknown, Record<string, unknown>][] = [
      [expired, { error: 'token_expired', message: 'Token expired' }],
      [undefined, { error: 'invalid_token', message: 'Missing token: send it in options.token' }],
      [42, { error: 'invalid_token', message: 'Missing token: send it in options.token' }],
      [forged, { error: 'invalid_token', message: 'Token signature is invalid' }],
      ['not-a-jwt', { error: 'invalid_token', message: 'Malformed token' }],
      [stranger, { error: 'invalid_token', message: 'Token issuer is not a known project' }],
    ];
    const before = (await vesselItems(gw.projectId)).length;
    for (const [t, expected] of cases) {
      // No idempotencyKey and a bad ttl too: the token decides first.
      const single = await api.incubate({ message: 'hi', options: { token: t }, ttl: -1 });
      expect({ status: single.status, body: single.body }, String(t)).toEqual({ status: 401, body: expected });
      const batch = await api.batch({ items: [{ message: 'hi' }], options: { token: t } });
      expect({ status: batch.status, body: batch.body }, String(t)).toEqual({ status: 401, body: expected });
    }
    // A token in the Authorization header is not the body's token.
    const inHeader = await fetch(`${gw.url}/incubate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
      body: JSON.stringify({ message: 'hi', idempotencyKey: 'k', options: {} }),
    });
    expect({ status: inHeader.status, body: await inHeader.json() }).toEqual({
      status: 401,
      body: { error: 'invalid_token', message: 'Missing token: send it in options.token' },
    });
    expect(await vesselItems(gw.projectId)).toHaveLength(before);
  });
});

describe("402: the developer's plan", () => {
  it('spent at enqueue: 402 developer_budget_exhausted with the plan’s figures, for a vessel and a batch; nothing kept', async () => {
    const developerId = `dev-spent-${randomBytes(4).toString('hex')}`;
    await createDeveloper({ developerId, planSeconds: 100, poolSeconds: 20 });
    const project = await createProject({ developerId });
    await addDeveloperCompute(developerId, 120);
    const t = await mintToken({
      projectId: project.projectId,
      userId: 'u',
      secret: project.secret,
      budget: { ai: 1_000_000, compute: 600, window: 'day' },
      expiresInSeconds: 600,
    });
    const expected = { error: 'developer_budget_exhausted', used: 120, available: 0, planSeconds: 100, poolSeconds: 20 };
    const single = await api.incubate({ message: 'hi', idempotencyKey: 'k-402', options: { token: t } });
    expect({ status: single.status, body: single.body }).toEqual({ status: 402, body: expected });
    const batch = await api.batch({ items: [{ message: 'hi', idempotencyKey: 'k-402b' }], options: { token: t } });
    expect({ status: batch.status, body: batch.body }).toEqual({ status: 402, body: expected });
    expect(await vesselItems(project.projectId)).toEqual([]);
    expect(await idempotencyItems(project.projectId)).toEqual([]);
  });

  it('spent by the time the vessel is due: FAILED with error_developer_budget_exhausted and the reason', async () => {
    const developerId = `dev-later-${randomBytes(4).toString('hex')}`;
    await createDeveloper({ developerId, planSeconds: 100 });
    const project = await createProject({ developerId });
    const t = await mintToken({
      projectId: project.projectId,
      userId: 'u',
      secret: project.secret,
      budget: { ai: 1_000_000, compute: 600, window: 'day' },
      expiresInSeconds: 600,
    });
    const res = await api.incubate({ message: 'Soon [[words:1]]', idempotencyKey: 'k-later', options: { token: t, model: MODEL }, ttl: 2 });
    expect(res.status).toBe(202);
    await addDeveloperCompute(developerId, 100);
    const done = await api.ended(res.body.vesselId, t);
    expect(done).toMatchObject({ status: 'FAILED', isFailed: true, attempts: 0 });
    expect(done.startedAt).toBeUndefined();
    expect(done.output).toEqual({
      success: false,
      text: "The vessel could not run: The developer's compute plan is used up for this month: 100 of 100 seconds",
      result: {
        type: 'result',
        subtype: 'error_developer_budget_exhausted',
        total_cost_usd: 0,
        total_cost_microdollars: 0,
        usage: { input_tokens: 0, output_tokens: 0 },
        num_turns: 0,
        duration_secs: 0,
      },
    });
  });
});

describe('404: a vessel is seen only by its own project and user', () => {
  it('another user, another project (same user id), no token, an expired or forged token, an unknown id: the same 404, for status and cancel', async () => {
    const alice = await gw.token({ user: 'alice' });
    const res = await api.incubate({ message: 'Mine', idempotencyKey: `k-404-${++seq}`, options: { token: alice, model: MODEL }, ttl: 600 });
    expect(res.status).toBe(202);
    const { vesselId } = res.body;
    const other = await createProject({ developerId: gw.developerId });
    const bearers: [string, string | undefined][] = [
      ['another user', await gw.token({ user: 'bob' })],
      [
        'another project, same user id',
        await mintToken({
          projectId: other.projectId,
          userId: 'alice',
          secret: other.secret,
          budget: { ai: 1_000, compute: 60, window: 'day' },
          expiresInSeconds: 600,
        }),
      ],
      ['no token', undefined],
      [
        'expired',
        await mintToken({
          projectId: gw.projectId,
          userId: 'alice',
          secret: gw.secret,
          budget: { ai: 1_000, compute: 60, window: 'day' },
          expiresInSeconds: 60,
          now: Date.now() - 3_600_000,
        }),
      ],
      ['forged', alice.slice(0, -4) + (alice.endsWith('AAAA') ? 'BBBB' : 'AAAA')],
      ['garbage', 'garbage'],
    ];
    const notFound = (id: string) => ({
      error: 'vessel_not_found',
      message: `No vessel ${id} for this token: a vessel is visible only with a valid token of the project and user that queued it (Authorization: Bearer <token>)`,
    });
    for (const [who, bearer] of bearers) {
      const seen = await api.status(vesselId, bearer);
      expect({ status: seen.status, body: seen.body }, who).toEqual({ status: 404, body: notFound(vesselId) });
      const canceled = await api.cancel(vesselId, bearer);
      expect({ status: canceled.status, body: canceled.body }, who).toEqual({ status: 404, body: notFound(vesselId) });
    }
    const unknown = '00000000-0000-4000-8000-000000000000';
    for (const answer of [await api.status(unknown, alice), await api.cancel(unknown, alice)]) {
      expect({ status: answer.status, body: answer.body }).toEqual({ status: 404, body: notFound(unknown) });
    }
    // Untouched by all of that: still PENDING for its owner.
    expect((await api.status(vesselId, alice)).body).toMatchObject({ vesselId, status: 'PENDING' });
    expect((await api.cancel(vesselId, alice)).body.status).toBe('CANCELED');
  });
});
