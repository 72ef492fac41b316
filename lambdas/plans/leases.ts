import { randomUUID } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { LEASES_RETAIN_SECONDS, leaseRenewIntervalMs, leaseTtlMs } from '../config/timing.ts';
import { conditionalPut, conditionalUpdate, type StoredItem } from '../store/conditional.ts';
import { documentClient } from '../store/dynamo.ts';
import { expiresAfter } from '../store/epoch.ts';
import { ticker, type Ticker } from '../scheduling/watch.ts';

/**
 * Concurrency leases (docs/contract.md, "Concurrency leases"): a developer may run at most their tier's number of
 * /prompt runs, executing vessels and /ws turns at once, across all of their projects.
 *
 * The usage ledger's shape (budgets/ledger.ts), for the same reasons: one item per developer in the leases table
 * holds
 *   held     the number of leases in `leases` (a condition expression cannot count a map's entries)
 *   leases   the leases by id: { sessionId, userId, projectId, kind, startedAt, expiresAt } (epoch milliseconds)
 * and every change is one conditional UpdateItem, which DynamoDB serialises:
 *   acquire  admits only while held < max, then adds the lease              → never more than the tier, at any concurrency
 *   renew    only while the lease exists, is unexpired and names the holder  → an expired or foreign lease cannot revive
 *   release  only while the lease exists and names the holder               → idempotent
 *   sweep    removes leases past their expiry, through the same conditional
 * An expired lease stops counting the moment it expires: an acquisition that finds no room sweeps the expired leases
 * it saw and tries again, so a crashed holder frees its slot within a lease's length (leaseTtlMs) without anyone's help.
 */

export type RunKind = 'prompt' | 'vessel' | 'ws';

/** What a lease says about its holder. */
export interface LeaseHolder {
  /** The run's id: a /prompt run's, a vessel's (its vesselId) or a /ws session's. */
  sessionId: string;
  userId: string;
  projectId: string;
  kind: RunKind;
}

/** A held lease: plain JSON, so another process can renew or release it. */
export interface Lease extends LeaseHolder {
  leaseId: string;
  developerId: string;
  /** Epoch milliseconds. */
  startedAt: number;
  expiresAt: number;
}

/** A live lease as the 429 body reports it (to a caller of the project that holds it) and `developer show` lists it. */
export interface LiveLease {
  sessionId: string;
  userId: string;
  ageMs: number;
}

/** A live lease and the project holding it: the 429 shows a lease's ids only to that project (plans/admission.ts). */
export interface HeldLease extends LiveLease {
  projectId: string;
}

export type AcquireResult = { ok: true; lease: Lease } | { ok: false; live: HeldLease[]; max: number };

const table = () => env().LEASES_TABLE;
const keyOf = (developerId: string) => ({ pk: `leases#${developerId}`, sk: 'leases' });

type StoredLease = LeaseHolder & { startedAt: number; expiresAt: number };

function leasesOf(item: StoredItem | undefined): [string, StoredLease][] {
  return Object.entries((item?.leases ?? {}) as Record<string, StoredLease>);
}

/** A lease stops counting the moment its expiry is reached. */
const expired = (lease: StoredLease, now: Date) => lease.expiresAt <= now.getTime();

function liveOf(item: StoredItem | undefined, now: Date): HeldLease[] {
  return leasesOf(item)
    .filter(([, l]) => !expired(l, now))
    .sort(([, a], [, b]) => a.startedAt - b.startedAt)
    .map(([, l]) => ({ sessionId: l.sessionId, userId: l.userId, ageMs: Math.max(0, now.getTime() - l.startedAt), projectId: l.projectId }));
}

async function ensureItem(developerId: string, now: Date): Promise<void> {
  // Losing the race to another creator is fine: the item exists either way.
  await conditionalPut({
    TableName: table(),
    Item: { ...keyOf(developerId), developerId, held: 0, leases: {}, expiresAt: expiresAfter(now, LEASES_RETAIN_SECONDS) },
    ConditionExpression: 'attribute_not_exists(pk)',
  });
}

