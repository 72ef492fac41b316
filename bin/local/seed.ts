import { chmodSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { PROVIDERS_WITH_PROJECT_KEYS, type ProjectProvider } from '../../lambdas/registry/model.ts';
import {
  createDeveloper,
  createProject,
  getDeveloper,
  getProject,
  providerKeyFor,
  removeProviderKey,
  setProviderKey,
} from '../../lambdas/registry/registry.ts';

export const DEV_DEVELOPER = 'dev';
export const DEV_PROJECT = 'dev-project';
export const DEV_USER = 'dev-user';
const DEV_BUDGET: BudgetClaim = { ai: 5_000_000, compute: 3_600, window: 'day' };

/** What the development project holds as its OpenAI/OpenRouter key while the upstreams are simulated. */
export const placeholderKey = (provider: ProjectProvider) => `sk-simulated-${provider}`;

/**
 * On first start: a development developer and project. Every start: a fresh 30-day token for them. With simulated
 * upstreams the project gets placeholder OpenAI and OpenRouter keys (the simulators accept any key), so GPT and
 * OpenRouter model names work out of the box; against real upstreams those placeholders are removed again, so a
 * real provider is never sent one. Keys the developer set are never touched.
 */
export async function ensureDevelopmentProject(opts: { simulated: boolean }) {
  let created = false;
  if (!(await getDeveloper(DEV_DEVELOPER))) {
    await createDeveloper({ developerId: DEV_DEVELOPER, planSeconds: 3_600_000 });
    created = true;
  }
  const project = (await getProject(DEV_PROJECT)) ?? (await createProject({ developerId: DEV_DEVELOPER, projectId: DEV_PROJECT }));
  for (const provider of PROVIDERS_WITH_PROJECT_KEYS) {
    const key = await providerKeyFor(project, provider);
    if (opts.simulated && !key) await setProviderKey(project.projectId, provider, placeholderKey(provider));
    if (!opts.simulated && key === placeholderKey(provider)) await removeProviderKey(project.projectId, provider);
  }
  const token = await mintToken({ projectId: project.projectId, userId: DEV_USER, secret: project.secret, budget: DEV_BUDGET, expiresInSeconds: 30 * 86_400 });
  const tokenFile = join(resolve(process.env.DATA_DIR ?? '.data'), 'dev-token.txt');
  writeFileSync(tokenFile, `${token}\n`, { mode: 0o600 });
  // `mode` applies only when the file is created; one left by an earlier version may be readable by others.
  chmodSync(tokenFile, 0o600);
  return { created, developerId: DEV_DEVELOPER, projectId: project.projectId, userId: DEV_USER, budget: DEV_BUDGET, token };
}
