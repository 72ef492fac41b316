import { env } from '../config/env.ts';
import type { Project } from './model.ts';
import { getProject } from './registry.ts';

/**
 * Projects read on the hot path (every token verification) are kept for SECRET_CACHE_SECONDS per instance, so a
 * burst of requests costs one registry read. A rotated secret takes effect within that time.
 */
const cache = new Map<string, { project: Project | undefined; until: number }>();

export async function cachedProject(projectId: string, now = Date.now()): Promise<Project | undefined> {
  const hit = cache.get(projectId);
  if (hit && hit.until > now) return hit.project;
  const project = await getProject(projectId);
  // Unknown projects are remembered too, briefly, so garbage issuers cannot hammer the table.
  cache.set(projectId, { project, until: now + env().SECRET_CACHE_SECONDS * 1000 });
  if (cache.size > 10_000) cache.delete(cache.keys().next().value!);
  return project;
}

export function clearProjectCache(): void {
  cache.clear();
}

/** The SecretLookup tokens are verified with. */
export const projectSecret = async (projectId: string) => (await cachedProject(projectId))?.secret;
