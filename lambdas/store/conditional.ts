import type { AttributeValue } from '@aws-sdk/client-dynamodb';
import { PutCommand, UpdateCommand, type PutCommandInput, type UpdateCommandInput } from '@aws-sdk/lib-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { documentClient, isConditionFailure } from './dynamo.ts';

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
  try {
    const out = await documentClient().send(new UpdateCommand({ ...input, ReturnValuesOnConditionCheckFailure: 'ALL_OLD' }));
    return out.Attributes ? { ok: true, attributes: out.Attributes } : { ok: true };
  } catch (err) {
    return refused(err);
  }
}

export async function conditionalPut(input: Conditional<PutCommandInput>): Promise<ConditionalResult> {
  try {
    const out = await documentClient().send(new PutCommand({ ...input, ReturnValuesOnConditionCheckFailure: 'ALL_OLD' }));
    return out.Attributes ? { ok: true, attributes: out.Attributes } : { ok: true };
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
