import { randomUUID } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import { type BudgetClaim, type Caller, WINDOWS } from '../auth/claims.ts';
import type { BudgetFigures } from '../refusals/refusal.ts';
import { env } from '../config/env.ts';
import { USAGE_WINDOW_RETAIN_SECONDS } from '../config/timing.ts';
import { logger } from '../observability/logger.ts';
import { conditionalPut, conditionalUpdate } from '../store/conditional.ts';
import { documentClient } from '../store/dynamo.ts';
import { expiresAfter, hasExpired } from '../store/epoch.ts';
import { countActivity, NO_MODEL } from '../activity/record.ts';
import type { TokenUsage } from '../pricing/prices.ts';
import { alertDeveloperMonth, alertUserWindow } from './alerts.ts';
import { addDeveloperCompute } from './developer-month.ts';
import { windowEnd, windowStart } from './windows.ts';

/**
 * The usage ledger (docs/contract.md, "Budgets and money"). One DynamoDB item per (project, user, window kind,
 * window start) holds:
 *   <m>Used       settled spend
 *   <m>Reserved   sum of open reservations
 *   <m>Committed  Used + Reserved, kept as its own attribute because a condition expression cannot add
 *   holds         open reservations by id: { ai, compute, expiresAt, developerId?, budget? }
 * for each meter m of `ai` (microdollars) and `compute` (seconds).
 *
 * Every change is one conditional UpdateItem, so DynamoDB serialises concurrent requests for us:
 *   reserve  admits only while Committed + worst case ≤ budget (and something remains), then adds the worst case
 *            → used + reserved never exceeds the budget, at any concurrency (docs/contract.md)
 *   settle   only while the hold exists, moving it from Reserved to Used      → idempotent
 *   sweep    settles holds past their expiry through the same conditional     → exactly once
 * A run's compute reservation names the developer whose plan admitted it (`developerId`): whoever settles the hold —
 * the run itself, or the sweep after a crash — adds its compute seconds to that developer's month, so the developer
 * is charged the seconds the user is, exactly once. A hold also keeps the budget its caller's token claimed, so that
 * whoever settles it can tell which of the project's alert thresholds the charge crossed (budgets/alerts.ts).
 */

export type Meter = 'ai' | 'compute';
export type Amounts = Record<Meter, number>;

export interface WindowRef {
  pk: string;
  projectId: string;
  userId: string;
  window: BudgetClaim['window'];
  windowStart: string;
}

/** What a caller needs to settle a reservation later, possibly from another process (it is plain JSON). */
export interface Reservation {
  id: string;
  key: WindowRef;
  held: Amounts;
  expiresAt: number;
  /** The developer whose month the settled compute seconds are added to (a run's compute reservation). */
  developerId?: string;
  /** The budget of the caller's token, against which a settlement's budget alerts are told (absent: none fire). */
  budget?: Amounts;
}

export interface WindowUsage {
  key: WindowRef;
  used: Amounts;
  reserved: Amounts;
  /** AI spend settled above the reservations' bounds (a provider counted more than the gateway's worst case). */
  overrun: number;
  openHolds: number;
}

export type ReserveResult =
  /** `committed`: the window's used + reserved right after this reservation was added (its own hold included). */
  { ok: true; reservation: Reservation; committed: Amounts } | { ok: false; usage: WindowUsage; exhausted: Meter[] };

const METERS: Meter[] = ['ai', 'compute'];
const table = () => env().USAGE_TABLE;

export function windowFor(caller: Pick<Caller, 'projectId' | 'userId' | 'budget'>, now: Date): WindowRef {
  const start = windowStart(caller.budget.window, now).toISOString();
  return {
    pk: `usage#${caller.projectId}#${caller.userId}#${caller.budget.window}#${start}`,
    projectId: caller.projectId,
    userId: caller.userId,
    window: caller.budget.window,
    windowStart: start,
  };
}

function assertAmounts(amounts: Amounts, what: string): void {
  for (const m of METERS) {
    if (!Number.isSafeInteger(amounts[m]) || amounts[m] < 0) throw new RangeError(`${what}.${m} must be a non-negative integer, got ${amounts[m]}`);
  }
}

