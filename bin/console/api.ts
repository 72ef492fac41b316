import pLimit from 'p-limit';
import { type ActivityCounters, type ActivityRow, groupActivity, readActivity, totalActivity } from '../../lambdas/activity/query.ts';
import { NO_MODEL } from '../../lambdas/activity/record.ts';
import { parseDuration } from '../../lambdas/auth/tokens.ts';
import { currentWindows } from '../../lambdas/budgets/ledger.ts';
import { clock } from '../../lambdas/config/clock.ts';
import type { Project } from '../../lambdas/registry/model.ts';
import { listProjects } from '../../lambdas/registry/listing.ts';
import { getProject } from '../../lambdas/registry/registry.ts';
import { developerStatus } from '../../lambdas/plans/status.ts';
import { listSessions } from '../../lambdas/sessions/list.ts';
import { listVessels } from '../../lambdas/vessels/list.ts';
import { vesselView } from '../../lambdas/vessels/record.ts';
import { VesselStates, type VesselStatus } from '../../lambdas/vessels/states.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { RedeliveryRefused, redeliverWebhook } from '../../lambdas/webhooks/redeliver.ts';

/**
 * The console's JSON API (docs/console.md): each route is a read (or the one write, a webhook's redelivery) of the
 * same domain functions the operator CLI calls, against whatever store the CLI's target put in the environment — the
 * local runtime's or a deployed stack's, with the operator's AWS credentials. Nothing here is served to the internet:
 * bin/console/server.ts binds it to 127.0.0.1.
 */

/** A refused request: the page shows `message`. */
export class ConsoleError extends Error {
  constructor(
    readonly status: 400 | 404 | 409,
    message: string,
  ) {
    super(message);
  }
}

type Query = URLSearchParams;
const HOUR_MS = 3_600_000;
const DAY_MS = 24 * HOUR_MS;
/** The longest span the page asks for: a month of hours is 744 points, which a chart still draws at once. */
const MAX_SPAN_SECONDS = 31 * 86_400;
/** Users shown with their budget windows (each one 5 reads of the ledger: its current window of each kind). */
const TOP_USERS = 20;
/** Projects read at once when the spend of every project is asked for (each is 8 queries a month: docs/activity.md). */
const PROJECTS_AT_ONCE = 4;

function required(query: Query, name: string): string {
  const value = query.get(name);
  if (!value) throw new ConsoleError(400, `${name} is required`);
  return value;
}

async function projectOf(query: Query): Promise<Project> {
  const id = required(query, 'project');
  const project = await getProject(id);
  if (!project) throw new ConsoleError(404, `Project ${id} does not exist`);
  return project;
}

/** The span asked for (`since`, a duration such as 24h or 7d, default 24h) ending now. */
function spanOf(query: Query): { since: Date; until: Date } {
  let seconds: number;
  try {
    seconds = parseDuration(query.get('since') ?? '24h');
  } catch (err) {
    throw new ConsoleError(400, `since: ${(err as Error).message}`);
  }
  if (seconds > MAX_SPAN_SECONDS) throw new ConsoleError(400, `since: at most ${MAX_SPAN_SECONDS / 86_400} days`);
  const until = new Date(clock.now());
  return { since: new Date(until.getTime() - seconds * 1000), until };
}

type Step = 'hour' | 'day';
function stepOf(query: Query): Step {
  const step = query.get('step') ?? 'hour';
  if (step !== 'hour' && step !== 'day') throw new ConsoleError(400, 'step must be hour or day');
  return step;
}

/** Every bucket start of the span, ISO, as activity rows name their hour (or its day's midnight). */
function bucketsOf(since: Date, until: Date, step: Step): string[] {
  const size = step === 'hour' ? HOUR_MS : DAY_MS;
  const out: string[] = [];
  for (let t = Math.floor(since.getTime() / size) * size; t <= until.getTime(); t += size) out.push(new Date(t).toISOString());
  return out;
}

const bucketOfRow = (row: ActivityRow, step: Step) => (step === 'hour' ? row.hour : `${row.hour.slice(0, 10)}T00:00:00.000Z`);

/**
 * A counter per bucket for each key (model, project, user…): the chart's series, each as long as `buckets`, zero
 * where nothing was recorded. Keys whose counter is zero throughout (a run's compute row, for AI µ$) are left out.
 */
function series(rows: readonly ActivityRow[], buckets: string[], step: Step, keyOf: (r: ActivityRow) => string, counter: keyof ActivityCounters) {
  const at = new Map(buckets.map((b, i) => [b, i]));
  const out: Record<string, number[]> = {};
  for (const row of rows) {
    if (row[counter] === 0) continue;
    const key = keyOf(row);
    out[key] ??= buckets.map(() => 0);
    out[key][at.get(bucketOfRow(row, step))!]! += row[counter];
  }
  return out;
}

/** The activity of a span, for the charts: per bucket by model and by project, and the calls, errors and refusals. */
function spendOf(rows: readonly ActivityRow[], since: Date, until: Date, step: Step) {
  const buckets = bucketsOf(since, until, step);
  const perBucket = (counter: keyof ActivityCounters) => series(rows, buckets, step, () => 'all', counter).all ?? buckets.map(() => 0);
  return {
    since: since.toISOString(),
    until: until.toISOString(),
    step,
    buckets,
    total: totalActivity(rows),
    aiByModel: series(rows, buckets, step, (r) => r.model, 'aiMicros'),
    aiByProject: series(rows, buckets, step, (r) => r.projectId, 'aiMicros'),
    requests: perBucket('requests'),
    errors: perBucket('errors'),
    refusals: perBucket('refusals'),
    models: groupActivity(rows, 'model').filter((g) => g.key !== NO_MODEL || g.computeSeconds > 0),
  };
}

