import { decodeJwt } from 'jose';
import { clock } from '../../lambdas/config/clock.ts';
import * as z from 'zod';
import { WindowKind } from '../../lambdas/auth/claims.ts';
import { mintToken, parseDuration } from '../../lambdas/auth/tokens.ts';
import { type ActivityCounters, groupActivity, readActivity, totalActivity } from '../../lambdas/activity/query.ts';
import { NO_MODEL } from '../../lambdas/activity/record.ts';
import { currentWindows } from '../../lambdas/budgets/ledger.ts';
import { developerStatus } from '../../lambdas/plans/status.ts';
import { tierFor } from '../../lambdas/plans/tiers.ts';
import { MAX_PROJECT_ORIGINS, MAX_TOKEN_ORIGINS, originList } from '../../lambdas/origins/pattern.ts';
import { MAX_ALERT_THRESHOLDS, type CustomPrice, Identifier, type ModelPrices, PricedModel, ProjectProvider } from '../../lambdas/registry/model.ts';
import {
  clearDeveloperAlerts,
  clearProjectAlerts,
  createDeveloper,
  describeAlerts,
  describeDeveloper,
  createProject,
  describeProject,
  getDeploymentPricing,
  getProject,
  RegistryError,
  removeDeploymentPrice,
  rotateProjectSecret,
  setDeploymentPrice,
  setDeveloperAlerts,
  setDeveloperPlan,
  setModelPricing,
  setProjectAlerts,
  setProjectOrigins,
  revokeToken,
  revokeUserTokens,
  setUserBlocked,
  setProviderKey,
} from '../../lambdas/registry/registry.ts';
import { listProjects } from '../../lambdas/registry/listing.ts';
import { PROVIDER_LABELS } from '../../lambdas/routing/provider-ids.ts';
import { alertWebhookOf, redeliverAlert, redeliverWebhook, RedeliveryRefused, webhookOf } from '../../lambdas/webhooks/redeliver.ts';
import type { WebhookView } from '../../lambdas/deliveries/record.ts';
import { startConsole } from '../console/server.ts';
import { DEFAULT_LIST_LIMIT, listVessels, MAX_LIST_LIMIT } from '../../lambdas/vessels/list.ts';
import { VesselStates } from '../../lambdas/vessels/states.ts';
import type { Target } from './target.ts';

const DAY_MS = 86_400_000;

/** A command's result: `data` for --json, `text` for people. */
export interface Output {
  data: unknown;
  text: string;
  /** A command that serves (`console`) runs until this settles, after its output is printed. */
  serving?: Promise<void>;
}

type Flags = Record<string, string | undefined>;

/**
 * What a command gets besides its flags. A command checks its flags first and only then connects, so a wrong
 * invocation is reported as such even when no gateway is running. The target tells when a change reaches gateways.
 */
export interface CommandContext {
  connect(): Promise<Pick<Target, 'kind' | 'secretCacheSeconds'>>;
}

export interface Command {
  usage: string;
  summary: string;
  run(flags: Flags, ctx: CommandContext): Promise<Output>;
}

/**
 * When a registry change is seen by running gateways. Each instance trusts a project record for
 * SECRET_CACHE_SECONDS, except where the cached record would refuse a request: a token whose signature does not
 * match the cached secret, a provider key or a model price the record lacks. Then the gateway re-reads the project
 * at once (lambdas/registry/project-cache.ts, at most once a second per project), so those changes need no wait.
 */
function takesEffect(
  target: Pick<Target, 'kind' | 'secretCacheSeconds'>,
  change: 'secret' | 'provider-key' | 'pricing' | 'deployment-pricing' | 'deployment-unpricing' | 'origins' | 'revocation' | 'unblock' | 'alerts',
): { seconds: number; text: string } {
  const s = target.secretCacheSeconds;
  if (target.kind === 'local') return { seconds: s, text: `The local gateway picks up the change within ${s} s.` };
  const within = `Running gateway instances pick up the change within ${s} s (SECRET_CACHE_SECONDS)`;
  switch (change) {
    case 'secret':
      return {
        seconds: s,
        text: `${within}; a token signed with the new secret makes an instance re-read the project at once, so new tokens work immediately, while tokens signed with the old secret keep working for up to ${s} s.`,
      };
    case 'provider-key':
      return {
        seconds: s,
        text: `${within}; if the project had no key for this provider, the first request that needs one makes an instance re-read the project at once.`,
      };
    case 'pricing':
      return {
        seconds: s,
        text: `${within}; if the model had no price for this project, the first request for it makes an instance re-read the project at once.`,
      };
    case 'deployment-pricing':
      return {
        seconds: s,
        text: `${within}; if the model had no price for a project, the first request for it makes an instance re-read the deployment's prices at once.`,
      };
    case 'deployment-unpricing':
      return {
        seconds: s,
        text: `${within}: until then an instance that read the deployment's prices earlier may still charge the removed price.`,
      };
    case 'alerts':
      return { seconds: s, text: `${within}: until then an instance may fire alerts by the settings it cached.` };
    case 'revocation':
      return {
        seconds: s,
        text: `${within}: until then an instance that cached the project earlier may still serve the revoked tokens.`,
      };
    case 'unblock':
      return {
        seconds: s,
        text: `${within}; a request the cached record would refuse makes an instance re-read the project at once, so the user's tokens work again immediately.`,
      };
    case 'origins':
      return {
        seconds: s,
        text: `${within}; a request from an origin the cached record refuses makes an instance re-read the project at once, so an origin just allowed works immediately, while an origin just removed keeps working for up to ${s} s.`,
      };
  }
}

