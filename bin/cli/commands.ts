import { z } from 'zod';
import { Identifier, WindowKind } from '../../lambdas/auth/claims.ts';
import { mintToken, parseDuration } from '../../lambdas/auth/tokens.ts';
import { developerAllowance, developerComputeUsed } from '../../lambdas/budgets/ledger.ts';
import { ProjectProvider, tierFor } from '../../lambdas/registry/model.ts';
import {
  createDeveloper,
  createProject,
  describeProject,
  getDeveloper,
  getProject,
  RegistryError,
  rotateProjectSecret,
  setModelPricing,
  setProviderKey,
} from '../../lambdas/registry/registry.ts';

/** A command's result: `data` for --json, `text` for people. */
export interface Output {
  data: unknown;
  text: string;
}

type Flags = Record<string, string | undefined>;

const count = (name: string) => z.coerce.number({ error: `--${name} must be a number` }).int(`--${name} must be a whole number`).nonnegative(`--${name} must not be negative`);
const usd = (name: string) => z.coerce.number({ error: `--${name} must be a number` }).nonnegative(`--${name} must not be negative`).finite();
const required = <T extends z.ZodType>(name: string, schema: T) => z.preprocess((v) => v, z.string({ error: `--${name} is required` }).pipe(schema as never)) as unknown as T;

function parse<T extends z.ZodRawShape>(shape: T, flags: Flags): z.infer<z.ZodObject<T>> {
  const result = z.object(shape).safeParse(flags);
  if (!result.success) {
    const issue = result.error.issues[0]!;
    throw new UsageError(issue.message.startsWith('--') ? issue.message : `--${String(issue.path[0])}: ${issue.message}`);
  }
  return result.data;
}

export class UsageError extends Error {}

async function requireProject(id: string) {
  const project = await getProject(id);
  if (!project) throw new RegistryError(`Project ${id} does not exist`);
  return project;
}

