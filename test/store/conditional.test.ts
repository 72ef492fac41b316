import { randomBytes } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { conditionalPut, conditionalUpdate, updateOnce } from '../../lambdas/store/conditional.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { defineStates } from '../../lambdas/store/record-states.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

// The Vessels table (pk, TTL on expiresAt) is as plain as a table gets; nothing else in this file's tables uses it.
const table = () => env().VESSELS_TABLE;
const freshKey = () => ({ pk: `cond#${randomBytes(6).toString('hex')}` });
/** The item as stored, with everything but the write token (checked on its own below). */
const stored = async (key: { pk: string }) => (await documentClient().send(new GetCommand({ TableName: table(), Key: key, ConsistentRead: true }))).Item;
const read = async (key: { pk: string }) => {
  const item = await stored(key);
  if (!item) return item;
  const { writeToken: _token, ...rest } = item;
  return rest;
};

describe('conditionalPut', () => {
  it('succeeds when the condition holds, with no attributes unless asked', async () => {
    const key = freshKey();
    expect(await conditionalPut({ TableName: table(), Item: { ...key, n: 1 }, ConditionExpression: 'attribute_not_exists(pk)' })).toEqual({ ok: true });
    expect(await read(key)).toEqual({ ...key, n: 1 });
  });

  it('returns exactly the item the failed condition saw, translated from the wire format', async () => {
    const key = freshKey();
    const item = { ...key, s: 'text', n: 42, f: 1.5, b: true, nul: null, list: [1, 'two', { three: 3 }], map: { nested: { deep: 'x' } }, empty: {} };
    await conditionalPut({ TableName: table(), Item: item, ConditionExpression: 'attribute_not_exists(pk)' });
    const r = await conditionalPut({ TableName: table(), Item: { ...key, other: 1 }, ConditionExpression: 'attribute_not_exists(pk)' });
    expect(r).toEqual({ ok: false, seen: item });
    expect(await read(key)).toEqual(item);
  });

  it('a put over an item returns the old one when asked (ReturnValues ALL_OLD)', async () => {
    const key = freshKey();
    await conditionalPut({ TableName: table(), Item: { ...key, v: 1 }, ConditionExpression: 'attribute_not_exists(pk)' });
    expect(
      await conditionalPut({
        TableName: table(),
        Item: { ...key, v: 2 },
        ConditionExpression: 'v = :one',
        ExpressionAttributeValues: { ':one': 1 },
        ReturnValues: 'ALL_OLD',
      }),
    ).toEqual({
      ok: true,
      attributes: { ...key, v: 1 },
    });
  });
});

describe('conditionalUpdate', () => {
  it('success returns the attributes ReturnValues asked for', async () => {
    const key = freshKey();
    await conditionalPut({ TableName: table(), Item: { ...key, count: 1 }, ConditionExpression: 'attribute_not_exists(pk)' });
    const r = await conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: 'ADD #c :one',
      ConditionExpression: '#c < :max',
      ExpressionAttributeNames: { '#c': 'count' },
      ExpressionAttributeValues: { ':one': 1, ':max': 10 },
      ReturnValues: 'UPDATED_NEW',
    });
    expect(r).toEqual({ ok: true, attributes: { count: 2 } });
  });

  it('failure returns exactly the item seen, and changes nothing', async () => {
    const key = freshKey();
    const item = { ...key, count: 10, holds: { a: { ai: 1, compute: 2, expiresAt: 3 } } };
    await conditionalPut({ TableName: table(), Item: item, ConditionExpression: 'attribute_not_exists(pk)' });
    const r = await conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: 'ADD #c :one',
      ConditionExpression: '#c < :max',
      ExpressionAttributeNames: { '#c': 'count' },
      ExpressionAttributeValues: { ':one': 1, ':max': 10 },
      ReturnValues: 'UPDATED_NEW',
    });
    expect(r).toEqual({ ok: false, seen: item });
    expect(await read(key)).toEqual(item);
  });

  it('failure on a missing item sees nothing', async () => {
    const key = freshKey();
    const r = await conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: 'SET v = :v',
      ConditionExpression: 'attribute_exists(pk)',
      ExpressionAttributeValues: { ':v': 1 },
    });
    expect(r).toEqual({ ok: false, seen: undefined });
    expect(await read(key)).toBeUndefined();
  });

  it('rethrows any error but a failed condition', async () => {
    const key = freshKey();
    // a placeholder the expression uses but the input does not define: a ValidationException
    await expect(
      conditionalUpdate({ TableName: table(), Key: key, UpdateExpression: 'SET v = :v', ConditionExpression: 'attribute_exists(pk)' }),
    ).rejects.toMatchObject({
      name: 'ValidationException',
    });
    await expect(conditionalPut({ TableName: `${table()}-missing`, Item: key, ConditionExpression: 'attribute_not_exists(pk)' })).rejects.toMatchObject({
      name: 'ResourceNotFoundException',
    });
  });
});

