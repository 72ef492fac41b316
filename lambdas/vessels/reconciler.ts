import { randomUUID } from 'node:crypto';
import pLimit from 'p-limit';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { parkCheckMs } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { VESSELS_RECONCILE_INDEX } from '../store/tables.ts';
import { dueItems } from '../store/due.ts';
import { endVessel, handOff } from './end.ts';
import { endedWithoutRun, type StoredVessel } from './record.ts';
import { isWaiting, VesselStates } from './states.ts';
import { RECONCILE_SHARDS, redriveAt, touchVessel } from './store.ts';
import { delayUntil } from '../scheduling/delay.ts';
import { sendRunMessage } from './trigger.ts';
import { wakeVessel } from './park.ts';
import { sendWebhookMessage } from '../deliveries/message.ts';
import { getDeveloper } from '../registry/registry.ts';
import { liveLeases } from '../plans/leases.ts';
import { tierFor } from '../plans/tiers.ts';

/**
 * The table is the source of truth, the queue only a trigger (docs/incubate.md, "The table is the source of truth"): every vessel that still needs watching
 * sits in the table's `reconcile` index with the moment it should have moved by (`reconcileAt`). Each minute in AWS
 * (and at start-up and periodically in the local runtime) the reconciler takes the ones whose moment has passed:
 * - parked for capacity past its check time: woken if its developer has a free slot now (a slot freed by a run that
 *   died woke nobody), else checked again a lease's length later (parkCheckMs);
 * - waiting (PENDING/QUEUED) and due, yet not started: its trigger was lost (a message dropped, a schedule that never
 *   fired, a crashed local runtime) → re-driven with a new trigger, which makes any old message stale;
 * - EXECUTING whose execution stopped renewing it (its executor died, or its end could not be written): FAILED,
 *   never run again (a vessel runs at most once: see below); canceled if a cancel was waiting for it;
 * - ended with a callback not yet handed to the webhook queue → handed off;
 * - ended with a webhook delivery still pending whose next attempt is overdue (its message was lost) → that attempt
 *   asked for again (docs/webhooks.md); a settled delivery leaves the index.
 * Every action is a conditional write on what was read, so a vessel that moved meanwhile is left alone.
 */

/** The text of a vessel whose execution stopped before it wrote its end. */
export const INTERRUPTED_TEXT =
  'The run was interrupted: its execution stopped before it stored its end (the executor died, or its end could not be written). ' +
  'A vessel runs at most once, so it is not run again; what its run used has been charged';
const CONCURRENCY = 8;
/** One invocation handles at most this many vessels per shard; the rest are next minute's. */
const PAGE_LIMIT = 500;

export interface ReconcileReport {
  redriven: number;
  /** EXECUTING vessels whose execution stopped before it wrote its end: FAILED, never run again. */
  failed: number;
  canceled: number;
  handedOff: number;
  /** Pending webhook deliveries whose next attempt was overdue, asked for again. */
  deliveriesRedriven: number;
}

export async function reconcileVessels(now = new Date(clock.now())): Promise<ReconcileReport> {
  const report: ReconcileReport = { redriven: 0, failed: 0, canceled: 0, handedOff: 0, deliveriesRedriven: 0 };
  const rooms = freeSlots();
  for (let shard = 0; shard < RECONCILE_SHARDS; shard++) {
    const due = await dueItems<StoredVessel>({
      table: env().VESSELS_TABLE,
      index: VESSELS_RECONCILE_INDEX,
      shardAttribute: 'reconcileShard',
      shard: String(shard),
      dueAttribute: 'reconcileAt',
      now: now.getTime(),
      limit: PAGE_LIMIT,
    });
    // Each vessel catches its own failure: the round goes on past one.
    await pLimit(CONCURRENCY).map(due, async (v) => {
      try {
        const action = await reconcileOne(v, now, rooms);
        if (action) report[action]++;
      } catch (err) {
        logger.error('reconciling a vessel failed; next round retries', { vesselId: v.vesselId, error: err as Error });
      }
    });
  }
  const acted = Object.values(report).reduce((a, b) => a + b, 0);
  emit('VesselsReconciled', acted);
  if (acted > 0) logger.info('vessels reconciled', { ...report });
  return report;
}

type Action = keyof ReconcileReport;

interface FreeSlots {
  /** Takes one of the developer's free slots for a parked vessel; false when none is free. */
  take(developerId: string, now: Date): Promise<boolean>;
}