const count = (name: string) =>
  z.coerce
    .number({ error: `--${name} must be a number` })
    .int(`--${name} must be a whole number`)
    .nonnegative(`--${name} must not be negative`);
const usd = (name: string) =>
  z.coerce
    .number({ error: `--${name} must be a number` })
    .nonnegative(`--${name} must not be negative`)
    .finite();
/** `--origins a,b`: a comma-separated list of origin patterns (lambdas/origins/pattern.ts). */
const originsFlag = (max: number) =>
  z
    .string()
    .transform((list) => list.split(',').filter((o) => o.trim() !== ''))
    .pipe(originList(max));
/**
 * `--ai 50,80,100`: whole percentages of a budget, comma-separated; sorted, each once (the registry checks them again
 * with the schema the record is read with: lambdas/registry/model.ts AlertThresholds).
 */
const percentagesFlag = (name: string) =>
  z.string().transform((list, ctx) => {
    const parts = list.split(',').map((p) => p.trim());
    const bad = parts.find((p) => !/^\d+$/.test(p) || Number(p) < 1 || Number(p) > 100);
    if (bad !== undefined) {
      ctx.addIssue({
        code: 'custom',
        message: `--${name} takes whole percentages from 1 to 100, comma-separated (e.g. 50,80,100): "${bad}" is not one`,
      });
      return z.NEVER;
    }
    const percentages = [...new Set(parts.map(Number))].sort((a, b) => a - b);
    if (percentages.length > MAX_ALERT_THRESHOLDS) {
      ctx.addIssue({ code: 'custom', message: `--${name} takes at most ${MAX_ALERT_THRESHOLDS} percentages, got ${percentages.length}` });
      return z.NEVER;
    }
    return percentages;
  });
/** Where alerts go, and the secret that signs them (stored encrypted, never shown). */
const ALERT_TARGET_FLAGS = {
  url: z.string({ error: '--url is required: where the signed alerts are POSTed' }).min(1, '--url must not be empty'),
  secret: z.string({ error: '--secret is required: every alert is signed with it' }).min(1, '--secret must not be empty'),
};
/** `50, 80, 100 %` of the AI budget …, for people. */
function describeAlertsText(alerts: ReturnType<typeof describeAlerts>): string {
  if (alerts === 'none') return 'no alerts';
  const meters = [
    ...('ai' in alerts && alerts.ai ? [`AI budget at ${alerts.ai.join(', ')} %`] : []),
    ...(alerts.compute ? [`compute at ${alerts.compute.join(', ')} %`] : []),
  ];
  return `${meters.join('; ')} → ${alerts.url} (signed)`;
}

const required = <T extends z.ZodType>(name: string, schema: T) =>
  z.preprocess((v) => v, z.string({ error: `--${name} is required` }).pipe(schema as never)) as unknown as T;

/** The price flags of `project set-pricing` and `pricing set`: USD per million tokens, cache rates optional. */
const PRICE_FLAGS = {
  model: required('model', PricedModel),
  'input-usd-per-mtok': required('input-usd-per-mtok', usd('input-usd-per-mtok')),
  'output-usd-per-mtok': required('output-usd-per-mtok', usd('output-usd-per-mtok')),
  'cache-read-usd-per-mtok': usd('cache-read-usd-per-mtok').optional(),
  'cache-write-usd-per-mtok': usd('cache-write-usd-per-mtok').optional(),
};
const PRICE_USAGE = '--model M --input-usd-per-mtok X --output-usd-per-mtok Y [--cache-read-usd-per-mtok X] [--cache-write-usd-per-mtok X]';

function priceOf(o: {
  'input-usd-per-mtok': number;
  'output-usd-per-mtok': number;
  'cache-read-usd-per-mtok'?: number;
  'cache-write-usd-per-mtok'?: number;
}): CustomPrice {
  return {
    inputUsdPerMtok: o['input-usd-per-mtok'],
    outputUsdPerMtok: o['output-usd-per-mtok'],
    ...(o['cache-read-usd-per-mtok'] !== undefined ? { cacheReadUsdPerMtok: o['cache-read-usd-per-mtok'] } : {}),
    ...(o['cache-write-usd-per-mtok'] !== undefined ? { cacheWriteUsdPerMtok: o['cache-write-usd-per-mtok'] } : {}),
  };
}

/** `$1/Mtok in, $5/Mtok out[, $0.1/Mtok cache read][, $1.25/Mtok cache write]`. */
function describePrice(price: CustomPrice): string {
  return [
    `$${price.inputUsdPerMtok}/Mtok in`,
    `$${price.outputUsdPerMtok}/Mtok out`,
    ...(price.cacheReadUsdPerMtok !== undefined ? [`$${price.cacheReadUsdPerMtok}/Mtok cache read`] : []),
    ...(price.cacheWriteUsdPerMtok !== undefined ? [`$${price.cacheWriteUsdPerMtok}/Mtok cache write`] : []),
  ].join(', ');
}