/** Creates the window item with zeroed counters if it is not there yet; losing the race to another creator is fine. */
async function ensureWindowItem(key: WindowRef): Promise<void> {
  const end = windowEnd(key.window, new Date(key.windowStart));
  await conditionalPut({
    TableName: table(),
    Item: {
      ...key,
      aiUsed: 0,
      aiReserved: 0,
      aiCommitted: 0,
      computeUsed: 0,
      computeReserved: 0,
      computeCommitted: 0,
      holds: {},
      ...(end ? { expiresAt: expiresAfter(end, USAGE_WINDOW_RETAIN_SECONDS) } : {}),
    },
    ConditionExpression: 'attribute_not_exists(pk)',
  });
}

function toUsage(key: WindowRef, item: Record<string, unknown> | undefined): WindowUsage {
  const num = (name: string) => (typeof item?.[name] === 'number' ? (item[name] as number) : 0);
  return {
    key,
    used: { ai: num('aiUsed'), compute: num('computeUsed') },
    reserved: { ai: num('aiReserved'), compute: num('computeReserved') },
    overrun: num('aiOverrun'),
    openHolds: Object.keys((item?.holds as object | undefined) ?? {}).length,
  };
}

export interface ReserveInput {
  caller: Pick<Caller, 'projectId' | 'userId' | 'budget'>;
  /** Worst-case cost of what is about to run. */
  amounts: Amounts;
  /** Which budgets gate admission: the proxy checks only `ai` (the interface exempts it from compute). */
  enforce: Meter[];
  now?: Date;
  reservationId?: string;
  /** The developer whose month the compute settled from this reservation counts against (plans/admission.ts). */
  developerId?: string;
}

export async function reserve(input: ReserveInput): Promise<ReserveResult> {
  assertAmounts(input.amounts, 'amounts');
  const now = input.now ?? new Date(clock.now());
  const key = windowFor(input.caller, now);
  const id = input.reservationId ?? randomUUID();
  const expiresAt = expiresAfter(now, env().RESERVATION_TTL_SECONDS);
  // `Committed <= budget − amount` is `Committed + amount <= budget` (a condition cannot add); `Committed < budget`
  // keeps a zero-cost admission out of a budget with nothing left.
  // The hold's own key too: a reserve the SDK sends again after its answer was lost must not add its amounts twice,
  // even when another request's write came in between (store/conditional.ts).
  const conditions = [
    'attribute_exists(holds)',
    'attribute_not_exists(holds.#id)',
    ...input.enforce.map((m) => `${m}Committed <= :${m}Limit AND ${m}Committed < :${m}Budget`),
  ];
  const budget: Amounts = { ai: input.caller.budget.ai, compute: input.caller.budget.compute };
  const values: Record<string, unknown> = {
    ':hold': { ai: input.amounts.ai, compute: input.amounts.compute, expiresAt, ...(input.developerId ? { developerId: input.developerId } : {}), budget },
    ':ai': input.amounts.ai,
    ':compute': input.amounts.compute,
  };
  for (const m of input.enforce) {
    values[`:${m}Budget`] = input.caller.budget[m];
    values[`:${m}Limit`] = input.caller.budget[m] - input.amounts[m];
  }

  // Expired holds are swept only when they stand in the way: the hot path stays one write.
  let swept = false;
  for (let attempt = 0; attempt < 3; attempt++) {
    const written = await conditionalUpdate({
      TableName: table(),
      Key: { pk: key.pk },
      UpdateExpression: 'SET holds.#id = :hold ADD aiReserved :ai, aiCommitted :ai, computeReserved :compute, computeCommitted :compute',
      ConditionExpression: conditions.join(' AND '),
      ExpressionAttributeNames: { '#id': id },
      ExpressionAttributeValues: values,
      // The counters as this write left them: what remains can be told without another read (the proxy's header).
      ReturnValues: 'UPDATED_NEW',
    });
    // Made: by this send, or by a first send whose answer was lost (its hold is there).
    if (written.ok || (written.seen?.holds as Record<string, unknown> | undefined)?.[id] !== undefined) {
      const counters = written.ok ? written.attributes : written.seen;
      const after = (m: Meter) => (typeof counters?.[`${m}Committed`] === 'number' ? (counters[`${m}Committed`] as number) : 0);
      const reservation: Reservation = {
        id,
        key,
        held: { ...input.amounts },
        expiresAt,
        ...(input.developerId ? { developerId: input.developerId } : {}),
        budget,
      };
      return { ok: true, reservation, committed: { ai: after('ai'), compute: after('compute') } };
    }
    const item = written.seen;
    if (!item || !('holds' in item)) {
      await ensureWindowItem(key);
      continue;
    }
    if (!swept && expiredHolds(item, now).length > 0) {
      swept = true;
      // The item the condition saw is current: sweep from it rather than reading it again.
      await settleExpiredHolds(key, item, now);
      continue;
    }
    const usage = toUsage(key, item);
    const exhausted = input.enforce.filter(
      (m) => usage.used[m] + usage.reserved[m] + input.amounts[m] > input.caller.budget[m] || usage.used[m] + usage.reserved[m] >= input.caller.budget[m],
    );
    return { ok: false, usage, exhausted };
  }
  throw new Error(`Could not create usage window ${key.pk}`);
}

