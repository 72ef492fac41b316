import { createHash } from 'node:crypto';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { ACTIVITY_RETAIN_SECONDS } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import type { TokenUsage } from '../pricing/prices.ts';
import { updateOnce } from '../store/conditional.ts';
import { expiresAfter } from '../store/epoch.ts';

/**
 * Activity records (DESIGN §12, docs/activity.md): what every settled charge — a model call of the proxy, `/prompt`,
 * a vessel or a `/ws` turn, a run's compute, a hold the sweep charged — adds to its project's hour, per user and model.
 * Written where the ledger settles (budgets/ledger.ts `settle`), after the settlement won its hold, so each charge
 * is counted once and equals the ledger; never on a request's critical path (the settlement comes after the answer).
 *
 * Layout (the Activity table, partition key `pk`, sort key `sk`):
 *   pk = <projectId>#<UTC month>#<bucket>    bucket = a hash of the user id, 0 … ACTIVITY_BUCKETS − 1
 *   sk = <hour start ISO>#<user id>#<model>  (user id and model URI-encoded, so `#` cannot break the layout)
 * Any span within a month — an hour, a day, the month — is ACTIVITY_BUCKETS queries (each one sort-key range); one
 * item per (project, hour, user, model) holds the counters, added to atomically.
 *
 * Partition math (docs/activity.md): a project at 1,000 settled calls/s spreads them over ACTIVITY_BUCKETS partition
 * keys by user, ~125 writes/s each — far below DynamoDB's 1,000 write units/s per partition — and one item is
 * written only as often as its one user is charged, which the user's ledger window already bears.
 */

export const ACTIVITY_BUCKETS = 8;
/** The model recorded for a charge that is not a model call: a run's compute, a hold the sweep settled. */
export const NO_MODEL = '-';

export interface ActivityCharge {
  projectId: string;
  userId: string;
  /** The model called; NO_MODEL for compute and swept holds. */
  model: string;
  aiMicros: number;
  computeSeconds: number;
  /** Model calls settled (1 for a call, 0 for compute). */
  requests: number;
  /** Calls that ended in the provider's error (charged 0, or an aborted call's input bound). */
  errors: number;
  /** Calls refused for the user's budget before any provider was called (nothing charged). */
  refusals?: number;
  /** The tokens charged, when the charge was priced from tokens. */
  tokens?: TokenUsage;
}

export interface ActivityKey {
  pk: string;
  sk: string;
}

export const hourOf = (at: Date) => `${at.toISOString().slice(0, 13)}:00:00.000Z`;
export const monthOf = (at: Date) => at.toISOString().slice(0, 7);

export function bucketOf(userId: string): number {
  return createHash('sha256').update(userId).digest().readUInt32BE(0) % ACTIVITY_BUCKETS;
}

/** The key of a (project, hour, user, model) item; stored data, so the format must never change. */
export function activityKey(projectId: string, userId: string, model: string, at: Date): ActivityKey {
  return {
    pk: `${projectId}#${monthOf(at)}#${bucketOf(userId)}`,
    sk: `${hourOf(at)}#${encodeURIComponent(userId)}#${encodeURIComponent(model)}`,
  };
}

const table = () => env().ACTIVITY_TABLE;

/**
 * Adds a charge to its item, once however often the SDK sends it (store/conditional.ts `updateOnce`). A failure is
 * logged and counted as lost, never retried into a double count: like the developer's month, activity is written
 * after the ledger and can only be short, never over (docs/activity.md).
 */
export async function countActivity(charge: ActivityCharge, at = new Date(clock.now())): Promise<void> {
  const t = charge.tokens;
  try {
    await updateOnce({
      TableName: table(),
      Key: activityKey(charge.projectId, charge.userId, charge.model, at),
      UpdateExpression:
        'SET projectId = :p, userId = :u, model = :m, #hour = :h, expiresAt = if_not_exists(expiresAt, :exp) ' +
        'ADD aiMicros :ai, computeSeconds :c, requests :r, errors :e, refusals :rf, inputTokens :in, outputTokens :out, cacheReadTokens :cr, cacheWriteTokens :cw',
      ExpressionAttributeNames: { '#hour': 'hour' },
      ExpressionAttributeValues: {
        ':p': charge.projectId,
        ':u': charge.userId,
        ':m': charge.model,
        ':h': hourOf(at),
        ':exp': expiresAfter(at, ACTIVITY_RETAIN_SECONDS),
        ':ai': charge.aiMicros,
        ':c': charge.computeSeconds,
        ':r': charge.requests,
        ':e': charge.errors,
        ':rf': charge.refusals ?? 0,
        ':in': t?.input_tokens ?? 0,
        ':out': t?.output_tokens ?? 0,
        ':cr': t?.cache_read_input_tokens ?? 0,
        ':cw': t?.cache_creation_input_tokens ?? 0,
      },
    });
  } catch (err) {
    logger.error('activity record not written', { error: err as Error, projectId: charge.projectId, userId: charge.userId, aiMicros: charge.aiMicros });
  }
}