function listPrices(pricing: ModelPrices): string {
  const models = Object.keys(pricing).sort();
  if (models.length === 0) return 'No deployment-wide prices (gateway pricing set --model M … sets one)';
  return ["Deployment-wide prices (a project's own price for a model wins):", ...models.map((m) => `  ${m}: ${describePrice(pricing[m]!)}`)].join('\n');
}

function parse<T extends z.ZodRawShape>(shape: T, flags: Flags): z.infer<z.ZodObject<T>> {
  const result = z.object(shape).safeParse(flags);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new UsageError(issue.message.startsWith('--') ? issue.message : `--${String(issue.path[0])}: ${issue.message}`);
  }
  return result.data;
}

export class UsageError extends Error {}

/** `--expires-at`: an ISO 8601 time or unix seconds. */
function unixSeconds(text: string): number {
  const seconds = /^\d+$/.test(text) ? Number(text) : Math.floor(Date.parse(text) / 1000);
  if (!Number.isSafeInteger(seconds) || seconds <= 0)
    throw new UsageError(`--expires-at must be an ISO 8601 time (2026-12-31T00:00:00Z) or unix seconds, got "${text}"`);
  return seconds;
}

/** The claims of a token the owner hands the CLI, read without its signature (the CLI holds the store, not a key to guard). */
function tokenClaims(token: string): Record<string, unknown> {
  try {
    const claims = decodeJwt(token);
    return claims as Record<string, unknown>;
  } catch {
    throw new UsageError('--token is not a JWT');
  }
}

/** A delivery record's status and attempts, for people (`webhook show`). */
function deliveryLines(w: WebhookView): string[] {
  return [
    `  delivery: ${w.status}${'failure' in w && w.failure ? ` (${w.failure})` : ''}`,
    ...w.attempts.map((a) => `    round ${a.round} attempt ${a.attempt} at ${a.time}: ${a.statusCode ?? a.error} in ${a.durationMs} ms`),
    ...('nextAttemptAt' in w && w.nextAttemptAt ? [`  next attempt: ${w.nextAttemptAt}`] : []),
  ];
}

/** A refused operation outside the registry (a vessel that cannot be redelivered) exits like a registry refusal: 1. */
async function refusedAsRegistryError<T>(run: () => Promise<T>): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof RedeliveryRefused) throw new RegistryError(err.message);
    throw err;
  }
}

async function requireProject(id: string) {
  const project = await getProject(id);
  if (!project) throw new RegistryError(`Project ${id} does not exist`);
  return project;
}

/** `user block` and `user unblock`: the same write, one way or the other. */
function userBlockCommand(blocked: boolean): Command {
  const verb = blocked ? 'block' : 'unblock';
  return {
    usage: `user ${verb} --project ID --user U`,
    summary: blocked
      ? 'refuse every token of a user (every route; their queued vessels end FAILED, an open /ws session closes)'
      : "let a blocked user's tokens work again",
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier), user: required('user', Identifier) }, flags);
      const target = await ctx.connect();
      await setUserBlocked(o.project, o.user, blocked);
      const effect = takesEffect(target, blocked ? 'revocation' : 'unblock');
      return {
        data: { projectId: o.project, userId: o.user, blocked, takesEffectWithinSeconds: effect.seconds },
        text: `${blocked ? 'Blocked' : 'Unblocked'} user ${o.user} of ${o.project}\n${effect.text}`,
      };
    },
  };
}