type Hold = { ai: number; compute: number; expiresAt: number; developerId?: string; budget?: Amounts };

/** The window item's holds whose expiry has passed at `now`. */
function expiredHolds(item: Record<string, unknown> | undefined, now: Date): [string, Hold][] {
  return Object.entries((item?.holds ?? {}) as Record<string, Hold>).filter(([, hold]) => hasExpired(hold.expiresAt, now));
}

export interface SettleOutcome {
  /** True when this call settled the reservation; false when it had been settled already (a no-op). */
  settled: boolean;
  /** Microdollars charged above the reservation (0 when the bound held). */
  overrun?: number;
  /** The window's counters right after this settle (only when settled). */
  used?: Amounts;
  reserved?: Amounts;
}

/** What a settled model call was, for its activity record (lambdas/activity/record.ts); absent for compute and sweeps. */
export interface SettledCall {
  model: string;
  /** The tokens charged, when the charge was priced from tokens. */
  tokens?: TokenUsage;
  /** The call ended in the provider's error. */
  error?: boolean;
}

/**
 * Turns a reservation into its actual cost. A repeated settle, or one after the sweep took the hold, changes nothing.
 * The settle that removes a developer's hold then adds its compute to the developer's month, and every settle adds
 * its charge to the project's activity (`call` says which model call it was) and fires the budget alerts it crossed:
 * only one call can win the hold, so each is written once (a process that dies between the writes, or a failed later
 * write, leaves them short, never double). The later writes are independent of each other and made together.
 */
export async function settle(reservation: Reservation, actual: Amounts, now = new Date(clock.now()), call?: SettledCall): Promise<SettleOutcome> {
  assertAmounts(actual, 'actual');
  const written = await conditionalUpdate({
    TableName: table(),
    Key: { pk: reservation.key.pk },
    // aiOverrun: what a provider billed beyond the reserved bound (docs/contract.md, "Overrun").
    UpdateExpression:
      'REMOVE holds.#id ADD aiUsed :aiUsed, aiReserved :aiRelease, aiCommitted :aiDelta, computeUsed :cUsed, computeReserved :cRelease, computeCommitted :cDelta, aiOverrun :aiOver',
    ConditionExpression: 'attribute_exists(holds.#id)',
    ExpressionAttributeNames: { '#id': reservation.id },
    ExpressionAttributeValues: {
      ':aiUsed': actual.ai,
      ':aiRelease': -reservation.held.ai,
      ':aiDelta': actual.ai - reservation.held.ai,
      ':cUsed': actual.compute,
      ':cRelease': -reservation.held.compute,
      ':cDelta': actual.compute - reservation.held.compute,
      ':aiOver': Math.max(0, actual.ai - reservation.held.ai),
    },
    ReturnValues: 'UPDATED_NEW',
  });
  if (!written.ok) return { settled: false };
  const usage = toUsage(reservation.key, written.attributes);
  // Only the settle that won the hold gets here. All of it is part of the settlement, so whatever waits for the
  // settlement (the invocation's end) waits for these too.
  await Promise.all([
    reservation.developerId && actual.compute > 0 ? chargeDeveloper(reservation.developerId, actual.compute, now) : undefined,
    countActivity({
      projectId: reservation.key.projectId,
      userId: reservation.key.userId,
      model: call?.model ?? NO_MODEL,
      aiMicros: actual.ai,
      computeSeconds: actual.compute,
      requests: call ? 1 : 0,
      errors: call?.error ? 1 : 0,
      ...(call?.tokens ? { tokens: call.tokens } : {}),
    }),
    // The thresholds this charge moved the window across, from the counters its own write returned: one alert each.
    reservation.budget ? alertUserWindow({ key: reservation.key, budget: reservation.budget, used: usage.used, charged: actual, now }) : undefined,
  ]);
  return { settled: true, used: usage.used, reserved: usage.reserved, overrun: Math.max(0, actual.ai - reservation.held.ai) };
}