describe('a status transition is one conditional write', () => {
  const Vessel = defineStates({
    queued: ['running', 'canceled'],
    running: ['completed', 'failed', 'canceled'],
    completed: [],
    failed: [],
    canceled: [],
  });
  type Status = (typeof Vessel.statuses)[number];

  const move = (key: { pk: string }, to: Status, from?: Status) => {
    const t = Vessel.transition(to, from ? { from } : {});
    return conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: `SET ${t.set}, movedTo = :to`,
      ConditionExpression: t.condition,
      ExpressionAttributeNames: t.names,
      ExpressionAttributeValues: { ...t.values, ':to': to },
      ReturnValues: 'ALL_NEW',
    });
  };

  it('moves along the flow, and a move from a status the record is not in is refused with what it is', async () => {
    const key = freshKey();
    await conditionalPut({ TableName: table(), Item: { ...key, status: 'queued' }, ConditionExpression: 'attribute_not_exists(pk)' });
    expect(await move(key, 'running', 'queued')).toEqual({ ok: true, attributes: { ...key, status: 'running', movedTo: 'running' } });
    expect(await move(key, 'running', 'queued')).toEqual({ ok: false, seen: { ...key, status: 'running', movedTo: 'running' } });
    expect(await move(key, 'completed')).toMatchObject({ ok: true, attributes: { status: 'completed' } });
    // terminal: nothing moves it, not even to the terminal statuses reachable from elsewhere
    expect(await move(key, 'canceled')).toEqual({ ok: false, seen: { ...key, status: 'completed', movedTo: 'completed' } });
    expect(await move(key, 'failed')).toMatchObject({ ok: false, seen: { status: 'completed' } });
  });

  it('of racing moves out of one status exactly one wins', async () => {
    const key = freshKey();
    await conditionalPut({ TableName: table(), Item: { ...key, status: 'running' }, ConditionExpression: 'attribute_not_exists(pk)' });
    const targets: Status[] = ['completed', 'failed', 'canceled', 'completed', 'failed', 'canceled', 'completed', 'failed'];
    const results = await Promise.all(targets.map((to) => move(key, to, 'running')));
    const won = results.filter((r) => r.ok);
    expect(won.length).toBe(1);
    const final = (await read(key))!.status;
    for (const r of results) if (!r.ok) expect(r.seen?.status).toBe(final);
  });
});

