import { createHash } from 'node:crypto';
import { DeleteCommand, GetCommand, TransactWriteCommand } from '@aws-sdk/lib-dynamodb';
import { env } from '../config/env.ts';
import { IDEMPOTENCY_RETRY_BASE_MS, IDEMPOTENCY_RETRY_JITTER_MS, VESSEL_RETENTION_SECONDS } from '../config/timing.ts';
import { conditionalUpdate, type ConditionalResult } from '../store/conditional.ts';
import { documentClient, isConditionFailure } from '../store/dynamo.ts';
import { epochSeconds, expiresAfter, hasExpired } from '../store/epoch.ts';
import { storedOutput, vesselKey, type StoredVessel, type VesselOutput } from './record.ts';
import { VesselStates, type VesselStatus } from './states.ts';

/**
 * The vessels table (docs/incubate.md): every vessel and every idempotency key, and every change of a vessel as one
 * conditional write from the state the flow (states.ts) allows it from — so two deliveries of one trigger, a cancel
 * racing a start, or a reconciler racing an executor can never both win.
 *
 *   vessel#<vesselId>                     the vessel (record.ts)
 *   idem#<projectId>#<sha256(key)>        { vesselId, fingerprint, idempotencyKey }, kept 30 days
 */

/** Shards of the reconcile index's partition key, so watched vessels do not all sit in one partition. */
export const RECONCILE_SHARDS = 4;

const table = () => env().VESSELS_TABLE;

/** When the reconciler should look at a vessel next if nothing moves it from `from` (epoch ms) on. */
export const redriveAt = (from: number) => from + env().VESSEL_REDRIVE_AFTER_SECONDS * 1000;

export const reconcileShardOf = (vesselId: string) => String(createHash('sha256').update(vesselId).digest()[0]! % RECONCILE_SHARDS);

function idempotencyKeyItem(projectId: string, key: string) {
  return { pk: `idem#${projectId}#${createHash('sha256').update(key).digest('hex')}` };
}

export interface IdempotencyRecord {
  vesselId: string;
  fingerprint: string;
  idempotencyKey: string;
}

export type CreateResult = { created: true } | { created: false; existing: IdempotencyRecord };

/**
 * Stores a new vessel and claims its idempotency key in one transaction: both or neither. A key already claimed
 * (and not expired) is answered with its record; concurrent identical requests thus create exactly one vessel.
 */
export async function createVessel(vessel: StoredVessel, fingerprint: string, now: Date): Promise<CreateResult> {
  const keyItem = idempotencyKeyItem(vessel.projectId, vessel.idempotencyKey);
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      await documentClient().send(
        new TransactWriteCommand({
          TransactItems: [
            { Put: { TableName: table(), Item: vessel, ConditionExpression: 'attribute_not_exists(pk)' } },
            {
              Put: {
                TableName: table(),
                Item: {
                  ...keyItem,
                  vesselId: vessel.vesselId,
                  fingerprint,
                  idempotencyKey: vessel.idempotencyKey,
                  expiresAt: expiresAfter(now, VESSEL_RETENTION_SECONDS),
                },
                // DynamoDB's TTL deletes lazily: a key past its 30 days is free even while the item lingers.
                ConditionExpression: 'attribute_not_exists(pk) OR expiresAt <= :now',
                ExpressionAttributeValues: { ':now': epochSeconds(now) },
              },
            },
          ],
        }),
      );
      return { created: true };
    } catch (err) {
      if (!isConditionFailure(err)) throw err;
      const existing = await readIdempotencyKey(vessel.projectId, vessel.idempotencyKey, now);
      if (existing) return { created: false, existing };
      // A concurrent transaction on the same key (cancelled as a conflict) that has not landed, or a key freed
      // meanwhile: try again, a little later.
      await new Promise((r) => setTimeout(r, IDEMPOTENCY_RETRY_BASE_MS + Math.random() * IDEMPOTENCY_RETRY_JITTER_MS * (attempt + 1)));
    }
  }
  throw new Error(`Could not claim idempotency key for vessel ${vessel.vesselId}: the key kept changing`);
}

async function readIdempotencyKey(projectId: string, key: string, now: Date): Promise<IdempotencyRecord | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: idempotencyKeyItem(projectId, key), ConsistentRead: true }));
  const item = out.Item as (IdempotencyRecord & { expiresAt: number }) | undefined;
  if (!item || hasExpired(item.expiresAt, now)) return undefined;
  return { vesselId: item.vesselId, fingerprint: item.fingerprint, idempotencyKey: item.idempotencyKey };
}

/**
 * Removes a vessel that was never triggered, and frees its key, in one transaction — only while it is still the
 * untouched vessel that was created (waiting, same trigger). Used when the queue or the scheduler refused it.
 */
export async function deleteUntriggered(vessel: StoredVessel): Promise<boolean> {
  const waiting = VesselStates.statusIn(['PENDING', 'QUEUED']);
  try {
    await documentClient().send(
      new TransactWriteCommand({
        TransactItems: [
          {
            Delete: {
              TableName: table(),
              Key: vesselKey(vessel.vesselId),
              ConditionExpression: `${waiting.expression} AND driveId = :drive`,
              ExpressionAttributeNames: waiting.names,
              ExpressionAttributeValues: { ...waiting.values, ':drive': vessel.driveId },
            },
          },
          {
            Delete: {
              TableName: table(),
              Key: idempotencyKeyItem(vessel.projectId, vessel.idempotencyKey),
              ConditionExpression: 'vesselId = :id',
              ExpressionAttributeValues: { ':id': vessel.vesselId },
            },
          },
        ],
      }),
    );
    return true;
  } catch (err) {
    if (isConditionFailure(err)) return false;
    throw err;
  }
}

