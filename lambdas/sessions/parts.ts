import { randomUUID } from 'node:crypto';
import { BatchGetCommand, BatchWriteCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { logger } from '../observability/logger.ts';
import { conditionalPut, conditionalUpdate, type StoredItem } from '../store/conditional.ts';
import { documentClient } from '../store/dynamo.ts';
import type { PartFrame } from './frames.ts';
import { PARTS_TTL_SECONDS } from '../config/timing.ts';

/**
 * A client's message over API Gateway's 32 KB frame, sent as `part` frames (docs/ws.md, "Large messages") and joined
 * here. Each frame is its own invocation, perhaps on another instance, so the parts wait in the Sessions table:
 *
 *   - one item per message, `parts#<connection>#<id>`: its `count`, a `nonce` naming this use of the id, the indexes
 *     received (`got`, a number set) and their bytes, and `doneAt` once joined or refused;
 *   - one item per part, `part#<connection>#<id>#<nonce>#<index>`, holding its `data` (UTF-16, binary).
 *
 * A part is three writes: the message item is opened (or found, with the same count), the part's data is put under
 * its nonce, then its index is added — only if not there yet, so a repeated part counts once. The write that adds
 * the last index (or passes the size limit) is followed by a claim (`doneAt`, conditional): exactly one invocation
 * joins the message, or refuses it. A part's data is written before its index, so whoever sees every index reads
 * every part. The nonce keeps a message from meeting another use of its id's leftovers.
 */

/** The most bytes (UTF-8) a joined message may hold: a session item must hold it beside the conversation. */
export { PARTS_TTL_SECONDS };
export const MAX_JOINED_BYTES = 256 * 1024;

export type PartOutcome =
  /** Stored: the message waits for its other parts. */
  | { kind: 'pending' }
  /** A part received already, or one of a message joined or refused already: nothing was done. */
  | { kind: 'repeated' }
  /** The part (or its whole message, `message_too_large`) is refused: the client is told once. */
  | { kind: 'refused'; error: 'invalid_part' | 'message_too_large'; message: string }
  /** The last part: the message's JSON text, to be handled as one frame. */
  | { kind: 'joined'; text: string };

const table = () => env().SESSIONS_TABLE;
const messageKey = (connectionId: string, id: string) => ({ pk: `parts#${connectionId}#${id}` });
const partKey = (connectionId: string, id: string, nonce: string, index: number) => ({ pk: `part#${connectionId}#${id}#${nonce}#${index}` });

interface MessageItem {
  count: number;
  nonce: string;
  got?: Set<number>;
  bytes?: number;
  doneAt?: number;
  expiresAt: number;
}

const asMessage = (item: StoredItem): MessageItem => item as unknown as MessageItem;

/** One part of a client's message, from its connection: stored, and joined with the others when it is the last. */
export async function receivePart(connectionId: string, part: PartFrame, now = clock.now()): Promise<PartOutcome> {
  const nowSeconds = Math.floor(now / 1000);
  const expiresAt = nowSeconds + PARTS_TTL_SECONDS;
  const key = messageKey(connectionId, part.id);
  const bytes = Buffer.byteLength(part.data);

  // 1. The message, opened by its first part or found as the others left it (same count, not expired, not done).
  let message: MessageItem | undefined;
  for (let attempt = 0; !message && attempt < 3; attempt++) {
    const opened = await conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: 'SET #count = if_not_exists(#count, :count), nonce = if_not_exists(nonce, :nonce), expiresAt = :exp, connectionId = :conn',
      ConditionExpression: 'attribute_not_exists(pk) OR (#count = :count AND expiresAt > :now AND attribute_not_exists(doneAt))',
      ExpressionAttributeNames: { '#count': 'count' },
      ExpressionAttributeValues: { ':count': part.count, ':nonce': randomUUID(), ':exp': expiresAt, ':conn': connectionId, ':now': nowSeconds },
      ReturnValues: 'ALL_NEW',
    });
    if (opened.ok) {
      message = asMessage(opened.attributes!);
      break;
    }
    const seen = opened.seen ? asMessage(opened.seen) : undefined;
    if (!seen) continue; // deleted meanwhile (its TTL): open it again
    if (seen.expiresAt <= nowSeconds) {
      // Its parts stopped coming long ago: this id starts a new message (the old parts are under the old nonce).
      await conditionalPut({
        TableName: table(),
        Item: { ...key, count: part.count, nonce: randomUUID(), expiresAt, connectionId },
        ConditionExpression: 'expiresAt = :seen',
        ExpressionAttributeValues: { ':seen': seen.expiresAt },
      });
      continue;
    }
    if (seen.doneAt !== undefined) return { kind: 'repeated' };
    return {
      kind: 'refused',
      error: 'invalid_part',
      message: `Part ${part.index} of "${part.id}" says count ${part.count}, but the parts received before it say ${seen.count}: every part of a message carries the same count`,
    };
  }
  if (!message) throw new Error(`The parts of "${part.id}" kept changing`);
  if (message.got?.has(part.index)) return repeated(await afterAdd(connectionId, part.id, message, now));

  // 2. The data, under this use of the id. The first data of an index stays: a repeated part changes nothing.
  await conditionalPut({
    TableName: table(),
    // As UTF-16 code units: a slice cut between the two halves of a surrogate pair is kept as it came, and joins whole.
    Item: { ...partKey(connectionId, part.id, message.nonce, part.index), data: Buffer.from(part.data, 'utf16le'), expiresAt },
    ConditionExpression: 'attribute_not_exists(pk)',
  });

  // 3. The index, once.
  const added = await conditionalUpdate({
    TableName: table(),
    Key: key,
    UpdateExpression: 'ADD got :index, bytes :bytes',
    ConditionExpression: 'nonce = :nonce AND attribute_not_exists(doneAt) AND NOT contains(got, :i)',
    ExpressionAttributeValues: { ':index': new Set([part.index]), ':bytes': bytes, ':nonce': message.nonce, ':i': part.index },
    ReturnValues: 'ALL_NEW',
  });
  if (!added.ok) {
    const seen = added.seen ? asMessage(added.seen) : undefined;
    // Added by a repeat of this part meanwhile: it may still have to be joined (that repeat may have stopped there).
    return seen && seen.nonce === message.nonce && seen.doneAt === undefined
      ? repeated(await afterAdd(connectionId, part.id, seen, now))
      : { kind: 'repeated' };
  }
  const after = asMessage(added.attributes!);
  if (after.bytes !== undefined && after.bytes > MAX_JOINED_BYTES) {
    if (!(await claim(key, after.nonce, 'too_large', now))) return { kind: 'repeated' };
    await forget(connectionId, part.id, after);
    return {
      kind: 'refused',
      error: 'message_too_large',
      message: `The parts of "${part.id}" hold more than ${MAX_JOINED_BYTES} bytes, the most a message may have: it is dropped, and its further parts are ignored`,
    };
  }
  return afterAdd(connectionId, part.id, after, now);
}

