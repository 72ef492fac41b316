import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { createDeveloper, createProject, getDeveloper, getProject } from '../../lambdas/registry/registry.ts';

export const DEV_DEVELOPER = 'dev';
export const DEV_PROJECT = 'dev-project';
export const DEV_USER = 'dev-user';
const DEV_BUDGET: BudgetClaim = { ai: 5_000_000, compute: 3_600, window: 'day' };

/** On first start: a development developer and project. Every start: a fresh 30-day token for them. */
export async function ensureDevelopmentProject() {
  let created = false;
  if (!(await getDeveloper(DEV_DEVELOPER))) {
    await createDeveloper({ developerId: DEV_DEVELOPER, planSeconds: 3_600_000 });
    created = true;
  }
  const project = (await getProject(DEV_PROJECT)) ?? (await createProject({ developerId: DEV_DEVELOPER, projectId: DEV_PROJECT }));
  const token = await mintToken({ projectId: project.projectId, userId: DEV_USER, secret: project.secret, budget: DEV_BUDGET, expiresInSeconds: 30 * 86_400 });
  writeFileSync(join(resolve(process.env.DATA_DIR ?? '.data'), 'dev-token.txt'), `${token}\n`, { mode: 0o600 });
  return { created, developerId: DEV_DEVELOPER, projectId: project.projectId, userId: DEV_USER, budget: DEV_BUDGET, token };
}