/**
 * Takes a lease for `holder` if the developer holds fewer than `max` live leases; otherwise says which leases are
 * live. `max` is the tier's, decided by the caller at this moment (plans/admission.ts).
 */
export async function acquireLease(developerId: string, holder: LeaseHolder, max: number, now = new Date(clock.now())): Promise<AcquireResult> {
  const leaseId = randomUUID();
  const lease: Lease = { ...holder, leaseId, developerId, startedAt: now.getTime(), expiresAt: now.getTime() + leaseTtlMs() };
  const stored: StoredLease = {
    sessionId: holder.sessionId,
    userId: holder.userId,
    projectId: holder.projectId,
    kind: holder.kind,
    startedAt: lease.startedAt,
    expiresAt: lease.expiresAt,
  };
  let swept = false;
  for (let attempt = 0; attempt < 3; attempt++) {
    const out = await conditionalUpdate({
      TableName: table(),
      Key: keyOf(developerId),
      UpdateExpression: 'SET leases.#id = :lease, expiresAt = :ttl ADD held :one',
      // The lease's own key too: an acquire the SDK sends again after its answer was lost must not count twice, even
      // when another write came in between; its own lease in `seen` is then this acquire's success (store/conditional.ts).
      ConditionExpression: 'attribute_exists(leases) AND attribute_not_exists(leases.#id) AND held < :max',
      ExpressionAttributeNames: { '#id': leaseId },
      ExpressionAttributeValues: { ':lease': stored, ':one': 1, ':max': max, ':ttl': expiresAfter(now, LEASES_RETAIN_SECONDS) },
    });
    if (out.ok || leasesOf(out.seen).some(([id]) => id === leaseId)) return { ok: true, lease };
    if (!out.seen) {
      await ensureItem(developerId, now);
      continue;
    }
    // Expired leases are swept only when they stand in the way: the hot path stays one write.
    if (!swept && leasesOf(out.seen).some(([, l]) => expired(l, now))) {
      swept = true;
      await sweepExpired(developerId, out.seen, now);
      continue;
    }
    return { ok: false, live: liveOf(out.seen, now), max };
  }
  // Only reachable when the item keeps vanishing or expired leases keep reappearing: report what is there now.
  return { ok: false, live: liveOf(await readLeases(developerId), now), max };
}

/**
 * Removes the leases of `item` that had expired at `now`, each only if it is still the expired lease that was seen
 * (a lease renewed meanwhile stays). Returns how many this call removed.
 */
async function sweepExpired(developerId: string, item: StoredItem | undefined, now: Date): Promise<number> {
  let removed = 0;
  for (const [id] of leasesOf(item).filter(([, l]) => expired(l, now))) {
    if (await removeLease(developerId, id, 'leases.#id.expiresAt <= :now', { ':now': now.getTime() })) removed++;
  }
  return removed;
}

/** Removes one lease (and its count) if it exists and `condition` holds of it; true when this call removed it. */
async function removeLease(developerId: string, leaseId: string, condition: string, values: Record<string, unknown>): Promise<boolean> {
  const out = await conditionalUpdate({
    TableName: table(),
    Key: keyOf(developerId),
    UpdateExpression: 'REMOVE leases.#id ADD held :minusOne',
    ConditionExpression: `attribute_exists(leases.#id) AND ${condition}`,
    ExpressionAttributeNames: { '#id': leaseId },
    ExpressionAttributeValues: { ':minusOne': -1, ...values },
  });
  return out.ok;
}

export type RenewResult = { ok: true; lease: Lease } | { ok: false; reason: 'expired' | 'not_held' };

/** Extends a live lease held by `lease.sessionId` to a lease's length (leaseTtlMs) from `now`. An expired or foreign lease is refused. */
export async function renewLease(lease: Lease, now = new Date(clock.now())): Promise<RenewResult> {
  const expiresAt = now.getTime() + leaseTtlMs();
  const out = await conditionalUpdate({
    TableName: table(),
    Key: keyOf(lease.developerId),
    UpdateExpression: 'SET leases.#id.expiresAt = :exp, expiresAt = :ttl',
    ConditionExpression: 'attribute_exists(leases.#id) AND leases.#id.sessionId = :session AND leases.#id.expiresAt > :now',
    ExpressionAttributeNames: { '#id': lease.leaseId },
    ExpressionAttributeValues: { ':exp': expiresAt, ':session': lease.sessionId, ':now': now.getTime(), ':ttl': expiresAfter(now, LEASES_RETAIN_SECONDS) },
  });
  if (out.ok) return { ok: true, lease: { ...lease, expiresAt } };
  const seen = leasesOf(out.seen).find(([id]) => id === lease.leaseId)?.[1];
  return { ok: false, reason: seen && seen.sessionId === lease.sessionId ? 'expired' : 'not_held' };
}

