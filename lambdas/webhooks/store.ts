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
} from '../vessels/delivery.ts';

/**
 * The delivery state on the vessel (attribute `webhook`, record.ts), changed only by the conditional writes below, so
 * two senders holding duplicates of one message never both make an attempt, and a sender that died mid-attempt is
 * taken over once its claim is stale. Every change of its status is a transition of its flow (WebhookStates,
 * record.ts). Only an ended vessel with a callback has a delivery.
 */

const table = () => env().VESSELS_TABLE;

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
function endedWithCallback() {
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
 * One conditional write of the delivery: the vessel has ended with a callback, the delivery is in the status `state`
 * expects (and moves to its `set`, first in `update`'s SET), and `condition` holds.
 */
async function update(
  vesselId: string,
  input: {
    state?: { condition: string; set?: string; names: Record<string, string>; values: Record<string, string> };
    condition: string;
    update: string;
    values: Record<string, unknown>;
  },
): Promise<StoredVessel | undefined> {
  const ended = endedWithCallback();
  const { state } = input;
  const condition = [ended.expression, state?.condition, input.condition].filter((c) => c !== undefined).join(' AND ');
  if (state?.set && !input.update.startsWith('SET ')) throw new Error('A move of the delivery status sets it in the SET clause');
  const expression = state?.set ? `SET ${state.set}, ${input.update.slice('SET '.length)}` : input.update;
  const r = await conditionalUpdate({
    TableName: table(),
    Key: vesselKey(vesselId),
    UpdateExpression: expression,
    ConditionExpression: condition,
    ExpressionAttributeNames: { ...namesUsedIn(`${condition} ${expression}`), ...ended.names, ...state?.names },
    ExpressionAttributeValues: { ...ended.values, ...state?.values, ...input.values },
    ReturnValues: 'ALL_NEW',
  });
  return r.ok ? (r.attributes as unknown as StoredVessel) : undefined;
}

/**
 * Claims attempt `attempt` of round `round` for sender `by`: only while it is the next attempt of the current round,
 * the delivery is pending, and no live claim holds it. False when another sender has it, or it was made already.
 */
export async function claimAttempt(vessel: StoredVessel, m: { round: number; attempt: number }, by: string, now: number): Promise<boolean> {
  const claim = { attempt: m.attempt, at: now, by };
  if (!vessel.webhook) {
    // A vessel that ended before deliveries were recorded on it: its first attempt starts the record.
    if (m.round !== 1 || m.attempt !== 1) return false;
    return (
      (await update(vessel.vesselId, { condition: 'attribute_not_exists(#w)', update: 'SET #w = :w', values: { ':w': { ...firstRound(), claim } } })) !==
      undefined
    );
  }
  const updated = await update(vessel.vesselId, {
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
  vesselId: string,
  m: { round: number; attempt: number },
  by: string,
  attempt: StoredAttempt,
  after: AfterAttempt,
): Promise<StoredWebhook | undefined> {
  const sets = ['#w.#tried = :attempt', '#w.#attempts = list_append(#w.#attempts, :one)'];
  const removes = ['#w.#claim'];
  const values: Record<string, unknown> = { ':round': m.round, ':before': m.attempt - 1, ':attempt': m.attempt, ':by': by, ':one': [attempt] };
  if (after.status === 'pending') {
    // Watched by the reconciler until settled: looked at once the next attempt is overdue (its message lost).
    sets.push('#w.#next = :next', 'reconcileAt = :look');
    values[':next'] = after.nextAttemptAt;
    values[':look'] = redriveAt(after.nextAttemptAt);
  } else removes.push('#w.#next', 'reconcileShard', 'reconcileAt');
  if (after.status === 'failed') {
    sets.push('#w.#failure = :failure');
    values[':failure'] = after.failure;
  }
  // A claim is only ever taken on a pending delivery, and every move out of pending drops it: a held claim means pending.
  const updated = await update(vesselId, {
    state: move(after.status, 'pending'),
    condition: '#w.#round = :round AND #w.#tried = :before AND #w.#claim.#by = :by',
    update: `SET ${sets.join(', ')} REMOVE ${removes.join(', ')}`,
    values,
  });
  return updated?.webhook;
}

/** Notes that an exhausted round is on the dead-letter queue (once). */
export async function markDeadLettered(vesselId: string, round: number, now: number): Promise<void> {
  await update(vesselId, {
    condition: '#w.#round = :round AND #w.#failure = :exhausted AND attribute_not_exists(#w.#dl)',
    update: 'SET #w.#dl = :now',
    values: { ':round': round, ':exhausted': 'exhausted', ':now': now },
  });
}

/**
 * An attempt whose round was superseded while it was being made (an operator's redelivery): kept in the record all the
 * same — it did reach, or try to reach, the receiver — without touching the new round's state.
 */
export async function recordSupersededAttempt(vesselId: string, attempt: StoredAttempt): Promise<boolean> {
  const updated = await update(vesselId, {
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
  if (!vessel.webhook) {
    return update(vessel.vesselId, {
      condition: 'attribute_not_exists(#w)',
      update: `SET #w = :w, ${watch} REMOVE callbackHandedOffAt`,
      values: { ':w': firstRound(), ...watchValues },
    });
  }
  return update(vessel.vesselId, {
    state: move('pending'),
    condition: '#w.#round = :round',
    update: `SET #w.#round = :next, #w.#tried = :zero, ${watch} REMOVE #w.#claim, #w.#next, #w.#failure, #w.#dl, callbackHandedOffAt`,
    values: { ':round': vessel.webhook.round, ':next': vessel.webhook.round + 1, ':zero': 0, ...watchValues },
  });
}
