import { env } from '../config/env.ts';
import type { ModelPrices } from './model.ts';
import { recordCache } from './record-cache.ts';
import { getDeploymentPricing } from './registry.ts';

/**
 * The deployment-wide prices (`gateway pricing set`), read on the hot path of every metered call and every
 * `GET /v1/models`, kept per instance exactly as a project record is (recordCache, record-cache.ts): trusted for
 * SECRET_CACHE_SECONDS, so a burst of requests costs at most one registry read per cache time. A caller about to refuse
 * a model for want of a price asks for `refresh`: the item is read again, at most once per PROJECT_REFRESH_INTERVAL_MS,
 * and concurrent reads share one request — so a price just set is used at once, and a flood of requests for a model
 * nobody priced stays one read a second.
 *
 * Kept by registry table, so gateways on different tables in one process (tests) never see each other's prices.
 */
const byTable = recordCache(() => getDeploymentPricing());

export function cachedDeploymentPricing(opts: { refresh?: boolean } = {}, now?: number): Promise<ModelPrices> {
  return byTable(env().REGISTRY_TABLE, opts, now);
}
