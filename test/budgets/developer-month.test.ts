import { randomBytes } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { addDeveloperCompute, developerComputeUsed } from '../../lambdas/budgets/developer-month.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

describe('developer monthly compute', () => {
  it('adds, reads, and starts again at the month boundary', async () => {
    const dev = `dev-${randomBytes(4).toString('hex')}`;
    const jan = new Date('2031-01-31T23:59:59.999Z');
    const feb = new Date('2031-02-01T00:00:00.000Z');
    expect(await developerComputeUsed(dev, jan)).toBe(0);
    expect(await addDeveloperCompute(dev, 100, jan)).toBe(100);
    expect(await addDeveloperCompute(dev, 50, new Date('2031-01-01T00:00:00.000Z'))).toBe(150);
    expect(await developerComputeUsed(dev, jan)).toBe(150);
    expect(await developerComputeUsed(dev, feb)).toBe(0);
    expect(await addDeveloperCompute(dev, 7, feb)).toBe(7);
    expect(await developerComputeUsed(dev, jan)).toBe(150);
    expect(await developerComputeUsed(dev, feb)).toBe(7);
    // other developers are separate
    expect(await developerComputeUsed(`${dev}-other`, jan)).toBe(0);
  });

  it('concurrent additions are all counted', async () => {
    const dev = `dev-${randomBytes(4).toString('hex')}`;
    await Promise.all(Array.from({ length: 50 }, (_, i) => addDeveloperCompute(dev, i + 1)));
    expect(await developerComputeUsed(dev)).toBe((50 * 51) / 2);
  });

  it('refuses bad amounts', async () => {
    await expect(addDeveloperCompute('dev-x', -1)).rejects.toThrow('seconds must be a non-negative integer, got -1');
    await expect(addDeveloperCompute('dev-x', 1.5)).rejects.toThrow(RangeError);
  });
});

describe('the stored item', () => {
  it('keeps the usage table key format existing data is stored under', async () => {
    const dev = `dev-${randomBytes(4).toString('hex')}`;
    const at = new Date('2031-03-15T12:00:00.000Z');
    await addDeveloperCompute(dev, 12, at);
    const out = await documentClient().send(new GetCommand({ TableName: env().USAGE_TABLE, Key: { pk: `devcompute#${dev}#2031-03` }, ConsistentRead: true }));
    expect(out.Item).toEqual({
      pk: `devcompute#${dev}#2031-03`,
      computeUsed: 12,
      developerId: dev,
      month: '2031-03',
      expiresAt: Math.floor(at.getTime() / 1000) + 400 * 86_400,
      // The last write's own token (store/conditional.ts): a resend of it is not counted twice.
      writeToken: expect.stringMatching(/^[0-9a-f-]{36}$/),
    });
  });
});
