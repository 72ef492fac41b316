import { PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { listVessels } from '../../lambdas/vessels/list.ts';
import { vesselKey } from '../../lambdas/vessels/record.ts';
import type { VesselStatus } from '../../lambdas/vessels/states.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * A project's vessels through the Vessels table's `project` index (lambdas/vessels/list.ts): newest first, only that
 * project's, never an idempotency key's item, up to the limit, and filtered by status.
 */
let gw: TestGateway;
const T0 = Date.parse('2026-11-27T10:00:00Z');
const STATUSES: VesselStatus[] = ['COMPLETED', 'FAILED', 'QUEUED'];

/** A vessel item with what the index keeps (and a big output it must not), created `i` seconds after T0. */
async function put(projectId: string, i: number) {
  const vesselId = `${projectId}-v${String(i).padStart(2, '0')}`;
  const status = STATUSES[i % 3]!;
  await documentClient().send(
    new PutCommand({
      TableName: env().VESSELS_TABLE,
      Item: {
        ...vesselKey(vesselId),
        vesselId,
        projectId,
        userId: `u${i % 2}`,
        status,
        createdAt: T0 + i * 1000,
        scheduledFor: T0 + i * 1000,
        ...(status === 'QUEUED' ? {} : { startedAt: T0 + i * 1000 + 10, completedAt: T0 + i * 1000 + 500 }),
        output: { success: true, text: 'x'.repeat(10_000) },
      },
    }),
  );
  return { vesselId, status };
}

beforeAll(async () => {
  gw = await startTestGateway();
  await Promise.all(Array.from({ length: 30 }, (_, i) => put('p-one', i)));
  await Promise.all(Array.from({ length: 5 }, (_, i) => put('p-two', i)));
  // An idempotency key's item: no projectId attribute, so never in the index.
  await documentClient().send(new PutCommand({ TableName: env().VESSELS_TABLE, Item: { pk: 'idem#p-one#abc', vesselId: 'p-one-v00' } }));
});
afterAll(() => gw?.stop());

describe('listVessels', () => {
  it("lists a project's vessels newest first, up to the limit, with what a list shows", async () => {
    const all = await listVessels({ projectId: 'p-one', limit: 100 });
    expect(all.map((v) => v.vesselId)).toEqual(Array.from({ length: 30 }, (_, i) => `p-one-v${String(29 - i).padStart(2, '0')}`));
    expect(all[0]).toEqual({
      vesselId: 'p-one-v29',
      userId: 'u1',
      status: 'QUEUED',
      taskIdentifier: 'agent-run',
      isCompleted: false,
      isSuccess: false,
      isFailed: false,
      isCanceled: false,
      createdAt: new Date(T0 + 29_000).toISOString(),
      scheduledFor: new Date(T0 + 29_000).toISOString(),
    });
    expect(all[1]).toMatchObject({
      vesselId: 'p-one-v28',
      status: 'FAILED',
      startedAt: new Date(T0 + 28_010).toISOString(),
      completedAt: new Date(T0 + 28_500).toISOString(),
    });
    expect((await listVessels({ projectId: 'p-one', limit: 7 })).map((v) => v.vesselId)).toEqual(all.slice(0, 7).map((v) => v.vesselId));
    expect(await listVessels({ projectId: 'p-one' })).toHaveLength(30);
    expect(await listVessels({ projectId: 'p-none' })).toEqual([]);
  });

  it('filters by status, newest first, up to the limit', async () => {
    const failed = await listVessels({ projectId: 'p-one', status: 'FAILED', limit: 4 });
    expect(failed.map((v) => v.vesselId)).toEqual(['p-one-v28', 'p-one-v25', 'p-one-v22', 'p-one-v19']);
    expect(failed.every((v) => v.status === 'FAILED' && v.isFailed)).toBe(true);
    const queued = await listVessels({ projectId: 'p-two', status: 'QUEUED' });
    expect(queued.map((v) => [v.vesselId, v.startedAt])).toEqual([['p-two-v02', undefined]]);
    expect(await listVessels({ projectId: 'p-two', status: 'CANCELED' })).toEqual([]);
  });
});