export const COMMANDS: Record<string, { usage: string; run(flags: Flags): Promise<Output> }> = {
  'developer create': {
    usage: 'developer create --id ID --plan-seconds N [--pool-seconds N]',
    async run(flags) {
      const o = parse({ id: required('id', Identifier), 'plan-seconds': required('plan-seconds', count('plan-seconds')), 'pool-seconds': count('pool-seconds').optional() }, flags);
      const dev = await createDeveloper({ developerId: o.id, planSeconds: o['plan-seconds'], poolSeconds: o['pool-seconds'] });
      const tier = tierFor(dev.planSeconds);
      return { data: { ...dev, tier: tier.name, maxConcurrency: tier.maxConcurrency }, text: `Created developer ${dev.developerId} (${tier.name} tier, ${tier.maxConcurrency} concurrent runs)` };
    },
  },
  'developer show': {
    usage: 'developer show --id ID',
    async run(flags) {
      const o = parse({ id: required('id', Identifier) }, flags);
      const dev = await getDeveloper(o.id);
      if (!dev) throw new RegistryError(`Developer ${o.id} does not exist`);
      const tier = tierFor(dev.planSeconds);
      const allowance = developerAllowance(dev, await developerComputeUsed(dev.developerId));
      const data = { ...dev, tier: tier.name, maxConcurrency: tier.maxConcurrency, computeUsedThisMonth: allowance.used, computeAvailable: allowance.available };
      return {
        data,
        text: [
          `Developer ${dev.developerId}`,
          `  plan: ${dev.planSeconds} s + pool ${dev.poolSeconds} s (${tier.name} tier, ${tier.maxConcurrency} concurrent runs)`,
          `  compute this month: ${allowance.used} s used, ${allowance.available} s available`,
        ].join('\n'),
      };
    },
  },
  'project create': {
    usage: 'project create --developer ID [--id ID]',
    async run(flags) {
      const o = parse({ developer: required('developer', Identifier), id: Identifier.optional() }, flags);
      const project = await createProject({ developerId: o.developer, projectId: o.id });
      return {
        data: { projectId: project.projectId, developerId: project.developerId, secret: project.secret },
        text: `Created project ${project.projectId} for developer ${project.developerId}\nprojectId: ${project.projectId}\nsecret:    ${project.secret}\nKeep the secret safe: it signs your users' tokens.`,
      };
    },
  },
  'project show': {
    usage: 'project show --project ID',
    async run(flags) {
      const o = parse({ project: required('project', Identifier) }, flags);
      const d = describeProject(await requireProject(o.project));
      return { data: d, text: JSON.stringify(d, null, 2) };
    },
  },
  'project rotate-secret': {
    usage: 'project rotate-secret --project ID',
    async run(flags) {
      const o = parse({ project: required('project', Identifier) }, flags);
      const project = await rotateProjectSecret(o.project);
      return {
        data: { projectId: project.projectId, secret: project.secret, rotatedAt: project.secretRotatedAt },
        text: `Rotated the secret of ${project.projectId}\nsecret: ${project.secret}\nTokens signed with the old secret stop working within a minute.`,
      };
    },
  },
  'project set-provider-key': {
    usage: 'project set-provider-key --project ID --provider openai|openrouter --key KEY',
    async run(flags) {
      const o = parse(
        {
          project: required('project', Identifier),
          provider: required('provider', z.enum(ProjectProvider.options, { error: '--provider must be openai or openrouter' })),
          key: required('key', z.string().min(1, '--key must not be empty')),
        },
        flags,
      );
      await setProviderKey(o.project, o.provider, o.key);
      return { data: { projectId: o.project, provider: o.provider, stored: true }, text: `Stored the ${o.provider} key of ${o.project} (encrypted; it is never shown again)` };
    },
  },
  'project set-pricing': {
    usage: 'project set-pricing --project ID --model M --input-usd-per-mtok X --output-usd-per-mtok Y [--cache-read-usd-per-mtok X] [--cache-write-usd-per-mtok X]',
    async run(flags) {
      const o = parse(
        {
          project: required('project', Identifier),
          model: required('model', z.string().min(1)),
          'input-usd-per-mtok': required('input-usd-per-mtok', usd('input-usd-per-mtok')),
          'output-usd-per-mtok': required('output-usd-per-mtok', usd('output-usd-per-mtok')),
          'cache-read-usd-per-mtok': usd('cache-read-usd-per-mtok').optional(),
          'cache-write-usd-per-mtok': usd('cache-write-usd-per-mtok').optional(),
        },
        flags,
      );
      const price = {
        inputUsdPerMtok: o['input-usd-per-mtok'],
        outputUsdPerMtok: o['output-usd-per-mtok'],
        ...(o['cache-read-usd-per-mtok'] !== undefined ? { cacheReadUsdPerMtok: o['cache-read-usd-per-mtok'] } : {}),
        ...(o['cache-write-usd-per-mtok'] !== undefined ? { cacheWriteUsdPerMtok: o['cache-write-usd-per-mtok'] } : {}),
      };
      await setModelPricing(o.project, o.model, price);
      return { data: { projectId: o.project, model: o.model, price }, text: `Priced ${o.model} for ${o.project}: $${price.inputUsdPerMtok}/Mtok in, $${price.outputUsdPerMtok}/Mtok out` };
    },
  },
  'token mint': {
    usage: 'token mint --project ID --user U --ai-microdollars N --compute-seconds N --window hour|day|week|month|lifetime [--expires-in 1h]',
    async run(flags) {
      const o = parse(
        {
          project: required('project', Identifier),
          user: required('user', Identifier),
          'ai-microdollars': required('ai-microdollars', count('ai-microdollars')),
          'compute-seconds': required('compute-seconds', count('compute-seconds')),
          window: required('window', WindowKind),
          'expires-in': z.string().default('1h'),
        },
        flags,
      );
      let expiresInSeconds: number;
      try {
        expiresInSeconds = parseDuration(o['expires-in']);
      } catch (err) {
        throw new UsageError(`--expires-in: ${(err as Error).message}`);
      }
      const project = await requireProject(o.project);
      const budget = { ai: o['ai-microdollars'], compute: o['compute-seconds'], window: o.window };
      const token = await mintToken({ projectId: project.projectId, userId: o.user, secret: project.secret, budget, expiresInSeconds });
      return { data: { token, projectId: project.projectId, userId: o.user, budget, expiresInSeconds }, text: token };
    },
  },
};