describe('a write the SDK sends twice (its first answer lost) happens once', () => {
  let loss: AnswerLoss;
  beforeAll(() => {
    loss = loseAnswers();
  });
  /** The next write on `key` loses its answer. */
  const loseOn = (name: string, key: { pk: string }) => loss.loseNext(name, (input: WriteInput) => input.Key?.pk?.S === key.pk || input.Item?.pk?.S === key.pk);
  const counter = async () => {
    const key = freshKey();
    await conditionalPut({ TableName: table(), Item: { ...key, count: 1 }, ConditionExpression: 'attribute_not_exists(pk)' });
    return key;
  };
  const add = (key: { pk: string }, max = 10) =>
    conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: 'ADD #c :one',
      ConditionExpression: '#c < :max',
      ExpressionAttributeNames: { '#c': 'count' },
      ExpressionAttributeValues: { ':one': 1, ':max': max },
      ReturnValues: 'ALL_NEW',
    });

  it('every write stores its own token; what the functions return never carries it', async () => {
    const key = await counter();
    const first = (await stored(key))!.writeToken;
    expect(first).toMatch(/^[0-9a-f-]{36}$/);
    expect(await add(key)).toEqual({ ok: true, attributes: { ...key, count: 2 } });
    const second = (await stored(key))!.writeToken;
    expect(second).toMatch(/^[0-9a-f-]{36}$/);
    expect(second).not.toBe(first);
    expect(await add(key, 2)).toEqual({ ok: false, seen: { ...key, count: 2 } });
  });

  it('an ADD whose condition still holds is not applied twice, and answers the item as it left it', async () => {
    const key = await counter();
    loseOn('add', key);
    expect(await add(key)).toEqual({ ok: true, attributes: { ...key, count: 2 } });
    expect(loss.lost.at(-1)).toBe('add');
    expect(await read(key)).toEqual({ ...key, count: 2 });
  });

  /** queued → running, answering the item as written. */
  const start = (key: { pk: string }) =>
    conditionalUpdate({
      TableName: table(),
      Key: key,
      UpdateExpression: 'SET #s = :to',
      ConditionExpression: '#s = :from',
      ExpressionAttributeNames: { '#s': 'state' },
      ExpressionAttributeValues: { ':from': 'queued', ':to': 'running' },
      ReturnValues: 'ALL_NEW',
    });

  it('a move whose condition its own first send made false is a success, not a refusal', async () => {
    const key = freshKey();
    await conditionalPut({ TableName: table(), Item: { ...key, state: 'queued' }, ConditionExpression: 'attribute_not_exists(pk)' });
    loseOn('move', key);
    const r = await start(key);
    expect(loss.lost.at(-1)).toBe('move');
    expect(r).toEqual({ ok: true, attributes: { ...key, state: 'running' } });
    // Another writer's same move is still refused, with what it saw.
    const again = await start(key);
    expect(again).toEqual({ ok: false, seen: { ...key, state: 'running' } });
  });

  it('a put that creates an item is a success, not "exists already"', async () => {
    const key = freshKey();
    loseOn('create', key);
    expect(await conditionalPut({ TableName: table(), Item: { ...key, v: 1 }, ConditionExpression: 'attribute_not_exists(pk)' })).toMatchObject({ ok: true });
    expect(loss.lost.at(-1)).toBe('create');
    expect(await read(key)).toEqual({ ...key, v: 1 });
    expect(await conditionalPut({ TableName: table(), Item: { ...key, v: 2 }, ConditionExpression: 'attribute_not_exists(pk)' })).toEqual({
      ok: false,
      seen: { ...key, v: 1 },
    });
  });

  it('updateOnce: a counter with no condition of its own is added to once', async () => {
    const key = freshKey();
    loseOn('count', key);
    expect(
      await updateOnce({
        TableName: table(),
        Key: key,
        UpdateExpression: 'ADD n :five',
        ExpressionAttributeValues: { ':five': 5 },
        ReturnValues: 'UPDATED_NEW',
      }),
    ).toMatchObject({ n: 5 });
    expect(loss.lost.at(-1)).toBe('count');
    expect(
      await updateOnce({
        TableName: table(),
        Key: key,
        UpdateExpression: 'ADD n :five',
        ExpressionAttributeValues: { ':five': 5 },
        ReturnValues: 'UPDATED_NEW',
      }),
    ).toEqual({ n: 10 });
    expect(await read(key)).toEqual({ ...key, n: 10 });
  });

  it('the update expression keeps its clauses whatever their order (SET first, last, or none)', async () => {
    const key = await counter();
    for (const expression of ['ADD #c :one SET a = :a', 'SET a = :a ADD #c :one', 'REMOVE gone ADD #c :one', 'set a = :a']) {
      const r = await conditionalUpdate({
        TableName: table(),
        Key: key,
        UpdateExpression: expression,
        ConditionExpression: 'attribute_exists(pk)',
        ExpressionAttributeNames: expression.includes('#c') ? { '#c': 'count' } : {},
        ExpressionAttributeValues: { ...(expression.includes(':one') ? { ':one': 1 } : {}), ...(expression.includes(':a') ? { ':a': 'x' } : {}) },
      });
      expect(r, expression).toEqual({ ok: true });
    }
    expect(await read(key)).toEqual({ ...key, count: 4, a: 'x' });
  });
});
