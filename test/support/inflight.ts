import type { RecordedRequest, SimulatedUpstream } from '../../bin/local/upstreams/types.ts';

/**
 * What a simulated upstream saw in flight, measured on the upstream's side — independently of the gateway's own
 * bookkeeping (leases, vessel states). Every request the upstream records is stamped when it arrives (the upstream
 * records a request once its body is read, before it answers) and when its exchange ends (the upstream sets
 * `outcome` when the response closes, whole or cut); requests are grouped by a key read from the request (e.g. a tag
 * in the message), so each group's concurrency is exact, not sampled.
 */
export interface InFlightGroup {
  /** Requests of the group in flight now. */
  now: number;
  /** The most in flight at once so far. */
  max: number;
  /** Requests seen so far. */
  total: number;
  /** Requests whose exchange has ended. */
  ended: number;
}

export interface InFlightInterval {
  key: string;
  /** The whole tag the request carried (e.g. the vessel's own tag). */
  tag: string;
  start: number;
  end?: number;
  outcome?: RecordedRequest['outcome'];
}

export interface InFlightTracker {
  group(key: string): InFlightGroup;
  /** Every tagged request, in arrival order. */
  intervals: InFlightInterval[];
  /** The most requests carrying the same tag that were ever in flight at once, and which tag. */
  maxPerTag(): { tag: string | undefined; max: number };
  stop(): void;
}

/**
 * Tracks the requests of `upstream` that `tagOf` tags: `tagOf` returns `{key, tag}` (the group a request counts in,
 * and its own tag) or undefined for a request to ignore. Install it before the requests come.
 */
export function trackInFlight(upstream: SimulatedUpstream, tagOf: (r: RecordedRequest) => { key: string; tag: string } | undefined): InFlightTracker {
  const groups = new Map<string, InFlightGroup>();
  const perTag = new Map<string, { now: number; max: number }>();
  const intervals: InFlightInterval[] = [];
  const group = (key: string) => {
    let g = groups.get(key);
    if (!g) {
      g = { now: 0, max: 0, total: 0, ended: 0 };
      groups.set(key, g);
    }
    return g;
  };
  const requests = upstream.requests;
  const push = requests.push;
  let active = true;
  requests.push = function (...records: RecordedRequest[]): number {
    if (active) for (const r of records) watch(r);
    return push.apply(this, records);
  };
  function watch(r: RecordedRequest) {
    const tagged = tagOf(r);
    if (!tagged) return;
    const g = group(tagged.key);
    const t = perTag.get(tagged.tag) ?? { now: 0, max: 0 };
    perTag.set(tagged.tag, t);
    const interval: InFlightInterval = { key: tagged.key, tag: tagged.tag, start: performance.now() };
    intervals.push(interval);
    g.now++;
    g.total++;
    g.max = Math.max(g.max, g.now);
    t.now++;
    t.max = Math.max(t.max, t.now);
    let outcome: RecordedRequest['outcome'];
    Object.defineProperty(r, 'outcome', {
      enumerable: true,
      configurable: true,
      get: () => outcome,
      set: (value: RecordedRequest['outcome']) => {
        if (outcome === undefined && value !== undefined) {
          g.now--;
          g.ended++;
          t.now--;
          interval.end = performance.now();
          interval.outcome = value;
        }
        outcome = value;
      },
    });
  }
  return {
    group,
    intervals,
    maxPerTag() {
      let best: { tag: string | undefined; max: number } = { tag: undefined, max: 0 };
      for (const [tag, t] of perTag) if (t.max > best.max) best = { tag, max: t.max };
      return best;
    },
    stop() {
      active = false;
      requests.push = push;
    },
  };
}

/** The text of a recorded Messages API request (system and messages), to find a tag in. */
export function requestText(r: RecordedRequest): string {
  return r.method === 'POST' && r.path === '/v1/messages' ? JSON.stringify(r.body ?? '') : '';
}
