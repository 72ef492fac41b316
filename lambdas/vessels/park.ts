import { randomUUID } from 'node:crypto';
import { QueryCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { parkCheckMs } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import { onCapacityFreed } from '../plans/leases.ts';
import { documentClient } from '../store/dynamo.ts';
import { VESSELS_PARKED_INDEX } from '../store/tables.ts';
import type { StoredVessel } from './record.ts';
import { moveVessel, redriveAt, touchVessel, type VesselWrite } from './store.ts';
import { sendRunMessage } from './trigger.ts';

/**
 * Waiting for capacity without a message in the queue (docs/incubate.md, "Execution"). A due vessel that finds every
 * slot of its developer taken is **parked**: QUEUED, in the table's `parked` index under its developer, in the order
 * it started waiting — and nothing of it stays in the run queue, so a developer with a thousand waiting vessels does
 * not crowd the queue every other developer's vessels go through. Whenever a run of the developer ends and gives its
 * lease back, the oldest parked vessel is woken (a new trigger on the queue): giving a lease back tells the listeners
 * of plans/leases.ts, and this module registers the wake there when it is loaded. The reconciler is the safety net
 * for a wake that never came (a slot freed by a crashed run): it looks at parked vessels a lease's length after they
 * parked (parkCheckMs) and wakes them when their developer has room.
 */

/** Parks a due vessel refused for capacity (PENDING → QUEUED, or QUEUED staying), keeping its place in the line. */
export async function parkVessel(v: StoredVessel, developerId: string, now: Date): Promise<VesselWrite> {
  const park = {
    when: { expression: 'driveId = :drive', values: { ':drive': v.driveId } },
    set: { parkedFor: developerId, parkedAt: v.parkedAt ?? now.getTime(), reconcileAt: now.getTime() + parkCheckMs() },
    now,
  };
  return v.status === 'PENDING' ? moveVessel(v.vesselId, { to: 'QUEUED', from: 'PENDING', ...park }) : touchVessel(v.vesselId, { status: 'QUEUED', ...park });
}

/**
 * Wakes up to `count` of the developer's parked vessels, oldest first: each is taken out of the line with a new
 * trigger (one conditional write, so two wakers never wake the same vessel) and its run message sent. A woken vessel
 * that finds no room after all is parked again, in its old place. Never throws: a wake that fails is the
 * reconciler's to make.
 */
export async function wakeParkedVessels(developerId: string, count = 1, now = new Date(clock.now())): Promise<number> {
  let woken = 0;
  try {
    const out = await documentClient().send(
      new QueryCommand({
        TableName: env().VESSELS_TABLE,
        IndexName: VESSELS_PARKED_INDEX,
        KeyConditionExpression: 'parkedFor = :dev',
        ExpressionAttributeValues: { ':dev': developerId },
        ScanIndexForward: true,
        // A few more than asked: some may have been woken or canceled since the index saw them.
        Limit: count + 4,
      }),
    );
    for (const v of (out.Items ?? []) as StoredVessel[]) {
      if (woken >= count) break;
      if (await wakeVessel(v, now)) woken++;
    }
  } catch (err) {
    logger.warn('waking parked vessels failed; the reconciler will', { developerId, error: err as Error });
  }
  return woken;
}

// Every run's end, whoever ran it (a /prompt run, a vessel, a /ws turn), wakes the oldest vessel parked for its slot.
onCapacityFreed((developerId) => wakeParkedVessels(developerId));

/** Takes one parked vessel out of the line with a new trigger and sends it; false when it had moved meanwhile. */
export async function wakeVessel(v: StoredVessel, now: Date): Promise<boolean> {
  const driveId = randomUUID();
  const taken = await touchVessel(v.vesselId, {
    status: 'QUEUED',
    when: { expression: 'parkedFor = :dev AND driveId = :drive', values: { ':dev': v.parkedFor, ':drive': v.driveId } },
    set: { driveId, reconcileAt: redriveAt(now.getTime()) },
    remove: ['parkedFor'],
    now,
  });
  if (!taken.ok) return false;
  await sendRunMessage({ vesselId: v.vesselId, driveId });
  return true;
}