/** Each developer's free slots (tier − live leases), read once per reconciler run and counted down as vessels wake. */
function freeSlots(): FreeSlots {
  const slots = new Map<string, Promise<{ free: number }>>();
  const read = async (developerId: string, now: Date) => {
    const developer = await getDeveloper(developerId);
    if (!developer) return { free: 0 };
    return { free: Math.max(0, tierFor(developer.planSeconds).maxConcurrency - (await liveLeases(developerId, now)).length) };
  };
  return {
    async take(developerId, now) {
      let entry = slots.get(developerId);
      if (!entry) {
        entry = read(developerId, now);
        slots.set(developerId, entry);
      }
      const counted = await entry;
      // Counted down synchronously after the await: concurrent takes never share a slot.
      if (counted.free <= 0) return false;
      counted.free--;
      return true;
    },
  };
}

async function reconcileOne(v: StoredVessel, now: Date, rooms: FreeSlots): Promise<Action | undefined> {
  const late = { expression: 'reconcileAt <= :now', values: { ':now': now.getTime() } };
  const nextLook = redriveAt(now.getTime());

  if (VesselStates.isTerminal(v.status)) {
    if (v.callback && v.callbackHandedOffAt === undefined) {
      if (!(await handOff(v))) return undefined;
      // Watched on while the delivery is pending — unless the sender has settled it already (and left the index).
      await touchVessel(v.vesselId, { status: v.status, when: { expression: 'attribute_exists(reconcileShard)', values: {} }, set: { reconcileAt: nextLook } });
      return 'handedOff';
    }
    if (v.callback && v.webhook?.status === 'pending') {
      // The next attempt is overdue: its message was lost (a local runtime killed with its in-memory queue, a
      // schedule that never fired). The attempt after the last one made is asked for again; the sender's claim makes
      // a duplicate harmless.
      const moved = await touchVessel(v.vesselId, { status: v.status, when: late, set: { reconcileAt: nextLook } });
      if (!moved.ok) return undefined;
      await sendWebhookMessage({ vesselId: v.vesselId, round: v.webhook.round, attempt: v.webhook.tried + 1 });
      return 'deliveriesRedriven';
    }
    // Settled (or nothing to deliver): no longer watched.
    await touchVessel(v.vesselId, { status: v.status, when: late, set: {}, remove: ['reconcileShard', 'reconcileAt'] });
    return undefined;
  }

  if (isWaiting(v.status) && v.parkedFor) {
    // Parked for capacity and not woken in time: wake it if its developer has room now, else look again later.
    if (await rooms.take(v.parkedFor, now)) return (await wakeVessel(v, now)) ? 'redriven' : undefined;
    await touchVessel(v.vesselId, {
      status: 'QUEUED',
      when: { expression: `parkedFor = :dev AND ${late.expression}`, values: { ':dev': v.parkedFor, ...late.values } },
      set: { reconcileAt: now.getTime() + parkCheckMs() },
    });
    return undefined;
  }

  if (isWaiting(v.status)) {
    const driveId = randomUUID();
    const moved = await touchVessel(v.vesselId, {
      status: v.status,
      when: { expression: `driveId = :drive AND ${late.expression}`, values: { ':drive': v.driveId, ...late.values } },
      set: { driveId, reconcileAt: Math.max(nextLook, redriveAt(v.scheduledFor)) },
      now,
    });
    if (!moved.ok) return undefined;
    await sendRunMessage({ vesselId: v.vesselId, driveId }, delayUntil(v.scheduledFor, now));
    return 'redriven';
  }

  // EXECUTING, and its execution has not renewed it in time: the execution is gone (its executor died, lost its lease,
  // or could not store its end). It is ended, never run again: a vessel runs at most once (docs/incubate.md, "The
  // table is the source of truth"). Every execution has been charged by the time it is EXECUTING — its admission held
  // the compute it may use, and a hold it never settled is charged by the ledger's sweep at its held amount
  // (docs/contract.md, "Abandoned reservations") — and it may have run its model calls to the end before it died or
  // its end write failed, which nothing written before that end can tell apart from a run cut short. A second run
  // would charge the user again for a result they may already have been charged for; so it is FAILED, with a text
  // that says so, and the user decides whether to queue it again.
  const ownedBy = { expression: `runId = :run AND ${late.expression}`, values: { ':run': v.runId, ...late.values } };
  if (v.cancelRequested) {
    const ended = await endVessel(v, {
      to: 'CANCELED',
      from: 'EXECUTING',
      when: ownedBy,
      output: endedWithoutRun('canceled', 'The vessel was canceled while it ran'),
      now,
    });
    return ended ? 'canceled' : undefined;
  }
  const ended = await endVessel(v, {
    to: 'FAILED',
    from: 'EXECUTING',
    when: ownedBy,
    output: endedWithoutRun('error_during_execution', INTERRUPTED_TEXT),
    now,
  });
  return ended ? 'failed' : undefined;
}
