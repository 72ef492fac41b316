import { randomUUID } from 'node:crypto';
import type { AttributeValue, PutItemCommandInput, UpdateItemCommandInput } from '@aws-sdk/client-dynamodb';
import type { PutCommandInput, UpdateCommandInput } from '@aws-sdk/lib-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { isConditionFailure, storeWire } from './dynamo.ts';

/**
 * Conditional writes that say what stood in their way. Every state change in the store is one conditional write; when
 * its condition fails, the item DynamoDB checked it against is returned with the answer (ReturnValuesOnConditionCheckFailure
 * ALL_OLD), so the caller can decide what to do — refuse, sweep, create, retry — without reading the item again.
 *
 *   const r = await conditionalUpdate({ TableName, Key, UpdateExpression, ConditionExpression, ... });
 *   if (!r.ok) … r.seen …   // the item as the failed condition saw it; undefined when there was none
 *
 * Any error other than a failed condition is thrown as it came.
 *
 * A write happens once, even when the AWS SDK sends it twice. The SDK sends a request again when its answer was lost
 * (a connection dropped after DynamoDB applied the write); that second send meets the first one's result, and used to
 * either fail its condition — read by the caller as another writer's move: a turn claimed by nobody, a 409 for the
 * user's own cancel — or pass it and apply an ADD twice. So every write here stores a token of its own on the item
 * (attribute `writeToken`) and is conditioned on the item not bearing it already: the second send is refused, and a
 * refusal that sees the write's own token is its success, answered with the item as that write left it. When another
 * write changed the item between the two sends, its token is gone: writes on busy items (a usage window's holds, a
 * developer's leases) therefore also condition on their own key, and recognise it in `seen` (budgets/ledger.ts,
 * plans/leases.ts). The token is never in what these functions return.
 */

export type StoredItem = Record<string, unknown>;

export type ConditionalResult =
  /** The write happened; `attributes` are what the input's ReturnValues asked for (absent when it asked for none). */
  | { ok: true; attributes?: StoredItem }
  /** The condition failed; `seen` is the item it was checked against, undefined when no item had that key. */
  | { ok: false; seen: StoredItem | undefined };

/** A write's input without the option this module sets itself; a condition is required (else the write cannot fail). */
type Conditional<T> = Omit<T, 'ReturnValuesOnConditionCheckFailure' | 'ConditionExpression'> & { ConditionExpression: string };

export async function conditionalUpdate(input: Conditional<UpdateCommandInput>): Promise<ConditionalResult> {
  return tokenedUpdate(input);
}

/** An update made once (the token), under the caller's condition when there is one. */
async function tokenedUpdate(input: Omit<UpdateCommandInput, 'ReturnValuesOnConditionCheckFailure'>): Promise<ConditionalResult> {
  const { Key, ExpressionAttributeValues, ExpressionAttributeNames, UpdateExpression, ConditionExpression, ...rest } = input;
  const token = randomUUID();
  const command: UpdateItemCommandInput = {
    ...rest,
    Key: marshall(Key, MARSHALL),
    UpdateExpression: settingToken(UpdateExpression ?? ''),
    ConditionExpression: ConditionExpression ? `(${ConditionExpression}) AND ${NOT_YET}` : NOT_YET,
    ExpressionAttributeNames: { ...ExpressionAttributeNames, ...TOKEN_NAMES },
    ExpressionAttributeValues: marshall({ ...ExpressionAttributeValues, [TOKEN_VALUE]: token }, MARSHALL),
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  };
  return written(token, () => storeWire().write('UpdateItem', command));
}

/**
 * An update with no condition of its own (an ADD to a counter), made once however often the SDK sends it. Only
 * another write between the two sends can let a second send through (see above): for counters where that matters,
 * condition on the write's own key instead.
 */
export async function updateOnce(
  input: Omit<UpdateCommandInput, 'ReturnValuesOnConditionCheckFailure' | 'ConditionExpression'>,
): Promise<StoredItem | undefined> {
  const r = await tokenedUpdate(input);
  // Only the token's condition was set, and a refusal that sees this write's token is answered as its success.
  if (!r.ok) throw new Error('updateOnce: a write without a condition of its own was refused');
  return r.attributes;
}

export async function conditionalPut(input: Conditional<PutCommandInput>): Promise<ConditionalResult> {
  const { Item, ExpressionAttributeValues, ExpressionAttributeNames, ConditionExpression, ...rest } = input;
  const token = randomUUID();
  const command: PutItemCommandInput = {
    ...rest,
    Item: marshall({ ...Item, [TOKEN_ATTRIBUTE]: token }, MARSHALL),
    ConditionExpression: `(${ConditionExpression}) AND ${NOT_YET}`,
    ExpressionAttributeNames: { ...ExpressionAttributeNames, ...TOKEN_NAMES },
    ExpressionAttributeValues: marshall({ ...ExpressionAttributeValues, [TOKEN_VALUE]: token }, MARSHALL),
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  };
  return written(token, () => storeWire().write('PutItem', command));
}

/** The attribute holding the token of the last write made here, and its placeholders. */
const TOKEN_ATTRIBUTE = 'writeToken';
const TOKEN_NAMES = { '#writeToken': TOKEN_ATTRIBUTE };
const TOKEN_VALUE = ':writeToken';
/** The item does not bear this write's token: this write has not been applied yet. */
const NOT_YET = '(attribute_not_exists(#writeToken) OR #writeToken <> :writeToken)';

/** `expression` with the token set too: into its SET clause, or in a SET clause of its own. */
function settingToken(expression: string): string {
  const set = /(^|\s)SET\s+/i.exec(expression);
  if (!set) return `SET #writeToken = :writeToken ${expression}`.trimEnd();
  const at = set.index + set[0].length;
  return `${expression.slice(0, at)}#writeToken = :writeToken, ${expression.slice(at)}`;
}

/** As the document client marshals (lambdas/store/dynamo.ts): attributes whose value is undefined are left out. */
const MARSHALL = { removeUndefinedValues: true } as const;

async function written(token: string, send: () => Promise<{ Attributes?: Record<string, AttributeValue> }>): Promise<ConditionalResult> {
  try {
    const out = await send();
    return out.Attributes ? { ok: true, attributes: withoutToken(unmarshall(out.Attributes) as StoredItem) } : { ok: true };
  } catch (err) {
    if (!isConditionFailure(err)) throw err;
    const raw = (err as { Item?: Record<string, AttributeValue> }).Item;
    // The SDK's second send of a write its first send applied: the item as this write left it.
    if (raw?.[TOKEN_ATTRIBUTE]?.S === token) return { ok: true, attributes: withoutToken(unmarshall(raw) as StoredItem) };
    return { ok: false, seen: seenItem(err) };
  }
}

function withoutToken(item: StoredItem): StoredItem {
  const { [TOKEN_ATTRIBUTE]: _token, ...rest } = item;
  return rest;
}

/**
 * The item a failed condition returned. The document client does not translate it (it is on the error, not the
 * output it unmarshalls), so it is still in wire format: { attr: { S: … } }.
 */
export function seenItem(err: unknown): StoredItem | undefined {
  const raw = (err as { Item?: Record<string, AttributeValue> }).Item;
  return raw ? withoutToken(unmarshall(raw) as StoredItem) : undefined;
}