/** Which store the console reads (the page's header), and its projects. */
async function projectsRoute(_query: Query, about: ConsoleTarget) {
  const projects = await listProjects();
  return { target: about.target, projects: projects.map((p) => ({ projectId: p.projectId, developerId: p.developerId })) };
}

/** `project` given: that project's activity; else every project's (the chart by project). */
async function spendRoute(query: Query) {
  const { since, until } = spanOf(query);
  const step = stepOf(query);
  const ids = query.get('project') ? [(await projectOf(query)).projectId] : (await listProjects()).map((p) => p.projectId);
  const rows = (await pLimit(PROJECTS_AT_ONCE).map(ids, (id) => readActivity(id, since, until))).flat();
  const byProject = ids.map((projectId) => ({ projectId, ...totalActivity(rows.filter((r) => r.projectId === projectId)) }));
  return { ...spendOf(rows, since, until, step), projects: byProject.sort((a, b) => b.aiMicros - a.aiMicros || a.projectId.localeCompare(b.projectId)) };
}

/** A user's current window of each kind with spend or holds in it (the budget itself is in the user's tokens). */
async function windowsOf(projectId: string, userId: string) {
  return (await currentWindows(projectId, userId)).map((w) => ({ window: w.key.window, windowStart: w.key.windowStart, used: w.used, reserved: w.reserved }));
}

async function usersRoute(query: Query) {
  const project = await projectOf(query);
  const { since, until } = spanOf(query);
  const top = groupActivity(await readActivity(project.projectId, since, until), 'user').slice(0, TOP_USERS);
  const users = await Promise.all(
    top.map(async ({ key, ...counters }) => ({
      userId: key,
      ...counters,
      blocked: project.blockedUsers?.[key] === true,
      windows: await windowsOf(project.projectId, key),
    })),
  );
  return { projectId: project.projectId, since: since.toISOString(), until: until.toISOString(), users };
}

async function userRoute(query: Query) {
  const project = await projectOf(query);
  const userId = required(query, 'user');
  const { since, until } = spanOf(query);
  const step = stepOf(query);
  const rows = (await readActivity(project.projectId, since, until)).filter((r) => r.userId === userId);
  return {
    projectId: project.projectId,
    userId,
    blocked: project.blockedUsers?.[userId] === true,
    windows: await windowsOf(project.projectId, userId),
    ...spendOf(rows, since, until, step),
  };
}

/** Live runs of the developers owning the projects (one project's, or every project's): leases against the tier. */
async function runsRoute(query: Query) {
  const projects = query.get('project') ? [await projectOf(query)] : await listProjects();
  const developerIds = [...new Set(projects.map((p) => p.developerId))].sort();
  const developers = await Promise.all(
    developerIds.map(async (id) => {
      const status = await developerStatus(id);
      if (!status) return undefined;
      const { developer: dev, tier, allowance, leases } = status;
      return {
        developerId: id,
        tier: tier.name,
        maxConcurrency: tier.maxConcurrency,
        planSeconds: dev.planSeconds,
        poolSeconds: dev.poolSeconds,
        computeUsedThisMonth: allowance.used,
        computeAvailable: allowance.available,
        projects: projects.filter((p) => p.developerId === id).map((p) => p.projectId),
        leases,
      };
    }),
  );
  return { developers: developers.filter((d) => d !== undefined) };
}

async function vesselsRoute(query: Query) {
  const project = await projectOf(query);
  const status = query.get('status') || undefined;
  if (status !== undefined && !VesselStates.statuses.includes(status as VesselStatus))
    throw new ConsoleError(400, `status must be one of ${VesselStates.statuses.join(', ')}`);
  const limit = Number(query.get('limit') ?? 50);
  if (!Number.isInteger(limit) || limit < 1) throw new ConsoleError(400, 'limit must be a positive whole number');
  return { projectId: project.projectId, vessels: await listVessels({ projectId: project.projectId, status: status as VesselStatus | undefined, limit }) };
}

/**
 * A vessel as its owner's `GET /incubate/vessel/{id}` shows it — the output, the callback and its delivery with every
 * attempt of every round (what `gateway webhook show` prints) — with its project, user and message.
 */
async function vesselRoute(query: Query) {
  const id = required(query, 'id');
  const vessel = await getVessel(id);
  if (!vessel) throw new ConsoleError(404, `Vessel ${id} does not exist (ended vessels are kept 30 days)`);
  return { ...vesselView(vessel), projectId: vessel.projectId, userId: vessel.userId, message: vessel.message };
}

async function redeliverRoute(query: Query) {
  try {
    return await redeliverWebhook(required(query, 'id'));
  } catch (err) {
    if (err instanceof RedeliveryRefused) throw new ConsoleError(409, err.message);
    throw err;
  }
}

async function sessionsRoute(query: Query) {
  const project = await projectOf(query);
  return { projectId: project.projectId, sessions: await listSessions({ projectId: project.projectId }) };
}

/** What the console was started against, for the page to say: `local gateway` or `stack NAME`. */
export interface ConsoleTarget {
  target: string;
}

/** The routes, by method and path. */
export const API: Record<string, (query: Query, about: ConsoleTarget) => Promise<unknown>> = {
  'GET /api/projects': projectsRoute,
  'GET /api/spend': spendRoute,
  'GET /api/users': usersRoute,
  'GET /api/user': userRoute,
  'GET /api/runs': runsRoute,
  'GET /api/vessels': vesselsRoute,
  'GET /api/vessel': vesselRoute,
  'POST /api/vessel/redeliver': redeliverRoute,
  'GET /api/sessions': sessionsRoute,
};