/** Frees an idempotency key whose vessel no longer exists (so a stale key cannot block its owner for 30 days). */
export async function forgetIdempotencyKey(projectId: string, key: string, vesselId: string): Promise<void> {
  try {
    await documentClient().send(
      new DeleteCommand({
        TableName: table(),
        Key: idempotencyKeyItem(projectId, key),
        ConditionExpression: 'vesselId = :id',
        ExpressionAttributeValues: { ':id': vesselId },
      }),
    );
  } catch (err) {
    if (!isConditionFailure(err)) throw err;
  }
}

export async function getVessel(vesselId: string): Promise<StoredVessel | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: vesselKey(vesselId), ConsistentRead: true }));
  return out.Item as StoredVessel | undefined;
}

/** A vessel write's outcome: the vessel as written, or as the failed condition saw it (undefined: no such vessel). */
export type VesselWrite = { ok: true; vessel: StoredVessel } | { ok: false; seen: StoredVessel | undefined };

const asVesselWrite = (r: ConditionalResult): VesselWrite =>
  r.ok ? { ok: true, vessel: r.attributes as unknown as StoredVessel } : { ok: false, seen: r.seen as unknown as StoredVessel | undefined };

/**
 * One move of a vessel: the flow's condition (from `from`), plus `extra` conditions, setting `set` and removing
 * `remove`. Attribute names in `set`/`remove` are used as they are (the vessel's attributes are not reserved words,
 * except `status`, which the transition handles).
 */
export async function moveVessel(
  vesselId: string,
  move: {
    to: VesselStatus;
    from: VesselStatus | readonly VesselStatus[];
    when?: { expression: string; values: Record<string, unknown> };
    set?: Record<string, unknown>;
    remove?: readonly string[];
    now: Date;
  },
): Promise<VesselWrite> {
  const t = VesselStates.transition(move.to, { from: move.from });
  const condition = { expression: t.condition, names: t.names, values: t.values };
  return writeVessel(vesselId, condition, move.when, updateClauses({ ...move.set, updatedAt: move.now.getTime() }, move.remove, [t.set]));
}

/**
 * Changes attributes of a vessel without changing its status, while it is in `status` and `when` holds (the
 * heartbeat of an execution, a cancel request, a re-drive).
 */
export async function touchVessel(
  vesselId: string,
  change: {
    status: VesselStatus | readonly VesselStatus[];
    when?: { expression: string; values: Record<string, unknown> };
    set: Record<string, unknown>;
    remove?: readonly string[];
    now?: Date;
  },
): Promise<VesselWrite> {
  const cond = VesselStates.statusIn(typeof change.status === 'string' ? [change.status as VesselStatus] : (change.status as readonly VesselStatus[]));
  return writeVessel(vesselId, cond, change.when, updateClauses({ ...change.set, ...(change.now ? { updatedAt: change.now.getTime() } : {}) }, change.remove));
}

/** The one conditional UpdateItem of a vessel: the status condition, `when`, and the update; answers the vessel. */
async function writeVessel(
  vesselId: string,
  status: { expression: string; names: Record<string, string>; values: Record<string, unknown> },
  when: { expression: string; values: Record<string, unknown> } | undefined,
  update: { expression: string; names: Record<string, string>; values: Record<string, unknown> },
): Promise<VesselWrite> {
  return asVesselWrite(
    await conditionalUpdate({
      TableName: table(),
      Key: vesselKey(vesselId),
      UpdateExpression: update.expression,
      ConditionExpression: when ? `${status.expression} AND ${when.expression}` : status.expression,
      ExpressionAttributeNames: { ...status.names, ...update.names },
      ExpressionAttributeValues: { ...status.values, ...update.values, ...when?.values },
      ReturnValues: 'ALL_NEW',
    }),
  );
}

/**
 * `SET #a_x = :a_x, … REMOVE #a_y, …` with a name placeholder for every attribute (several of the vessel's —
 * `output`, `attempts` — are DynamoDB reserved words). `leading` clauses come first in the SET.
 */
function updateClauses(set: Record<string, unknown>, remove: readonly string[] = [], leading: string[] = []) {
  const names: Record<string, string> = {};
  const values: Record<string, unknown> = {};
  const sets = [...leading];
  for (const [k, v] of Object.entries(set)) {
    names[`#a_${k}`] = k;
    values[`:a_${k}`] = v;
    sets.push(`#a_${k} = :a_${k}`);
  }
  for (const k of remove) names[`#a_${k}`] = k;
  const setClause = sets.length ? `SET ${sets.join(', ')}` : '';
  const removeClause = remove.length ? `REMOVE ${remove.map((k) => `#a_${k}`).join(', ')}` : '';
  return { expression: [setClause, removeClause].filter(Boolean).join(' '), names, values };
}

/** What an ended vessel keeps: its output and end time; retained 30 days from now. */
export function endedAttributes(output: VesselOutput, now: Date): Record<string, unknown> {
  return { output: storedOutput(output), completedAt: now.getTime(), expiresAt: expiresAfter(now, VESSEL_RETENTION_SECONDS) };
}
