import { queryPages } from '../store/pages.ts';
import { env } from '../config/env.ts';
import { VESSELS_PROJECT_INDEX } from '../store/tables.ts';
import { TASK_IDENTIFIER } from './record.ts';
import { flagsOf, type VesselStatus } from './states.ts';

/**
 * A project's vessels, newest first, for its owner (`gateway vessel list`, the console): one query of the Vessels
 * table's `project` index (projectId, createdAt; lambdas/store/tables.ts), never a scan. The index holds only what a
 * list shows — ids, user, status and its instants — so the output, the options and the callback's secret stay in the
 * table, and `GET /incubate/vessel/{id}`'s record (or `getVessel`) has the rest.
 *
 * Load: an entry is written when its vessel is created and when one of its attributes changes — the status moves,
 * about four times a vessel's life; heartbeats change none of them. A project's listing is one index partition
 * (1,000 writes a second): vessels run at most a tier's concurrency at once (10 on `pro`), so only the creation of
 * vessels comes near it, at about 1,000 accepted a second for one project (ten full `/incubate/batch` requests a
 * second, MAX_BATCH_ITEMS each).
 *
 * A status filter reads the project's vessels newest first and keeps the matching ones (a filter on the index): up to
 * `limit` of them, reading at most MAX_SCANNED entries, so a status that no recent vessel has costs a bounded read.
 */

export interface ListedVessel {
  vesselId: string;
  userId: string;
  status: VesselStatus;
  taskIdentifier: typeof TASK_IDENTIFIER;
  isCompleted: boolean;
  isSuccess: boolean;
  isFailed: boolean;
  isCanceled: boolean;
  createdAt: string;
  scheduledFor: string;
  startedAt?: string;
  completedAt?: string;
}

export const DEFAULT_LIST_LIMIT = 50;
export const MAX_LIST_LIMIT = 1000;
/** The most index entries one filtered listing reads (about 100 bytes each: a few pages of 1 MB at most). */
export const MAX_SCANNED = 20_000;

const iso = (ms: unknown) => new Date(Number(ms)).toISOString();

export async function listVessels(query: { projectId: string; status?: VesselStatus; limit?: number }): Promise<ListedVessel[]> {
  const limit = Math.min(Math.max(1, Math.floor(query.limit ?? DEFAULT_LIST_LIMIT)), MAX_LIST_LIMIT);
  const vessels: ListedVessel[] = [];
  let scanned = 0;
  const pages = queryPages(
    {
      TableName: env().VESSELS_TABLE,
      IndexName: VESSELS_PROJECT_INDEX,
      KeyConditionExpression: 'projectId = :p',
      ...(query.status
        ? {
            FilterExpression: '#status = :s',
            ExpressionAttributeNames: { '#status': 'status' },
            ExpressionAttributeValues: { ':p': query.projectId, ':s': query.status },
          }
        : { ExpressionAttributeValues: { ':p': query.projectId } }),
      ScanIndexForward: false,
    },
    // Without a filter every entry read is kept: read no more than asked for.
    () => (query.status ? undefined : limit - vessels.length),
  );
  for await (const out of pages) {
    scanned += out.ScannedCount ?? 0;
    for (const item of out.Items ?? []) if (vessels.length < limit) vessels.push(listed(item));
    if (vessels.length >= limit || scanned >= MAX_SCANNED) break;
  }
  return vessels;
}

function listed(item: Record<string, unknown>): ListedVessel {
  const status = item.status as VesselStatus;
  return {
    vesselId: String(item.vesselId),
    userId: String(item.userId),
    status,
    taskIdentifier: TASK_IDENTIFIER,
    ...flagsOf(status),
    createdAt: iso(item.createdAt),
    scheduledFor: iso(item.scheduledFor),
    ...(item.startedAt === undefined ? {} : { startedAt: iso(item.startedAt) }),
    ...(item.completedAt === undefined ? {} : { completedAt: iso(item.completedAt) }),
  };
}
