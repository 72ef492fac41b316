import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { DEVELOPER_MONTH_RETAIN_SECONDS } from '../config/timing.ts';
import { expiresAfter } from '../store/epoch.ts';
import { updateOnce } from '../store/conditional.ts';
import { documentClient } from '../store/dynamo.ts';
import { monthOf } from './windows.ts';

/**
 * A developer's month of compute (docs/contract.md, "Developers and plans"): the compute seconds used by all of a
 * developer's projects in a UTC calendar month, one item of the usage table per (developer, month). It is written
 * only where a run's compute reservation is settled (budgets/ledger.ts `settle`), so the developer is charged exactly
 * what the user is, crashed runs included; plans/compute.ts compares it with the plan.
 */

const table = () => env().USAGE_TABLE;

/** The item's key; the format is stored data, so it must never change. */
const developerMonthKey = (developerId: string, now: Date) => ({ pk: `devcompute#${developerId}#${monthOf(now)}` });

export async function addDeveloperCompute(developerId: string, seconds: number, now = new Date(clock.now())): Promise<number> {
  if (!Number.isSafeInteger(seconds) || seconds < 0) throw new RangeError(`seconds must be a non-negative integer, got ${seconds}`);
  // Once, even when the SDK sends it twice (store/conditional.ts).
  const out = await updateOnce({
    TableName: table(),
    Key: developerMonthKey(developerId, now),
    UpdateExpression: 'ADD computeUsed :s SET developerId = :d, #month = :m, expiresAt = if_not_exists(expiresAt, :exp)',
    ExpressionAttributeNames: { '#month': 'month' },
    ExpressionAttributeValues: {
      ':s': seconds,
      ':d': developerId,
      ':m': monthOf(now),
      ':exp': expiresAfter(now, DEVELOPER_MONTH_RETAIN_SECONDS),
    },
    ReturnValues: 'UPDATED_NEW',
  });
  return out?.computeUsed as number;
}

export async function developerComputeUsed(developerId: string, now = new Date(clock.now())): Promise<number> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: developerMonthKey(developerId, now), ConsistentRead: true }));
  return (out.Item?.computeUsed as number | undefined) ?? 0;
}