export const COMMANDS: Record<string, Command> = {
  'developer create': {
    usage: 'developer create --id ID --plan-seconds N [--pool-seconds N]',
    summary: 'register a developer with a monthly plan of compute seconds (and an optional pool on top)',
    async run(flags, ctx) {
      const o = parse(
        { id: required('id', Identifier), 'plan-seconds': required('plan-seconds', count('plan-seconds')), 'pool-seconds': count('pool-seconds').optional() },
        flags,
      );
      await ctx.connect();
      const dev = await createDeveloper({ developerId: o.id, planSeconds: o['plan-seconds'], poolSeconds: o['pool-seconds'] });
      const tier = tierFor(dev.planSeconds);
      return {
        data: { ...describeDeveloper(dev), tier: tier.name, maxConcurrency: tier.maxConcurrency },
        text: `Created developer ${dev.developerId} (${tier.name} tier, ${tier.maxConcurrency} concurrent runs)`,
      };
    },
  },
  'developer set-plan': {
    usage: 'developer set-plan --id ID --plan-seconds N [--pool-seconds N]',
    summary: "change a developer's monthly plan (and pool); the tier it gives applies from the next run",
    async run(flags, ctx) {
      const o = parse(
        { id: required('id', Identifier), 'plan-seconds': required('plan-seconds', count('plan-seconds')), 'pool-seconds': count('pool-seconds').optional() },
        flags,
      );
      await ctx.connect();
      const dev = await setDeveloperPlan(o.id, { planSeconds: o['plan-seconds'], poolSeconds: o['pool-seconds'] });
      const tier = tierFor(dev.planSeconds);
      return {
        data: { ...describeDeveloper(dev), tier: tier.name, maxConcurrency: tier.maxConcurrency },
        text: `Set the plan of ${dev.developerId}: ${dev.planSeconds} s + pool ${dev.poolSeconds} s (${tier.name} tier, ${tier.maxConcurrency} concurrent runs, from the next run)`,
      };
    },
  },
  'developer show': {
    usage: 'developer show --id ID',
    summary: "a developer's plan, tier, live runs (leases), this month's compute and its users' AI spend",
    async run(flags, ctx) {
      const o = parse({ id: required('id', Identifier) }, flags);
      await ctx.connect();
      const now = new Date(clock.now());
      const monthStart = new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1));
      const [status, projects] = await Promise.all([developerStatus(o.id), listProjects({ developerId: o.id })]);
      if (!status) throw new RegistryError(`Developer ${o.id} does not exist`);
      const { developer: dev, tier, allowance, leases } = status;
      // The AI dollars of the developer's users this month: the projects' activity (docs/activity.md).
      const spent = await Promise.all(projects.map(async (p) => totalActivity(await readActivity(p.projectId, monthStart, now)).aiMicros));
      const data = {
        ...describeDeveloper(dev),
        alerts: describeAlerts(dev.alerts),
        tier: tier.name,
        maxConcurrency: tier.maxConcurrency,
        liveLeases: leases,
        computeUsedThisMonth: allowance.used,
        computeAvailable: allowance.available,
        aiMicrosThisMonth: spent.reduce((a, b) => a + b, 0),
        projects: projects.map((p, i) => ({ projectId: p.projectId, aiMicrosThisMonth: spent[i]! })),
      };
      return {
        data,
        text: [
          `Developer ${dev.developerId}`,
          `  plan: ${dev.planSeconds} s + pool ${dev.poolSeconds} s (${tier.name} tier, ${tier.maxConcurrency} concurrent runs)`,
          `  compute this month: ${allowance.used} s used, ${allowance.available} s available`,
          `  AI this month: ${data.aiMicrosThisMonth} µ$ over ${projects.length} project(s)${projects.length ? ` (${data.projects.map((p) => `${p.projectId} ${p.aiMicrosThisMonth} µ$`).join(', ')})` : ''}`,
          `  live runs: ${leases.length} of ${tier.maxConcurrency}`,
          ...leases.map((l) => `    ${l.sessionId} (user ${l.userId}, ${Math.round(l.ageMs / 1000)} s)`),
          `  plan alerts: ${describeAlertsText(data.alerts)}`,
        ].join('\n'),
      };
    },
  },
  'user show': {
    usage: 'user show --project ID --user ID',
    summary: "a user's current budget windows (used, held), blocked or not, and the AI spend of the last 30 days by model",
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier), user: required('user', z.string().min(1)) }, flags);
      await ctx.connect();
      const project = await requireProject(o.project);
      const until = new Date(clock.now());
      const [windows, rows] = await Promise.all([
        currentWindows(project.projectId, o.user, until),
        readActivity(project.projectId, new Date(until.getTime() - 30 * DAY_MS), until),
      ]);
      const mine = rows.filter((r) => r.userId === o.user);
      const blocked = project.blockedUsers?.[o.user] === true;
      const tokensRevokedBefore = project.revokedBefore?.[o.user];
      const byModel = groupActivity(mine, 'model');
      const data = {
        projectId: project.projectId,
        userId: o.user,
        blocked,
        ...(tokensRevokedBefore === undefined ? {} : { tokensRevokedBefore }),
        windows: windows.map((w) => ({ window: w.key.window, windowStart: w.key.windowStart, used: w.used, reserved: w.reserved, openHolds: w.openHolds })),
        last30Days: { total: totalActivity(mine), byModel },
      };
      return {
        data,
        text: [
          `User ${o.user} of ${project.projectId}${blocked ? ' (BLOCKED: every token refused)' : ''}`,
          ...(tokensRevokedBefore === undefined ? [] : [`  tokens issued before ${new Date(tokensRevokedBefore * 1000).toISOString()} are revoked`]),
          windows.length === 0 ? '  no spend in any current window' : '  current windows:',
          ...windows.map(
            (w) =>
              `    ${w.key.window} from ${w.key.windowStart}: AI ${w.used.ai} µ$ used, ${w.reserved.ai} held; compute ${w.used.compute} s used, ${w.reserved.compute} held`,
          ),
          `  last 30 days: ${data.last30Days.total.aiMicros} µ$ over ${data.last30Days.total.requests} calls`,
          ...byModel.map((g) => `    ${g.key === NO_MODEL ? 'compute' : g.key}: ${g.aiMicros} µ$, ${g.requests} calls, ${g.computeSeconds} s compute`),
        ].join('\n'),
      };
    },
  },
  'developer set-alerts': {
    usage: 'developer set-alerts --id ID --compute 80,100 --url URL --secret SECRET',
    summary:
      "POST a signed developer.plan.threshold event to URL when the developer's month of compute crosses each percentage of the plan (once per month and percentage)",
    async run(flags, ctx) {
      const o = parse({ id: required('id', Identifier), compute: required('compute', percentagesFlag('compute')), ...ALERT_TARGET_FLAGS }, flags);
      const target = await ctx.connect();
      const dev = await setDeveloperAlerts(o.id, { compute: o.compute, url: o.url, secret: o.secret });
      const alerts = describeAlerts(dev.alerts);
      const effect = takesEffect(target, 'alerts');
      return {
        data: { developerId: dev.developerId, alerts, takesEffectWithinSeconds: effect.seconds },
        text: `Plan alerts of ${dev.developerId}: ${describeAlertsText(alerts)}\n${effect.text}`,
      };
    },
  },
  'developer clear-alerts': {
    usage: 'developer clear-alerts --id ID',
    summary: "stop a developer's plan alerts (those already fired are still delivered)",
    async run(flags, ctx) {
      const o = parse({ id: required('id', Identifier) }, flags);
      const target = await ctx.connect();
      const dev = await clearDeveloperAlerts(o.id);
      const effect = takesEffect(target, 'alerts');
      return {
        data: { developerId: dev.developerId, alerts: describeAlerts(dev.alerts), takesEffectWithinSeconds: effect.seconds },
        text: `Cleared the plan alerts of ${dev.developerId}\n${effect.text}`,
      };
    },
  },
  activity: {
    usage: 'activity [--project ID] [--since 24h] [--by user|model|project|hour|day]',
    summary: 'what the users of a project (or of every project) spent, from the activity records: totals, or grouped by user, model, project, hour or day',
    async run(flags, ctx) {
      const o = parse(
        {
          project: Identifier.optional(),
          since: z.string().default('24h'),
          by: z.enum(['user', 'model', 'project', 'hour', 'day'], { error: '--by must be user, model, project, hour or day' }).optional(),
        },
        flags,
      );
      let seconds: number;
      try {
        seconds = parseDuration(o.since);
      } catch (err) {
        throw new UsageError(`--since: ${(err as Error).message}`);
      }
      await ctx.connect();
      const projects = o.project ? [(await requireProject(o.project)).projectId] : (await listProjects()).map((p) => p.projectId);
      const until = new Date(clock.now());
      const since = new Date(until.getTime() - seconds * 1000);
      const rows = (await Promise.all(projects.map((p) => readActivity(p, since, until)))).flat();
      const total = totalActivity(rows);
      const groups = o.by ? groupActivity(rows, o.by) : undefined;
      const line = (label: string, c: ActivityCounters) =>
        `  ${label}: ${c.aiMicros} µ$, ${c.requests} calls, ${c.inputTokens} in / ${c.outputTokens} out / ${c.cacheReadTokens} cache read / ${c.cacheWriteTokens} cache write tokens, ${c.computeSeconds} s compute, ${c.errors} errors, ${c.refusals} refusals`;
      return {
        data: { projects, since: since.toISOString(), until: until.toISOString(), total, ...(groups ? { by: o.by, groups } : {}) },
        text: [
          `Activity of ${o.project ?? `every project (${projects.length})`} since ${since.toISOString()}`,
          line('total', total),
          ...(groups ? [`By ${o.by}:`, ...groups.map((g) => line(g.key, g))] : []),
        ].join('\n'),
      };
    },
  },
  'project create': {
    usage: 'project create --developer ID [--id ID]',
    summary: 'create a project; prints its ID and the secret that signs its tokens',
    async run(flags, ctx) {
      const o = parse({ developer: required('developer', Identifier), id: Identifier.optional() }, flags);
      await ctx.connect();
      const project = await createProject({ developerId: o.developer, projectId: o.id });
      return {
        data: { projectId: project.projectId, developerId: project.developerId, secret: project.secret },
        text: `Created project ${project.projectId} for developer ${project.developerId}\nprojectId: ${project.projectId}\nsecret:    ${project.secret}\nKeep the secret safe: it signs your users' tokens.`,
      };
    },
  },
  'project show': {
    usage: 'project show --project ID',
    summary: 'a project: owner, which provider keys it has, custom prices (never the secret or keys)',
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier) }, flags);
      await ctx.connect();
      const d = describeProject(await requireProject(o.project));
      return { data: d, text: JSON.stringify(d, null, 2) };
    },
  },
  'project list': {
    usage: 'project list [--developer ID]',
    summary: "every project (or a developer's): owner, provider keys, and AI spend and calls of the last 24 h",
    async run(flags, ctx) {
      const o = parse({ developer: Identifier.optional() }, flags);
      await ctx.connect();
      const projects = await listProjects({ developerId: o.developer });
      const until = new Date(clock.now());
      const since = new Date(until.getTime() - DAY_MS);
      const totals = await Promise.all(projects.map(async (p) => totalActivity(await readActivity(p.projectId, since, until))));
      const data = projects.map((p, i) => ({ ...describeProject(p), last24h: { aiMicros: totals[i]!.aiMicros, requests: totals[i]!.requests } }));
      return {
        data: { projects: data },
        text:
          data.length === 0
            ? 'No projects (project create --developer ID creates one)'
            : data
                .map(
                  (p) =>
                    `${p.projectId}  developer ${p.developerId}  keys: ${p.providerKeys.join(', ') || 'none'}  last 24 h: ${p.last24h.aiMicros} µ$, ${p.last24h.requests} calls`,
                )
                .join('\n'),
      };
    },
  },
  'project rotate-secret': {
    usage: 'project rotate-secret --project ID',
    summary: 'replace the secret; prints the new one',
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier) }, flags);
      const target = await ctx.connect();
      const project = await rotateProjectSecret(o.project);
      const effect = takesEffect(target, 'secret');
      return {
        data: { projectId: project.projectId, secret: project.secret, rotatedAt: project.secretRotatedAt, takesEffectWithinSeconds: effect.seconds },
        text: `Rotated the secret of ${project.projectId}\nsecret: ${project.secret}\n${effect.text}`,
      };
    },
  },
  'project set-provider-key': {
    usage: `project set-provider-key --project ID --provider ${ProjectProvider.options.join('|')} --key KEY`,
    summary: `store the project's own ${ProjectProvider.options.map((id) => PROVIDER_LABELS[id]).join(' or ')} key (encrypted, never shown again)`,
    async run(flags, ctx) {
      const o = parse(
        {
          project: required('project', Identifier),
          provider: required('provider', z.enum(ProjectProvider.options, { error: `--provider must be ${ProjectProvider.options.join(' or ')}` })),
          key: required('key', z.string().min(1, '--key must not be empty')),
        },
        flags,
      );
      const target = await ctx.connect();
      await setProviderKey(o.project, o.provider, o.key);
      const effect = takesEffect(target, 'provider-key');
      return {
        data: { projectId: o.project, provider: o.provider, stored: true, takesEffectWithinSeconds: effect.seconds },
        text: `Stored the ${o.provider} key of ${o.project} (encrypted; it is never shown again)\n${effect.text}`,
      };
    },
  },
  'project set-pricing': {
    usage: `project set-pricing --project ID ${PRICE_USAGE}`,
    summary: "set the project's price for a model, in USD per million tokens (wins over deployment-wide prices and the bundled table)",
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier), ...PRICE_FLAGS }, flags);
      const price = priceOf(o);
      const target = await ctx.connect();
      await setModelPricing(o.project, o.model, price);
      const effect = takesEffect(target, 'pricing');
      return {
        data: { projectId: o.project, model: o.model, price, takesEffectWithinSeconds: effect.seconds },
        text: `Priced ${o.model} for ${o.project}: $${price.inputUsdPerMtok}/Mtok in, $${price.outputUsdPerMtok}/Mtok out\n${effect.text}`,
      };
    },
  },
  'pricing set': {
    usage: `pricing set ${PRICE_USAGE}`,
    summary: "price a model for every project of the deployment, in USD per million tokens (a project's own price wins; this wins over the bundled table)",
    async run(flags, ctx) {
      const o = parse(PRICE_FLAGS, flags);
      const price = priceOf(o);
      const target = await ctx.connect();
      await setDeploymentPrice(o.model, price);
      const effect = takesEffect(target, 'deployment-pricing');
      return {
        data: { model: o.model, price, takesEffectWithinSeconds: effect.seconds },
        text: `Priced ${o.model} for every project: ${describePrice(price)} (a project's own price for it wins)\n${effect.text}`,
      };
    },
  },
  'pricing unset': {
    usage: 'pricing unset --model M',
    summary: "remove a model's deployment-wide price (projects then use their own price, the bundled table's, or refuse the model)",
    async run(flags, ctx) {
      const o = parse({ model: required('model', PricedModel) }, flags);
      const target = await ctx.connect();
      await removeDeploymentPrice(o.model);
      const effect = takesEffect(target, 'deployment-unpricing');
      return {
        data: { model: o.model, removed: true, takesEffectWithinSeconds: effect.seconds },
        text: `Removed the deployment-wide price of ${o.model}\n${effect.text}`,
      };
    },
  },
  'pricing list': {
    usage: 'pricing list',
    summary: 'the deployment-wide prices, by model, in USD per million tokens',
    async run(_flags, ctx) {
      await ctx.connect();
      const pricing = await getDeploymentPricing();
      return { data: { pricing }, text: listPrices(pricing) };
    },
  },
  'project set-origins': {
    usage: 'project set-origins --project ID (--origins https://app.example.com,https://*.example.com | --any)',
    summary: `the web origins a page may use the project's tokens from (at most ${MAX_PROJECT_ORIGINS}; --any, the default: every origin)`,
    async run(flags, ctx) {
      const any = (flags.any as unknown) === true;
      if (any === (flags.origins !== undefined)) throw new UsageError('give either --origins (a comma-separated list) or --any');
      const o = parse(
        {
          project: required('project', Identifier),
          origins: originsFlag(MAX_PROJECT_ORIGINS).optional(),
        },
        flags,
      );
      const target = await ctx.connect();
      const project = await setProjectOrigins(o.project, any ? undefined : o.origins);
      const effect = takesEffect(target, 'origins');
      const origins = project.origins ?? 'any';
      return {
        data: { projectId: project.projectId, origins, takesEffectWithinSeconds: effect.seconds },
        text: `${project.projectId} takes requests from ${origins === 'any' ? 'any origin' : origins.join(', ')} (and from clients that send no Origin: servers, CLIs, apps)\n${effect.text}`,
      };
    },
  },
  'project set-alerts': {
    usage: 'project set-alerts --project ID [--ai 50,80,100] [--compute 80,100] --url URL --secret SECRET',
    summary:
      "POST a signed user.budget.threshold event to URL when a user's window crosses each percentage of their AI or compute budget (once per user, window and percentage)",
    async run(flags, ctx) {
      const o = parse(
        {
          project: required('project', Identifier),
          ai: percentagesFlag('ai').optional(),
          compute: percentagesFlag('compute').optional(),
          ...ALERT_TARGET_FLAGS,
        },
        flags,
      );
      if (!o.ai && !o.compute) throw new UsageError('give --ai, --compute or both: the percentages of the budgets to alert at');
      const target = await ctx.connect();
      const project = await setProjectAlerts(o.project, { ai: o.ai, compute: o.compute, url: o.url, secret: o.secret });
      const alerts = describeAlerts(project.alerts);
      const effect = takesEffect(target, 'alerts');
      return {
        data: { projectId: project.projectId, alerts, takesEffectWithinSeconds: effect.seconds },
        text: `Budget alerts of ${project.projectId}: ${describeAlertsText(alerts)}\n${effect.text}`,
      };
    },
  },
  'project clear-alerts': {
    usage: 'project clear-alerts --project ID',
    summary: "stop a project's budget alerts (those already fired are still delivered)",
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier) }, flags);
      const target = await ctx.connect();
      const project = await clearProjectAlerts(o.project);
      const effect = takesEffect(target, 'alerts');
      return {
        data: { projectId: project.projectId, alerts: describeAlerts(project.alerts), takesEffectWithinSeconds: effect.seconds },
        text: `Cleared the budget alerts of ${project.projectId}\n${effect.text}`,
      };
    },
  },
  'vessel list': {
    usage: `vessel list --project ID [--status ${VesselStates.statuses.join('|')}] [--limit N]`,
    summary: "a project's vessels, newest first: id, user, status and its times (`webhook show --vessel ID` for one's callback)",
    async run(flags, ctx) {
      const o = parse(
        {
          project: required('project', Identifier),
          status: z.enum(VesselStates.statuses, { error: `--status must be one of ${VesselStates.statuses.join(', ')}` }).optional(),
          limit: z.coerce
            .number()
            .int()
            .min(1)
            .max(MAX_LIST_LIMIT, { error: `--limit must be at most ${MAX_LIST_LIMIT}` })
            .default(DEFAULT_LIST_LIMIT),
        },
        flags,
      );
      await ctx.connect();
      await requireProject(o.project);
      const vessels = await listVessels({ projectId: o.project, status: o.status, limit: o.limit });
      return {
        data: { projectId: o.project, vessels },
        text:
          vessels.length === 0
            ? `No vessels${o.status ? ` ${o.status}` : ''} in ${o.project}`
            : vessels
                .map((v) => `${v.vesselId}  ${v.status.padEnd(9)}  user ${v.userId}  created ${v.createdAt}${v.completedAt ? `  ended ${v.completedAt}` : ''}`)
                .join('\n'),
      };
    },
  },
  'webhook show': {
    usage: 'webhook show (--vessel ID | --alert ID)',
    summary: "a vessel's callback delivery, or a budget alert's: status and every attempt (time, status code or error, duration)",
    async run(flags, ctx) {
      const o = parse(
        { vessel: z.string().min(1, '--vessel must not be empty').optional(), alert: z.string().min(1, '--alert must not be empty').optional() },
        flags,
      );
      if ((o.vessel === undefined) === (o.alert === undefined)) throw new UsageError('give either --vessel or --alert');
      await ctx.connect();
      if (o.alert !== undefined) {
        const alert = await refusedAsRegistryError(() => alertWebhookOf(o.alert!));
        return {
          data: alert,
          text: [`Alert ${alert.alertId}: ${alert.event} ${JSON.stringify(alert.fields)} → ${alert.url} (signed)`, ...deliveryLines(alert.webhook)].join('\n'),
        };
      }
      const vessel = o.vessel!;
      const shown = await refusedAsRegistryError(() => webhookOf(vessel));
      const w = shown.webhook;
      return {
        data: shown,
        text: [
          `Vessel ${shown.vesselId} (${shown.status}) → ${shown.url}${shown.signed ? ' (signed)' : ''}`,
          ...(w ? deliveryLines(w) : ['  delivery: not started (the vessel has not ended)']),
        ].join('\n'),
      };
    },
  },
  'webhook redeliver': {
    usage: 'webhook redeliver (--vessel ID | --alert ID)',
    summary: "send an ended vessel's callback, or a budget alert, again: a new round of attempts (same webhook-id and body), starting now",
    async run(flags, ctx) {
      const o = parse(
        { vessel: z.string().min(1, '--vessel must not be empty').optional(), alert: z.string().min(1, '--alert must not be empty').optional() },
        flags,
      );
      if ((o.vessel === undefined) === (o.alert === undefined)) throw new UsageError('give either --vessel or --alert');
      await ctx.connect();
      if (o.alert !== undefined) {
        const alert = await refusedAsRegistryError(() => redeliverAlert(o.alert!));
        return {
          data: alert,
          text: `Redelivering alert ${alert.alertId}: round ${alert.round}, first attempt now (gateway webhook show --alert ${alert.alertId} follows it)`,
        };
      }
      const out = await refusedAsRegistryError(() => redeliverWebhook(o.vessel!));
      const when = out.handedOff ? 'first attempt now' : 'the webhook queue did not answer: the reconciler hands it off within minutes';
      return {
        data: out,
        text: `Redelivering the callback of vessel ${out.vesselId}: round ${out.round}, ${when} (gateway webhook show --vessel ${out.vesselId} follows it)`,
      };
    },
  },
  'token mint': {
    usage: 'token mint --project ID --user U --ai-microdollars N --compute-seconds N --window hour|day|week|month|lifetime [--expires-in 1h] [--origins A,B]',
    summary: "mint a user's token with a budget (for trying things; project owners mint their own)",
    async run(flags, ctx) {
      const o = parse(
        {
          project: required('project', Identifier),
          user: required('user', Identifier),
          'ai-microdollars': required('ai-microdollars', count('ai-microdollars')),
          'compute-seconds': required('compute-seconds', count('compute-seconds')),
          window: required('window', WindowKind),
          'expires-in': z.string().default('1h'),
          origins: originsFlag(MAX_TOKEN_ORIGINS).optional(),
        },
        flags,
      );
      let expiresInSeconds: number;
      try {
        expiresInSeconds = parseDuration(o['expires-in']);
      } catch (err) {
        throw new UsageError(`--expires-in: ${(err as Error).message}`);
      }
      await ctx.connect();
      const project = await requireProject(o.project);
      const budget = { ai: o['ai-microdollars'], compute: o['compute-seconds'], window: o.window };
      const token = await mintToken({ projectId: project.projectId, userId: o.user, secret: project.secret, budget, expiresInSeconds, origins: o.origins });
      return {
        data: { token, projectId: project.projectId, userId: o.user, budget, expiresInSeconds, ...(o.origins ? { origins: o.origins } : {}) },
        text: token,
      };
    },
  },
  'token revoke': {
    usage: 'token revoke --project ID (--token JWT | --jti JTI [--expires-at 2026-12-31T00:00:00Z])',
    summary: "revoke one user token (by the token itself, or its jti and expiry); the user's other tokens keep working",
    async run(flags, ctx) {
      const o = parse(
        {
          project: required('project', Identifier),
          token: z.string().min(1, '--token must not be empty').optional(),
          jti: z.string().min(1, '--jti must not be empty').max(128, '--jti is at most 128 characters').optional(),
          'expires-at': z.string().optional(),
        },
        flags,
      );
      if ((o.token === undefined) === (o.jti === undefined)) throw new UsageError('give either --token (the token itself) or --jti');
      let jti = o.jti;
      let expiresAt = o['expires-at'] === undefined ? 0 : unixSeconds(o['expires-at']);
      if (o.token !== undefined) {
        if (o['expires-at'] !== undefined) throw new UsageError('--expires-at goes with --jti; a --token carries its own exp');
        const claims = tokenClaims(o.token);
        if (claims.iss !== o.project) throw new UsageError(`--token was issued by project ${String(claims.iss)}, not ${o.project}`);
        if (typeof claims.jti !== 'string')
          throw new UsageError('--token has no jti claim: revoke its user\'s tokens with "gateway user revoke-tokens", or block the user');
        jti = claims.jti;
        expiresAt = typeof claims.exp === 'number' ? claims.exp : 0;
      }
      const target = await ctx.connect();
      await revokeToken(o.project, jti!, expiresAt);
      const effect = takesEffect(target, 'revocation');
      const until = expiresAt ? `until it expires at ${new Date(expiresAt * 1000).toISOString()}` : 'with no expiry given: kept until the project is changed';
      return {
        data: { projectId: o.project, jti, expiresAt: expiresAt || null, takesEffectWithinSeconds: effect.seconds },
        text: `Revoked token ${jti} of ${o.project} (${until})\n${effect.text}`,
      };
    },
  },
  console: {
    usage: 'console [--port N]',
    summary:
      'a web console on 127.0.0.1 (default port 8790): spend over time, users and their budgets, live runs, vessels and their webhooks (redeliver), /ws sessions; reads what the CLI reads',
    async run(flags, ctx) {
      const o = parse({ port: count('port').max(65_535, '--port must be at most 65535').default(8790) }, flags);
      const target = await ctx.connect();
      const running = await startConsole({ port: o.port, target: target.kind === 'local' ? 'local gateway' : 'deployed stack' });
      // Served until the operator stops it (Ctrl-C); the connections are closed so the process can end at once.
      const serving = new Promise<void>((resolve) => {
        const stop = () => void running.close().then(resolve);
        process.once('SIGINT', stop);
        process.once('SIGTERM', stop);
      });
      return { data: { url: running.url, target: target.kind }, text: `Console on ${running.url} (Ctrl-C stops it)`, serving };
    },
  },
  'user block': userBlockCommand(true),
  'user unblock': userBlockCommand(false),
  'user revoke-tokens': {
    usage: 'user revoke-tokens --project ID --user U',
    summary: 'revoke every token of a user issued until now; tokens minted from now on work',
    async run(flags, ctx) {
      const o = parse({ project: required('project', Identifier), user: required('user', Identifier) }, flags);
      const target = await ctx.connect();
      const before = Math.floor(clock.now() / 1000);
      await revokeUserTokens(o.project, o.user, before);
      const effect = takesEffect(target, 'revocation');
      return {
        data: { projectId: o.project, userId: o.user, revokedBefore: before, takesEffectWithinSeconds: effect.seconds },
        text: `Revoked the tokens of user ${o.user} of ${o.project} issued up to ${new Date(before * 1000).toISOString()} (those minted from the next second on work)\n${effect.text}`,
      };
    },
  },
};
