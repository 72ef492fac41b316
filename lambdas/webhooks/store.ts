import { alertKey } from '../alerts/record.ts';
import { env } from '../config/env.ts';
import { WEBHOOK_CLAIM_STALE_MS } from '../config/timing.ts';
import { conditionalUpdate } from '../store/conditional.ts';
import { vesselKey, type StoredVessel } from '../vessels/record.ts';
import { VesselStates } from '../vessels/states.ts';
import { reconcileShardOf, redriveAt } from '../vessels/store.ts';
import {
  firstRound,
  WEBHOOK_STATUS_PLACEHOLDERS,
  WebhookStates,
  type StoredAttempt,
  type StoredWebhook,
  type WebhookFailure,
  type WebhookStatus,
} from '../deliveries/record.ts';

/**
 * The delivery state on the item it delivers (attribute `webhook`, lambdas/deliveries/record.ts) — an ended vessel
 * with a callback, or a fired budget alert — changed only by the conditional writes below, so two senders holding
 * duplicates of one message never both make an attempt, and a sender that died mid-attempt is taken over once its
 * claim is stale. Every change of its status is a transition of its flow (WebhookStates).
 */

/** Where a delivery record lives: its item, and what must hold of that item for the record to be written. */
export interface DeliveryLocation {
  table: string;
  key: Record<string, string>;
  /** The item's own condition: a vessel has ended and has a callback; an alert has its target. */
  precondition: { expression: string; names: Record<string, string>; values: Record<string, string> };
  /**
   * The vessel reconciler watches a pending delivery through the item's reconcile index (reconcileAt) and re-drives an
   * attempt whose message was lost; an alert's item has no such index.
   */
  watched: boolean;
}

/** A vessel's callback delivery: on the vessel, once it has ended with a callback. */
export const vesselDelivery = (vesselId: string): DeliveryLocation => ({
  table: env().VESSELS_TABLE,
  key: vesselKey(vesselId),
  precondition: endedWithCallback(),
  watched: true,
});

/** A budget alert's delivery: on the alert's item in the usage table (lambdas/alerts/record.ts). */
export const alertDelivery = (alertId: string): DeliveryLocation => ({
  table: env().USAGE_TABLE,
  key: alertKey(alertId),
  precondition: { expression: 'attribute_exists(#callback)', names: {}, values: {} },
  watched: false,
});

/** Placeholders for the map's attributes (several are reserved words: at, by); its status has the flow's (record.ts). */
const NAMES = {
  '#w': 'webhook',
  '#round': 'round',
  '#tried': 'tried',
  '#attempts': 'attempts',
  '#claim': 'claim',
  '#attempt': 'attempt',
  '#at': 'at',
  '#by': 'by',
  '#next': 'nextAttemptAt',
  '#failure': 'failure',
  '#dl': 'deadLetteredAt',
  '#callback': 'callback',
};

/** The vessel has ended and has a callback. */
function endedWithCallback(): DeliveryLocation['precondition'] {
  const ended = VesselStates.statusIn(VesselStates.terminal);
  return { expression: `${ended.expression} AND attribute_exists(#callback)`, names: ended.names, values: ended.values };
}

/** The placeholders of NAMES that `text` uses (DynamoDB refuses unused ones). */
const namesUsedIn = (text: string) =>
  Object.fromEntries(Object.entries(NAMES).filter(([placeholder]) => new RegExp(`${placeholder}(?![A-Za-z0-9_])`).test(text)));

/** The delivery's status fragments, on `webhook.status` (record.ts). */
const move = (to: WebhookStatus, from?: WebhookStatus) => WebhookStates.transition(to, { ...WEBHOOK_STATUS_PLACEHOLDERS, ...(from ? { from } : {}) });
const inStatus = (status: WebhookStatus) => {
  const c = WebhookStates.statusIn([status], WEBHOOK_STATUS_PLACEHOLDERS);
  return { condition: c.expression, names: c.names, values: c.values };
};