/** The developer's share of a settle that happened: a failure is logged, since the user's side is already written. */
async function chargeDeveloper(developerId: string, seconds: number, now: Date): Promise<void> {
  let month: number;
  try {
    month = await addDeveloperCompute(developerId, seconds, now);
  } catch (err) {
    logger.error('adding compute to the developer month failed', { error: err as Error, developerId, seconds });
    return;
  }
  // The plan's thresholds this charge moved the month across, from the total its own write returned.
  await alertDeveloperMonth({ developerId, used: month, charged: seconds, now });
}

/**
 * Settles every hold of the window whose expiry has passed. A run that crashed never reported what it used, and the
 * provider may have billed for it, so an abandoned hold is charged at the worst case it reserved.
 * Returns how many holds this call settled.
 */
export async function sweepExpired(key: WindowRef, now = new Date(clock.now())): Promise<number> {
  return settleExpiredHolds(key, await readWindowItem(key), now);
}

async function readWindowItem(key: WindowRef): Promise<Record<string, unknown> | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: { pk: key.pk }, ConsistentRead: true }));
  return out.Item;
}

async function settleExpiredHolds(key: WindowRef, item: Record<string, unknown> | undefined, now: Date): Promise<number> {
  let settled = 0;
  for (const [id, hold] of expiredHolds(item, now)) {
    const held = { ai: hold.ai, compute: hold.compute };
    const reservation: Reservation = {
      id,
      key,
      held,
      expiresAt: hold.expiresAt,
      ...(hold.developerId ? { developerId: hold.developerId } : {}),
      ...(hold.budget ? { budget: hold.budget } : {}),
    };
    if ((await settle(reservation, held, now)).settled) settled++;
  }
  return settled;
}

/** The caller's current window. Expired holds are swept first (and the window read again) so the figures are honest. */
export async function readUsage(caller: Pick<Caller, 'projectId' | 'userId' | 'budget'>, now = new Date(clock.now())): Promise<WindowUsage> {
  const key = windowFor(caller, now);
  let item = await readWindowItem(key);
  if (expiredHolds(item, now).length > 0) {
    // Re-read even if a concurrent sweep settled them first: the item in hand still shows them as held.
    await settleExpiredHolds(key, item, now);
    item = await readWindowItem(key);
  }
  return toUsage(key, item);
}

/**
 * A user's current windows as the ledger holds them, for an operator (`gateway user show`, the console): a budget's
 * window kind is in the user's token, not stored, so each kind's current window is looked up and those the user has
 * spent or held in are returned (read as they are: no sweep, an operator's look changes nothing).
 */
export async function currentWindows(projectId: string, userId: string, now = new Date(clock.now())): Promise<WindowUsage[]> {
  const keys = WINDOWS.map((window) => windowFor({ projectId, userId, budget: { window, ai: 0, compute: 0 } }, now));
  const items = await Promise.all(keys.map((key) => readWindowItem(key)));
  return keys.flatMap((key, i) => (items[i] ? [toUsage(key, items[i])] : []));
}

/** A window's figures for both meters, as a budget refusal reports them (remaining = budget − used − held). */
export function budgetFigures(caller: Pick<Caller, 'budget'>, usage: WindowUsage): BudgetFigures {
  const meter = (m: Meter) => ({
    used: usage.used[m],
    remaining: Math.max(0, caller.budget[m] - usage.used[m] - usage.reserved[m]),
    budget: caller.budget[m],
  });
  return { ai: meter('ai'), compute: meter('compute') };
}

/** Whole seconds (at least 1) until the window of `usage` resets; undefined for a lifetime window, which never does. */
export function secondsToReset(usage: WindowUsage, now: Date): number | undefined {
  const end = windowEnd(usage.key.window, new Date(usage.key.windowStart));
  return end ? Math.max(1, Math.ceil((end.getTime() - now.getTime()) / 1000)) : undefined;
}
