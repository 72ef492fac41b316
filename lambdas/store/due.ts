import { queryPages } from './pages.ts';

/**
 * The sweeps' shared reading of a sparse "due" index (the vessels' `reconcile`, the sessions' `sweep`): items of one
 * shard whose due moment has passed, oldest first, page after page up to `limit` — the rest are the next round's.
 * The caller then handles them a few at a time (p-limit), one item's failure logged, not fatal.
 */

export interface DueQuery {
  table: string;
  index: string;
  /** The index's partition attribute and the shard to read. */
  shardAttribute: string;
  shard: string;
  /** The index's sort attribute: epoch milliseconds the item is due at. */
  dueAttribute: string;
  now: number;
  /** At most this many items per call. */
  limit: number;
}

/** The items as stored; `T` names their shape (the caller's record type: the index projects whole items). */
export async function dueItems<T = Record<string, unknown>>(q: DueQuery): Promise<T[]> {
  const found: T[] = [];
  const pages = queryPages(
    {
      TableName: q.table,
      IndexName: q.index,
      KeyConditionExpression: '#shard = :shard AND #due <= :now',
      ExpressionAttributeNames: { '#shard': q.shardAttribute, '#due': q.dueAttribute },
      ExpressionAttributeValues: { ':shard': q.shard, ':now': q.now },
    },
    () => q.limit - found.length,
  );
  for await (const out of pages) {
    found.push(...((out.Items ?? []) as T[]));
    if (found.length >= q.limit) break;
  }
  return found;
}
