import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomBytes } from 'node:crypto';
import type { GatewayActivity } from '../../bin/local/runtime.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { createDeveloper, createProject } from '../../lambdas/registry/registry.ts';
import { startedSince } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { RawConn } from '../support/raw-conn.ts';
import { idempotencyItems, MODEL, vesselApi, vesselItems } from './incubate-client.ts';

/**
 * A client that leaves in the middle of POST /incubate or /incubate/batch — during its upload, or at any moment after
 * it, before the answer — leaves either a complete vessel (stored, its key claimed, triggered: it runs) or nothing at
 * all; never a vessel without its key, a key without its vessel, or a vessel that will never run. The retry with the
 * same key then answers the vessel (200 replay) or queues it (202).
 *
 * (Like test/local/disconnect.test.ts, with a socket the test cuts by hand; in process, since the REST handlers do not
 * stream. The reconciler runs only at start-up here, so a vessel that was stored but never triggered would stay stuck
 * and fail the test instead of being rescued.)
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let token: string;
let projectId: string;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ scheduleIntervalMs: 3_600_000 });
  api = vesselApi(gw);
  // A developer of the top tier (10 at once), so the vessels of a batch run side by side.
  const developerId = `dev-leave-${randomBytes(4).toString('hex')}`;
  await createDeveloper({ developerId, planSeconds: 20_000_000 });
  const project = await createProject({ developerId });
  projectId = project.projectId;
  // Compute for 10 runs at once (each run holds up to 870 s of it while it lives).
  token = await mintToken({
    projectId,
    userId: 'leaver',
    secret: project.secret,
    budget: { ai: 10_000_000, compute: 10 * 870, window: 'day' },
    expiresInSeconds: 3_600,
  });
});
afterAll(async () => {
  await gw?.stop();
});

function head(path: string, length: number): string {
  return `POST ${path} HTTP/1.1\r\nHost: ${new URL(gw.url).host}\r\ncontent-type: application/json\r\ncontent-length: ${length}\r\n\r\n`;
}

/** The vessel of `key` as stored, checked whole: none and no key, or one with its key pointing at it. */
async function storedOutcome(key: string): Promise<string | undefined> {
  const vessels = (await vesselItems(projectId)).filter((v) => v.idempotencyKey === key);
  const keys = (await idempotencyItems(projectId)).filter((k) => k.idempotencyKey === key);
  if (vessels.length === 0) {
    expect(keys, `a key without its vessel for ${key}`).toEqual([]);
    return undefined;
  }
  expect(vessels).toHaveLength(1);
  expect(
    keys.map((k) => k.vesselId),
    `the key of ${key} must name its vessel`,
  ).toEqual([vessels[0]!.vesselId]);
  return vessels[0]!.vesselId as string;
}

/**
 * Waits until the in-flight handler has finished whatever it was doing: the gateway has taken the request up (an HTTP
 * invocation started since `since`, read before the connection was opened) and every invocation under way has returned.
 */
async function settle(since: GatewayActivity): Promise<void> {
  await startedSince(gw, since, 'http');
  await gw.invocationsDone();
}

describe('a client that leaves POST /incubate', () => {
  it('during its upload: nothing is kept, and the same key queues the vessel afterwards', async () => {
    const key = `leave-upload-${++seq}`;
    const body = JSON.stringify({ message: 'Half sent [[words:1]]', idempotencyKey: key, options: { token, model: MODEL } });
    const since = gw.activity();
    const conn = await RawConn.open(gw.url);
    await conn.write(head('/incubate', Buffer.byteLength(body)) + body.slice(0, Math.floor(body.length / 2)));
    await new Promise((r) => setTimeout(r, 100));
    conn.destroy();
    await settle(since);
    expect(await storedOutcome(key)).toBeUndefined();

    const retry = await api.incubate(body);
    expect(retry.status).toBe(202);
    expect((await api.ended(retry.body.vesselId, token)).status).toBe('COMPLETED');
    expect((await fetch(`${gw.url}/health`)).status).toBe(200);
  });

  it('at any moment after the upload: a complete vessel that runs, or nothing; the retry answers accordingly', async () => {
    for (const waitMs of [0, 2, 5, 10, 20, 40, 80, 150]) {
      const key = `leave-after-${waitMs}-${++seq}`;
      const body = JSON.stringify({ message: `Left at ${waitMs} ms [[words:1]]`, idempotencyKey: key, options: { token, model: MODEL } });
      const since = gw.activity();
      const conn = await RawConn.open(gw.url);
      await conn.write(head('/incubate', Buffer.byteLength(body)) + body);
      if (waitMs) await new Promise((r) => setTimeout(r, waitMs));
      conn.destroy();
      await settle(since);

      const stored = await storedOutcome(key);
      const retry = await api.incubate(body);
      if (stored) {
        expect({ status: retry.status, replayed: retry.headers.get('idempotent-replayed'), vesselId: retry.body.vesselId }, `left at ${waitMs} ms`).toEqual({
          status: 200,
          replayed: 'true',
          vesselId: stored,
        });
      } else {
        expect(retry.status, `left at ${waitMs} ms`).toBe(202);
      }
      // Either way the one vessel of the key runs, triggered by whichever request stored it.
      expect((await api.ended(retry.body.vesselId, token)).status, `left at ${waitMs} ms`).toBe('COMPLETED');
      expect(await storedOutcome(key)).toBe(retry.body.vesselId);
    }
    expect((await fetch(`${gw.url}/health`)).status).toBe(200);
  });
});

describe('a client that leaves POST /incubate/batch', () => {
  it('mid-batch: each item is whole or absent; the retried batch completes the set, one vessel per key', async () => {
    const keys = Array.from({ length: 20 }, (_, i) => `leave-batch-${++seq}-${i}`);
    const body = JSON.stringify({ items: keys.map((k) => ({ message: `Item ${k} [[words:1]]`, idempotencyKey: k })), options: { token, model: MODEL } });
    const since = gw.activity();
    const conn = await RawConn.open(gw.url);
    await conn.write(head('/incubate/batch', Buffer.byteLength(body)) + body);
    await new Promise((r) => setTimeout(r, 30));
    conn.destroy();
    await settle(since);

    const stored = new Map<string, string | undefined>();
    for (const k of keys) stored.set(k, await storedOutcome(k));

    const retry = await api.batch<{
      total: number;
      queued: number;
      failed: number;
      items: { idempotencyKey: string; status: string; vesselId: string; replayed?: true }[];
    }>(body);
    expect(retry.status).toBe(202);
    expect(retry.body).toMatchObject({ total: 20, queued: 20, failed: 0 });
    for (const item of retry.body.items) {
      const before = stored.get(item.idempotencyKey);
      if (before) expect(item, item.idempotencyKey).toMatchObject({ status: 'queued', vesselId: before, replayed: true });
      else expect(item.replayed, item.idempotencyKey).toBeUndefined();
    }
    const ended = await Promise.all(retry.body.items.map((item) => api.ended(item.vesselId, token)));
    expect(
      ended.map((v) => v.status),
      JSON.stringify(ended.find((v) => v.status !== 'COMPLETED')),
    ).toEqual(Array<string>(20).fill('COMPLETED'));
    const vessels = (await vesselItems(projectId)).filter((v) => keys.includes(v.idempotencyKey as string));
    expect(vessels).toHaveLength(20);
  });
});
