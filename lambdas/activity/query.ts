import { queryPages } from '../store/pages.ts';
import { env } from '../config/env.ts';
import { ACTIVITY_BUCKETS, hourOf, monthOf } from './record.ts';

/**
 * Reading activity records back (lambdas/activity/record.ts has the layout): a project's hours in a span, one query
 * per (month, bucket) with the span as a sort-key range, and totals grouped as the owner asks (`gateway activity`, the
 * console).
 */

export interface ActivityCounters {
  aiMicros: number;
  computeSeconds: number;
  requests: number;
  errors: number;
  refusals: number;
  inputTokens: number;
  outputTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

export interface ActivityRow extends ActivityCounters {
  projectId: string;
  userId: string;
  model: string;
  /** The hour's start, ISO. */
  hour: string;
}

export const COUNTERS: readonly (keyof ActivityCounters)[] = [
  'aiMicros',
  'computeSeconds',
  'requests',
  'errors',
  'refusals',
  'inputTokens',
  'outputTokens',
  'cacheReadTokens',
  'cacheWriteTokens',
];

export const zeroCounters = (): ActivityCounters => Object.fromEntries(COUNTERS.map((c) => [c, 0])) as unknown as ActivityCounters;

/** Every (project, hour, user, model) row whose hour starts in [since's hour, until]. */
export async function readActivity(projectId: string, since: Date, until: Date): Promise<ActivityRow[]> {
  const from = hourOf(since);
  const to = `${hourOf(until)}\uffff`;
  const months: string[] = [];
  // Date.UTC carries a month index past 11 into the next year.
  for (let i = 0, first = since.getUTCMonth(); Date.UTC(since.getUTCFullYear(), first + i) <= until.getTime(); i++) {
    months.push(monthOf(new Date(Date.UTC(since.getUTCFullYear(), first + i))));
  }
  const pages = await Promise.all(
    months.flatMap((month) => Array.from({ length: ACTIVITY_BUCKETS }, (_, b) => queryAll(`${projectId}#${month}#${b}`, from, to))),
  );
  return pages.flat().sort((a, b) => a.hour.localeCompare(b.hour) || a.userId.localeCompare(b.userId) || a.model.localeCompare(b.model));
}

async function queryAll(pk: string, from: string, to: string): Promise<ActivityRow[]> {
  const rows: ActivityRow[] = [];
  const pages = queryPages({
    TableName: env().ACTIVITY_TABLE,
    KeyConditionExpression: 'pk = :pk AND sk BETWEEN :from AND :to',
    ExpressionAttributeValues: { ':pk': pk, ':from': from, ':to': to },
  });
  for await (const out of pages) for (const item of out.Items ?? []) rows.push(rowOf(item));
  return rows;
}

function rowOf(item: Record<string, unknown>): ActivityRow {
  const counters = Object.fromEntries(COUNTERS.map((c) => [c, Number(item[c] ?? 0)])) as unknown as ActivityCounters;
  return { projectId: String(item.projectId), userId: String(item.userId), model: String(item.model), hour: String(item.hour), ...counters };
}

export type ActivityGrouping = 'user' | 'model' | 'project' | 'hour' | 'day';

export interface ActivityGroup extends ActivityCounters {
  key: string;
}

/** Rows summed by user, model, project, hour or day, largest AI spend first (hours and days in time order). */
export function groupActivity(rows: readonly ActivityRow[], by: ActivityGrouping): ActivityGroup[] {
  const groups = new Map<string, ActivityGroup>();
  for (const row of rows) {
    const key = by === 'user' ? row.userId : by === 'model' ? row.model : by === 'project' ? row.projectId : by === 'hour' ? row.hour : row.hour.slice(0, 10);
    const group = groups.get(key) ?? { key, ...zeroCounters() };
    for (const c of COUNTERS) group[c] += row[c];
    groups.set(key, group);
  }
  const out = [...groups.values()];
  return by === 'hour' || by === 'day'
    ? out.sort((a, b) => a.key.localeCompare(b.key))
    : out.sort((a, b) => b.aiMicros - a.aiMicros || a.key.localeCompare(b.key));
}

/** The sum of every row. */
export function totalActivity(rows: readonly ActivityRow[]): ActivityCounters {
  const total = zeroCounters();
  for (const row of rows) for (const c of COUNTERS) total[c] += row[c];
  return total;
}
