import { PutItemCommand, UpdateItemCommand, type AttributeValue } from '@aws-sdk/client-dynamodb';
import type { PutCommandInput, UpdateCommandInput } from '@aws-sdk/lib-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { isConditionFailure, writeClient } from './dynamo.ts';

/**
 * Conditional writes that say what stood in their way. Every state change in the store is one conditional write; when
 * its condition fails, the item DynamoDB checked it against is returned with the answer (ReturnValuesOnConditionCheckFailure
 * ALL_OLD), so the caller can decide what to do — refuse, sweep, create, retry — without reading the item again.
 *
 *   const r = await conditionalUpdate({ TableName, Key, UpdateExpression, ConditionExpression, ... });
 *   if (!r.ok) … r.seen …   // the item as the failed condition saw it; undefined when there was none
 *
 * Any error other than a failed condition is thrown as it came.
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
  const { Key, ExpressionAttributeValues, ...rest } = input;
  const command = new UpdateItemCommand({
    ...rest,
    Key: marshall(Key, MARSHALL),
    ...(ExpressionAttributeValues ? { ExpressionAttributeValues: marshall(ExpressionAttributeValues, MARSHALL) } : {}),
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  });
  return written(() => writeClient().send(command));
}

export async function conditionalPut(input: Conditional<PutCommandInput>): Promise<ConditionalResult> {
  const { Item, ExpressionAttributeValues, ...rest } = input;
  const command = new PutItemCommand({
    ...rest,
    Item: marshall(Item, MARSHALL),
    ...(ExpressionAttributeValues ? { ExpressionAttributeValues: marshall(ExpressionAttributeValues, MARSHALL) } : {}),
    ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
  });
  return written(() => writeClient().send(command));
}

/** As the document client marshals (lambdas/store/dynamo.ts): attributes whose value is undefined are left out. */
const MARSHALL = { removeUndefinedValues: true } as const;

async function written(send: () => Promise<{ Attributes?: Record<string, AttributeValue> }>): Promise<ConditionalResult> {
  try {
    const out = await send();
    return out.Attributes ? { ok: true, attributes: unmarshall(out.Attributes) as StoredItem } : { ok: true };
  } catch (err) {
    return refused(err);
  }
}

function refused(err: unknown): { ok: false; seen: StoredItem | undefined } {
  if (!isConditionFailure(err)) throw err;
  return { ok: false, seen: seenItem(err) };
}

/**
 * The item a failed condition returned. The document client does not translate it (it is on the error, not the
 * output it unmarshalls), so it is still in wire format: { attr: { S: … } }.
 */
export function seenItem(err: unknown): StoredItem | undefined {
  const raw = (err as { Item?: Record<string, AttributeValue> }).Item;
  return raw ? (unmarshall(raw) as StoredItem) : undefined;
}