/**
 * Removes the lease. Removing twice, or after the lease expired and was swept, changes nothing. It tells no one: a
 * run gives its lease back with `giveBackLease`.
 */
export async function releaseLease(lease: Lease): Promise<{ released: boolean }> {
  return { released: await removeLease(lease.developerId, lease.leaseId, 'leases.#id.sessionId = :session', { ':session': lease.sessionId }) };
}

/** Called with the developer whose slot a run has just given back. Awaited; it must not throw. */
export type CapacityListener = (developerId: string) => Promise<unknown>;

const capacityListeners = new Set<CapacityListener>();

/**
 * Registers who waits for a developer's capacity: the vessels parked for a slot (vessels/park.ts registers their wake
 * when it is loaded). A registration, not an import, because vessels import plans. Every function that runs agents
 * loads park.ts from its entry, as its manifest entry's access to the vessels table and the run queue says
 * (test/plans/capacity.test.ts checks that each does). Returns what removes the listener again.
 */
export function onCapacityFreed(listener: CapacityListener): () => void {
  capacityListeners.add(listener);
  return () => capacityListeners.delete(listener);
}

/** How many listeners wait for capacity in this process (for the check that every run's function has them). */
export const capacityListenerCount = () => capacityListeners.size;

/**
 * Gives a run's lease back: removes it, then tells whoever waits for the developer's capacity (`onCapacityFreed`), so
 * no caller of the agent runtime has to remember to. They are told even when the lease was no longer there: one that
 * lapsed freed its slot too.
 */
export async function giveBackLease(lease: Lease): Promise<{ released: boolean }> {
  const out = await releaseLease(lease);
  await Promise.allSettled([...capacityListeners].map((listener) => listener(lease.developerId)));
  return out;
}

/** The developer's live leases, oldest first (for the 429 body and `developer show`). */
export async function liveLeases(developerId: string, now = new Date(clock.now())): Promise<LiveLease[]> {
  return liveOf(await readLeases(developerId), now).map(({ sessionId, userId, ageMs }) => ({ sessionId, userId, ageMs }));
}

async function readLeases(developerId: string): Promise<StoredItem | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: keyOf(developerId), ConsistentRead: true }));
  return out.Item;
}

/**
 * Renews a lease every leaseRenewIntervalMs() while its run lives. When a renewal is refused (the lease expired —
 * the process stalled for a lease's length — or was taken away), `onLost` is called once and renewing stops; a renewal that
 * fails on the store's side is retried at the next turn. The renewals ride on the run's `ticker` when it has one (the
 * watch of a vessel or a /ws turn: one timer per run), else on one of their own. `stop` ends the renewals (release
 * the lease separately).
 */
export function keepLeaseAlive(
  lease: Lease,
  opts: { onLost?: (reason: 'expired' | 'not_held') => void; intervalMs?: number; ticker?: Ticker } = {},
): { stop(): void; current(): Lease } {
  const intervalMs = opts.intervalMs ?? leaseRenewIntervalMs();
  let current = lease;
  const own = opts.ticker ? undefined : ticker(intervalMs);
  const stop = () => {
    renewals.stop();
    own?.stop();
  };
  const renewals = (opts.ticker ?? own!).every(intervalMs, async () => {
    try {
      const result = await renewLease(current);
      if (result.ok) current = result.lease;
      else {
        stop();
        opts.onLost?.(result.reason);
      }
    } catch {
      // The store did not answer: the next turn tries again, well within the lease's life.
    }
  });
  return { stop, current: () => current };
}