/** A repeated part's outcome: it joins a message its first copy completed but did not join; else it did nothing. */
const repeated = (outcome: PartOutcome): PartOutcome => (outcome.kind === 'pending' ? { kind: 'repeated' } : outcome);

/** After an index was added: the message is joined by the one invocation whose claim succeeds once all are in. */
async function afterAdd(connectionId: string, id: string, message: MessageItem, now: number): Promise<PartOutcome> {
  if (message.doneAt !== undefined) return { kind: 'repeated' };
  if ((message.got?.size ?? 0) < message.count) return { kind: 'pending' };
  if (!(await claim(messageKey(connectionId, id), message.nonce, 'joined', now))) return { kind: 'repeated' };
  const text = await readParts(connectionId, id, message);
  await forget(connectionId, id, message);
  return { kind: 'joined', text };
}

/** Marks the message done (joined or refused); false when another invocation did. */
async function claim(key: { pk: string }, nonce: string, outcome: 'joined' | 'too_large', now: number): Promise<boolean> {
  const claimed = await conditionalUpdate({
    TableName: table(),
    Key: key,
    UpdateExpression: 'SET doneAt = :now, outcome = :outcome',
    ConditionExpression: 'nonce = :nonce AND attribute_not_exists(doneAt)',
    ExpressionAttributeValues: { ':now': now, ':outcome': outcome, ':nonce': nonce },
  });
  return claimed.ok;
}

/** The data of every part, in index order (strongly consistent: each was written before its index was added). */
async function readParts(connectionId: string, id: string, message: MessageItem): Promise<string> {
  const keys = Array.from({ length: message.count }, (_, i) => partKey(connectionId, id, message.nonce, i));
  const data = new Map<string, string>();
  let wanted: Record<string, unknown>[] = keys;
  for (let attempt = 0; wanted.length > 0; attempt++) {
    if (attempt > 0) await new Promise((r) => setTimeout(r, Math.min(1000, 50 * 2 ** attempt)));
    if (attempt > 8) throw new Error(`The parts of "${id}" could not be read`);
    const out = await documentClient().send(new BatchGetCommand({ RequestItems: { [table()]: { Keys: wanted, ConsistentRead: true } } }));
    for (const item of out.Responses?.[table()] ?? []) data.set(item.pk as string, Buffer.from(item.data as Uint8Array).toString('utf16le'));
    wanted = (out.UnprocessedKeys?.[table()]?.Keys as Record<string, unknown>[] | undefined) ?? [];
  }
  return keys
    .map((k) => {
      const slice = data.get(k.pk);
      if (slice === undefined) throw new Error(`Part ${k.pk} of a complete message is missing`);
      return slice;
    })
    .join('');
}

/** Deletes the parts' data (the message item stays until its TTL, so late repeats are recognised); best effort. */
async function forget(connectionId: string, id: string, message: MessageItem): Promise<void> {
  const indexes = [...(message.got ?? [])];
  try {
    for (let i = 0; i < indexes.length; i += 25) {
      const deletes = indexes.slice(i, i + 25).map((index) => ({ DeleteRequest: { Key: partKey(connectionId, id, message.nonce, index) } }));
      await documentClient().send(new BatchWriteCommand({ RequestItems: { [table()]: deletes } }));
    }
  } catch (err) {
    // Left to the table's TTL.
    logger.warn('the parts of a joined /ws message could not be deleted', { connectionId, partId: id, error: err as Error });
  }
}