/**
 * One conditional write of the delivery: the item's precondition holds (a vessel: ended with a callback), the delivery
 * is in the status `state` expects (and moves to its `set`, first in `update`'s SET), and `condition` holds.
 */
async function update(
  at: DeliveryLocation,
  input: {
    state?: { condition: string; set?: string; names: Record<string, string>; values: Record<string, string> };
    condition: string;
    update: string;
    values: Record<string, unknown>;
  },
): Promise<Record<string, unknown> | undefined> {
  const ended = at.precondition;
  const { state } = input;
  const condition = [ended.expression, state?.condition, input.condition].filter((c) => c !== undefined).join(' AND ');
  if (state?.set && !input.update.startsWith('SET ')) throw new Error('A move of the delivery status sets it in the SET clause');
  const expression = state?.set ? `SET ${state.set}, ${input.update.slice('SET '.length)}` : input.update;
  const r = await conditionalUpdate({
    TableName: at.table,
    Key: at.key,
    UpdateExpression: expression,
    ConditionExpression: condition,
    ExpressionAttributeNames: { ...namesUsedIn(`${condition} ${expression}`), ...ended.names, ...state?.names },
    ExpressionAttributeValues: { ...ended.values, ...state?.values, ...input.values },
    ReturnValues: 'ALL_NEW',
  });
  return r.ok ? r.attributes : undefined;
}

/**
 * Claims attempt `attempt` of round `round` for sender `by`: only while it is the next attempt of the current round,
 * the delivery is pending, and no live claim holds it. False when another sender has it, or it was made already.
 */
export async function claimAttempt(
  at: DeliveryLocation,
  current: StoredWebhook | undefined,
  m: { round: number; attempt: number },
  by: string,
  now: number,
): Promise<boolean> {
  const claim = { attempt: m.attempt, at: now, by };
  if (!current) {
    // A vessel that ended before deliveries were recorded on it: its first attempt starts the record.
    if (m.round !== 1 || m.attempt !== 1) return false;
    return (await update(at, { condition: 'attribute_not_exists(#w)', update: 'SET #w = :w', values: { ':w': { ...firstRound(), claim } } })) !== undefined;
  }
  const updated = await update(at, {
    state: inStatus('pending'),
    condition: '#w.#round = :round AND #w.#tried = :before AND (attribute_not_exists(#w.#claim) OR #w.#claim.#attempt <> :attempt OR #w.#claim.#at < :stale)',
    update: 'SET #w.#claim = :claim',
    values: { ':round': m.round, ':before': m.attempt - 1, ':attempt': m.attempt, ':stale': now - WEBHOOK_CLAIM_STALE_MS, ':claim': claim },
  });
  return updated !== undefined;
}

/** What the round became after an attempt. */
export type AfterAttempt = { status: 'delivered' } | { status: 'pending'; nextAttemptAt: number } | { status: 'failed'; failure: WebhookFailure };

/**
 * Records attempt `attempt` (made under claim `by`) and what the round became, in one write. Undefined when the claim
 * was lost meanwhile (a stale claim taken over, an operator's redelivery): the attempt is then not recorded.
 */
export async function recordAttempt(
  at: DeliveryLocation,
  m: { round: number; attempt: number },
  by: string,
  attempt: StoredAttempt,
  after: AfterAttempt,
): Promise<StoredWebhook | undefined> {
  const sets = ['#w.#tried = :attempt', '#w.#attempts = list_append(#w.#attempts, :one)'];
  const removes = ['#w.#claim'];
  const values: Record<string, unknown> = { ':round': m.round, ':before': m.attempt - 1, ':attempt': m.attempt, ':by': by, ':one': [attempt] };
  if (after.status === 'pending') {
    sets.push('#w.#next = :next');
    values[':next'] = after.nextAttemptAt;
    if (at.watched) {
      // Watched by the reconciler until settled: looked at once the next attempt is overdue (its message lost).
      sets.push('reconcileAt = :look');
      values[':look'] = redriveAt(after.nextAttemptAt);
    }
  } else removes.push('#w.#next', ...(at.watched ? ['reconcileShard', 'reconcileAt'] : []));
  if (after.status === 'failed') {
    sets.push('#w.#failure = :failure');
    values[':failure'] = after.failure;
  }
  // A claim is only ever taken on a pending delivery, and every move out of pending drops it: a held claim means pending.
  const updated = await update(at, {
    state: move(after.status, 'pending'),
    condition: '#w.#round = :round AND #w.#tried = :before AND #w.#claim.#by = :by',
    update: `SET ${sets.join(', ')} REMOVE ${removes.join(', ')}`,
    values,
  });
  return updated?.webhook as StoredWebhook | undefined;
}

