import type { Project } from './model.ts';
import { recordCache } from './record-cache.ts';
import { getProject } from './registry.ts';

/**
 * Projects read on the hot path (every token verification), kept per instance by recordCache (record-cache.ts: trusted
 * for SECRET_CACHE_SECONDS, the local runtime 1 s; read again on `refresh` at most once per
 * PROJECT_REFRESH_INTERVAL_MS). Unknown projects are remembered too, so garbage issuers cannot hammer the table.
 *
 * A cached answer can be stale in the one way that refuses a good request: a secret just rotated, a provider key or
 * price just set, a project created after its id was probed. Callers that are about to refuse for such a reason ask
 * for `refresh` — a flood of bad tokens stays one read a second (docs/contract.md).
 */
const MAX_ENTRIES = 10_000;

export const cachedProject: (projectId: string, opts?: { refresh?: boolean }, now?: number) => Promise<Project | undefined> = recordCache(
  getProject,
  MAX_ENTRIES,
);

/** The SecretLookup tokens are verified with. */
export const projectSecret = async (projectId: string, opts?: { refresh?: boolean }) => (await cachedProject(projectId, opts))?.secret;
