import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { PROJECT_REFRESH_INTERVAL_MS } from '../config/timing.ts';
import { onInstanceReset } from '../instance/state.ts';

/**
 * A registry record read on the hot path, kept per instance (docs/contract.md): trusted for SECRET_CACHE_SECONDS, so a
 * burst of requests costs one registry read. A caller about to refuse because the record may be stale (a secret just
 * rotated, a key or price just set) asks for `refresh`: the record is read again, but at most once per
 * PROJECT_REFRESH_INTERVAL_MS per key, and concurrent reads of one key share one request — a flood of requests that
 * would be refused stays one read a second. Absent records are remembered too. At most `maxEntries` keys are kept
 * (the oldest read goes first). The project records and the deployment-wide prices are both kept this way.
 */
export function recordCache<T>(read: (key: string) => Promise<T>, maxEntries = Number.POSITIVE_INFINITY) {
  const cache = new Map<string, { value: T; readAt: number }>();
  const inFlight = new Map<string, Promise<T>>();
  onInstanceReset(() => cache.clear());
  return async (key: string, opts: { refresh?: boolean } = {}, now = clock.now()): Promise<T> => {
    const hit = cache.get(key);
    if (hit) {
      const fresh = now - hit.readAt < env().SECRET_CACHE_SECONDS * 1000;
      const mayRefresh = opts.refresh && now - hit.readAt >= PROJECT_REFRESH_INTERVAL_MS;
      if (fresh && !mayRefresh) return hit.value;
    }
    let pending = inFlight.get(key);
    if (!pending) {
      pending = read(key)
        .then((value) => {
          cache.delete(key);
          cache.set(key, { value, readAt: now });
          if (cache.size > maxEntries) cache.delete(cache.keys().next().value!);
          return value;
        })
        .finally(() => inFlight.delete(key));
      inFlight.set(key, pending);
    }
    return pending;
  };
}
