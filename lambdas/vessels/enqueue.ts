import { randomUUID } from 'node:crypto';
import { clock } from '../config/clock.ts';
import type { RunOptions } from '../agent/options.ts';
import type { Caller } from '../auth/claims.ts';
import { VESSEL_RETENTION_SECONDS } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import type { Refusable } from '../refusals/refusal.ts';
import { keyCipher } from '../registry/key-cipher.ts';
import { queueResponse, storedOptions, vesselKey, type QueueResponse, type StoredCallback, type StoredVessel } from './record.ts';
import { fingerprint, type Callback } from './request.ts';
import { requestTooLarge } from './size.ts';
import { expiresAfter } from '../store/epoch.ts';
import { createVessel, deleteUntriggered, forgetIdempotencyKey, getVessel, reconcileShardOf, redriveAt } from './store.ts';
import { needsSchedule } from '../scheduling/delay.ts';
import { scheduleNameOf, triggerVessel } from './trigger.ts';

/**
 * Accepting a vessel (POST /incubate, and each item of a batch): claim the idempotency key and store the vessel in
 * one transaction, then trigger it. A trigger the queue or the scheduler refuses undoes both, so nothing is left
 * that would never run and the key is free for the retry (docs/incubate.md, "Idempotency").
 */

/** What every vessel of one request shares. */
export interface VesselRequest {
  caller: Caller;
  /** The caller's project's developer (the admission step's plan check found it). */
  developerId: string;
  /** Checked options (agent/admitted-run.ts `checkedRunOptions`), without the token. */
  options: RunOptions & { model: string };
  /** As the caller sent it (the fingerprint covers it). */
  callback?: Callback | undefined;
  /** The callback as stored: its secret encrypted (`storedCallback`). */
  stored?: StoredCallback | undefined;
  ttl?: number | undefined;
  executeAt?: string | undefined;
  /** When the vessels are due (request.ts `dueTime`). */
  due: Date;
}

/** A vessel accepted (`replayed`: the key's earlier vessel, answered again), or the refusal. */
export type EnqueueOutcome = Refusable<{ replayed: boolean; response: QueueResponse }>;

/** The callback to store: the URL, and the secret encrypted for the project (never stored or logged in clear). */
export async function storedCallback(caller: Caller, callback: Callback | undefined): Promise<StoredCallback | undefined> {
  if (!callback) return undefined;
  if (callback.secret === undefined) return { url: callback.url };
  return { url: callback.url, secretCiphertext: await keyCipher().encrypt(callback.secret, { projectId: caller.projectId }) };
}

/**
 * `item.what` names the vessel in a refusal's message ("The vessel", or "items.3: the vessel" for a batch's item).
 */
export async function enqueueVessel(
  request: VesselRequest,
  item: { message: string; idempotencyKey: string; what?: string },
  now = new Date(clock.now()),
): Promise<EnqueueOutcome> {
  const { caller } = request;
  const print = fingerprint({
    userId: caller.userId,
    message: item.message,
    options: request.options,
    callback: request.callback,
    ttl: request.ttl,
    executeAt: request.executeAt,
  });
  const vesselId = randomUUID();
  const driveId = randomUUID();
  const scheduledFor = request.due.getTime();
  const far = needsSchedule(scheduledFor, now);
  const vessel: StoredVessel = {
    ...vesselKey(vesselId),
    vesselId,
    projectId: caller.projectId,
    userId: caller.userId,
    developerId: request.developerId,
    caller,
    message: item.message,
    options: storedOptions(request.options),
    idempotencyKey: item.idempotencyKey,
    status: scheduledFor > now.getTime() ? 'PENDING' : 'QUEUED',
    createdAt: now.getTime(),
    updatedAt: now.getTime(),
    scheduledFor,
    attempts: 0,
    driveId,
    ...(request.stored ? { callback: request.stored } : {}),
    ...(far ? { scheduleName: scheduleNameOf({ vesselId, driveId }) } : {}),
    // Watched from the moment it is due (plus the grace a healthy trigger needs) until it ends.
    reconcileShard: reconcileShardOf(vesselId),
    reconcileAt: redriveAt(scheduledFor),
    // A waiting vessel is kept until 30 days after it was due; an ended one, 30 days after it ended.
    expiresAt: expiresAfter(request.due, VESSEL_RETENTION_SECONDS),
  };
  // Over its share of the item, nothing is stored or run: 413 (size.ts). Checked before the key is claimed, so a
  // key never points at a vessel that could not be kept.
  const tooLarge = requestTooLarge(vessel, item.what);
  if (tooLarge) return { ok: false, refusal: tooLarge };

  for (let attempt = 0; attempt < 2; attempt++) {
    const created = await createVessel(vessel, print, now);
    if (!created.created) {
      const { existing } = created;
      if (existing.fingerprint !== print) {
        return {
          ok: false,
          refusal: {
            kind: 'idempotency_key_conflict',
            // Never the other vessel's id: the key may be another user's (docs/incubate.md, "Idempotency").
            message: `idempotencyKey "${item.idempotencyKey}" was already used with a different request body or by another user; use a new key for a new request`,
          },
        };
      }
      const original = await getVessel(existing.vesselId);
      if (original) return { ok: true, replayed: true, response: queueResponse(original) };
      // The key outlived its vessel (a vessel undone by a failed trigger, seen mid-way): free it and try once more.
      await forgetIdempotencyKey(caller.projectId, item.idempotencyKey, existing.vesselId);
      continue;
    }
    try {
      await triggerVessel(vessel, now);
    } catch (err) {
      logger.error('vessel trigger failed; the vessel is undone', { vesselId, scheduled: far, error: err as Error });
      let undone = false;
      try {
        undone = await deleteUntriggered(vessel);
      } catch (undoErr) {
        logger.error('undoing an untriggered vessel failed; the reconciler will run it', { vesselId, error: undoErr as Error });
      }
      if (!undone) {
        // Still there (the store failed too): it is watched, so the reconciler triggers it when due. The caller is
        // told it was accepted, since it will run.
        return { ok: true, replayed: false, response: queueResponse(vessel) };
      }
      return {
        ok: false,
        refusal: {
          kind: 'trigger_failed',
          message: `The ${far ? 'scheduler' : 'run queue'} is unavailable, so the vessel was not queued (nothing was kept; retry with the same idempotencyKey)`,
        },
      };
    }
    return { ok: true, replayed: false, response: queueResponse(vessel) };
  }
  throw new Error(`Idempotency key of vessel ${vesselId} kept pointing at vessels that no longer exist`);
}
