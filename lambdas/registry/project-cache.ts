import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { PROJECT_REFRESH_INTERVAL_MS } from '../config/timing.ts';
import { onInstanceReset } from '../instance/state.ts';
import type { Project } from './model.ts';
import { getProject } from './registry.ts';

/**
 * Projects read on the hot path (every token verification) are kept for SECRET_CACHE_SECONDS per instance (the
 * local runtime: 1 s), so a burst of requests costs one registry read. Unknown projects are remembered too, so
 * garbage issuers cannot hammer the table.
 *
 * A cached answer can be stale in the one way that refuses a good request: a secret just rotated, a provider key or
 * price just set, a project created after its id was probed. Callers that are about to refuse for such a reason ask
 * for `refresh`; the record is then read again, but at most once per PROJECT_REFRESH_INTERVAL_MS per project, and concurrent
 * reads of one project share one request — a flood of bad tokens stays one read a second (docs/contract.md).
 */
const MAX_ENTRIES = 10_000;

interface Entry {
  project: Project | undefined;
  readAt: number;
}

const cache = new Map<string, Entry>();
const inFlight = new Map<string, Promise<Project | undefined>>();

export async function cachedProject(projectId: string, opts: { refresh?: boolean } = {}, now = clock.now()): Promise<Project | undefined> {
  const hit = cache.get(projectId);
  if (hit) {
    const fresh = now - hit.readAt < env().SECRET_CACHE_SECONDS * 1000;
    const mayRefresh = opts.refresh && now - hit.readAt >= PROJECT_REFRESH_INTERVAL_MS;
    if (fresh && !mayRefresh) return hit.project;
  }
  let pending = inFlight.get(projectId);
  if (!pending) {
    pending = getProject(projectId)
      .then((project) => {
        cache.delete(projectId);
        cache.set(projectId, { project, readAt: now });
        if (cache.size > MAX_ENTRIES) cache.delete(cache.keys().next().value!);
        return project;
      })
      .finally(() => inFlight.delete(projectId));
    inFlight.set(projectId, pending);
  }
  return pending;
}

onInstanceReset(() => cache.clear());

/** The SecretLookup tokens are verified with. */
export const projectSecret = async (projectId: string, opts?: { refresh?: boolean }) => (await cachedProject(projectId, opts))?.secret;
