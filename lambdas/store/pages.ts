import { QueryCommand, type QueryCommandInput, type QueryCommandOutput } from '@aws-sdk/lib-dynamodb';
import { documentClient } from './dynamo.ts';

/**
 * A query read page after page: each page's answer in turn, until the table has no more — the caller stops sooner by
 * leaving the loop. `limit`, asked before each page, caps what that page reads (the items the caller still wants);
 * undefined reads whole pages.
 */
export async function* queryPages(
  input: Omit<QueryCommandInput, 'ExclusiveStartKey' | 'Limit'>,
  limit?: () => number | undefined,
): AsyncGenerator<QueryCommandOutput> {
  let start: Record<string, unknown> | undefined;
  do {
    const left = limit?.();
    const out = await documentClient().send(new QueryCommand({ ...input, ...(left === undefined ? {} : { Limit: left }), ExclusiveStartKey: start }));
    yield out;
    start = out.LastEvaluatedKey;
  } while (start);
}
