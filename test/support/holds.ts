import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { documentClient } from '../../lambdas/store/dynamo.ts';

/**
 * Every usage-window item of a usage table that still holds a reservation or a reserved amount. A finished request
 * must leave none (docs/contract.md, "Reservation"): scanning the whole table also catches holds taken for a user
 * the test never meant to create (a token the gateway should have refused, a sub it normalised).
 */
export async function windowsWithHolds(table: string): Promise<Record<string, unknown>[]> {
  const found: Record<string, unknown>[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await documentClient().send(new ScanCommand({ TableName: table, ExclusiveStartKey: start, ConsistentRead: true }));
    for (const item of page.Items ?? []) {
      if (!String(item.pk).startsWith('usage#')) continue;
      const holds = Object.keys((item.holds as object | undefined) ?? {}).length;
      if (holds > 0 || Number(item.aiReserved ?? 0) !== 0 || Number(item.computeReserved ?? 0) !== 0) found.push(item);
    }
    start = page.LastEvaluatedKey;
  } while (start);
  return found;
}