/** Notes that an exhausted round is on the dead-letter queue (once). */
export async function markDeadLettered(at: DeliveryLocation, round: number, now: number): Promise<void> {
  await update(at, {
    condition: '#w.#round = :round AND #w.#failure = :exhausted AND attribute_not_exists(#w.#dl)',
    update: 'SET #w.#dl = :now',
    values: { ':round': round, ':exhausted': 'exhausted', ':now': now },
  });
}

/**
 * An attempt whose round was superseded while it was being made (an operator's redelivery): kept in the record all the
 * same — it did reach, or try to reach, the receiver — without touching the new round's state.
 */
export async function recordSupersededAttempt(at: DeliveryLocation, attempt: StoredAttempt): Promise<boolean> {
  const updated = await update(at, {
    condition: '#w.#round > :round',
    update: 'SET #w.#attempts = list_append(#w.#attempts, :one)',
    values: { ':round': attempt.round, ':one': [attempt] },
  });
  return updated !== undefined;
}

/**
 * Starts the next round of a vessel's delivery (an operator's redelivery): pending, nothing tried, earlier attempts
 * kept. Conditioned on the round seen, so two redeliveries at once start one round each, never the same one. The
 * vessel goes back into the reconcile index until its first attempt is handed to the webhook queue, as at its end
 * (lambdas/vessels/end.ts): a redelivery whose hand-off fails is made by the reconciler. Undefined when the vessel
 * changed meanwhile.
 */
export async function startRound(vessel: StoredVessel, now: number): Promise<StoredVessel | undefined> {
  const watch = 'reconcileShard = :shard, reconcileAt = :redrive';
  const watchValues = { ':shard': reconcileShardOf(vessel.vesselId), ':redrive': redriveAt(now) };
  const at = vesselDelivery(vessel.vesselId);
  if (!vessel.webhook) {
    return (await update(at, {
      condition: 'attribute_not_exists(#w)',
      update: `SET #w = :w, ${watch} REMOVE callbackHandedOffAt`,
      values: { ':w': firstRound(), ...watchValues },
    })) as StoredVessel | undefined;
  }
  return (await update(at, {
    state: move('pending'),
    condition: '#w.#round = :round',
    update: `SET #w.#round = :next, #w.#tried = :zero, ${watch} REMOVE #w.#claim, #w.#next, #w.#failure, #w.#dl, callbackHandedOffAt`,
    values: { ':round': vessel.webhook.round, ':next': vessel.webhook.round + 1, ':zero': 0, ...watchValues },
  })) as StoredVessel | undefined;
}

/**
 * Starts the next round of an alert's delivery (an operator's redelivery), as startRound does a vessel's: pending,
 * nothing tried, earlier attempts kept, conditioned on the round seen. An alert's item is watched by no reconciler:
 * the redelivery hands its first attempt to the webhook queue itself (redeliver.ts). Undefined when it changed meanwhile.
 */
export async function startAlertRound(alertId: string, round: number): Promise<StoredWebhook | undefined> {
  const updated = await update(alertDelivery(alertId), {
    state: move('pending'),
    condition: '#w.#round = :round',
    update: 'SET #w.#round = :next, #w.#tried = :zero REMOVE #w.#claim, #w.#next, #w.#failure, #w.#dl',
    values: { ':round': round, ':next': round + 1, ':zero': 0 },
  });
  return updated?.webhook as StoredWebhook | undefined;
}
