import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { PROJECT_REFRESH_INTERVAL_MS } from '../config/timing.ts';
import { onInstanceReset } from '../instance/state.ts';
import type { ModelPrices } from './model.ts';
import { getDeploymentPricing } from './registry.ts';

/**
 * The deployment-wide prices (`gateway pricing set`), read on the hot path of every metered call and every
 * `GET /v1/models`, kept per instance exactly as a project record is (registry/project-cache.ts): trusted for
 * SECRET_CACHE_SECONDS, so a burst of requests costs at most one registry read per cache time. A caller about to refuse
 * a model for want of a price asks for `refresh`: the item is read again, at most once per PROJECT_REFRESH_INTERVAL_MS,
 * and concurrent reads share one request — so a price just set is used at once, and a flood of requests for a model
 * nobody priced stays one read a second.
 *
 * Kept by registry table, so gateways on different tables in one process (tests) never see each other's prices.
 */
interface Entry {
  pricing: ModelPrices;
  readAt: number;
}

const cache = new Map<string, Entry>();
const inFlight = new Map<string, Promise<ModelPrices>>();

export async function cachedDeploymentPricing(opts: { refresh?: boolean } = {}, now = clock.now()): Promise<ModelPrices> {
  const table = env().REGISTRY_TABLE;
  const hit = cache.get(table);
  if (hit) {
    const fresh = now - hit.readAt < env().SECRET_CACHE_SECONDS * 1000;
    const mayRefresh = opts.refresh && now - hit.readAt >= PROJECT_REFRESH_INTERVAL_MS;
    if (fresh && !mayRefresh) return hit.pricing;
  }
  let pending = inFlight.get(table);
  if (!pending) {
    pending = getDeploymentPricing()
      .then((pricing) => {
        cache.set(table, { pricing, readAt: now });
        return pricing;
      })
      .finally(() => inFlight.delete(table));
    inFlight.set(table, pending);
  }
  return pending;
}

onInstanceReset(() => cache.clear());
