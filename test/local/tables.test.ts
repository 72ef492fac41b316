import { randomBytes } from 'node:crypto';
import { CreateTableCommand, DescribeTableCommand, PutItemCommand, QueryCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, inject, it, onTestFinished } from 'vitest';
import { dynamoClient, ensureTables, startDynamoLocal, tableNames } from '../../bin/local/dynamodb.ts';
import { TABLES, VESSELS_RECONCILE_INDEX } from '../../lambdas/store/tables.ts';

let client: DynamoDBClient;
beforeAll(() => {
  client = dynamoClient(inject('dynamoEndpoint'));
});
afterAll(() => client.destroy());

const prefix = () => `ix${randomBytes(4).toString('hex')}`;
const describeTable = async (name: string, on = client) => (await on.send(new DescribeTableCommand({ TableName: name }))).Table!;

/** Two vessels, one carrying the index's attributes and one not; the index query sees only the first. */
async function sparseQuery(table: string, on = client): Promise<string[]> {
  const out = await on.send(
    new QueryCommand({
      TableName: table,
      IndexName: VESSELS_RECONCILE_INDEX,
      KeyConditionExpression: 'reconcileShard = :s AND reconcileAt <= :t',
      ExpressionAttributeValues: { ':s': { S: '0' }, ':t': { N: '2000' } },
    }),
  );
  return (out.Items ?? []).map((item) => item.pk!.S!);
}
async function putVessels(table: string, on = client): Promise<void> {
  await on.send(new PutItemCommand({ TableName: table, Item: { pk: { S: 'vessel#watched' }, reconcileShard: { S: '0' }, reconcileAt: { N: '1000' } } }));
  await on.send(new PutItemCommand({ TableName: table, Item: { pk: { S: 'vessel#done' }, status: { S: 'COMPLETED' } } }));
}

describe('the tables of TABLES in DynamoDB Local', () => {
  it('the Vessels table has the sparse `reconcile` and `parked` indexes (projection ALL) and the `project` listing, ACTIVE', async () => {
    const names = await ensureTables(inject('dynamoEndpoint'), prefix());
    const vessels = await describeTable(names.VESSELS_TABLE);
    expect(vessels.GlobalSecondaryIndexes?.map((i) => i.IndexName).sort()).toEqual(['parked', 'project', 'reconcile']);
    expect(vessels.GlobalSecondaryIndexes!.find((i) => i.IndexName === 'project')).toMatchObject({
      IndexStatus: 'ACTIVE',
      KeySchema: [
        { AttributeName: 'projectId', KeyType: 'HASH' },
        { AttributeName: 'createdAt', KeyType: 'RANGE' },
      ],
      Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['vesselId', 'userId', 'status', 'scheduledFor', 'startedAt', 'completedAt'] },
    });
    const expected = [
      ['parked', 'parkedFor', 'parkedAt'],
      ['reconcile', 'reconcileShard', 'reconcileAt'],
    ] as const;
    for (const [name, hash, range] of expected) {
      expect(
        vessels.GlobalSecondaryIndexes!.find((i) => i.IndexName === name),
        name,
      ).toMatchObject({
        IndexName: name,
        IndexStatus: 'ACTIVE',
        KeySchema: [
          { AttributeName: hash, KeyType: 'HASH' },
          { AttributeName: range, KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'ALL' },
      });
    }
    expect(vessels.AttributeDefinitions).toEqual(
      expect.arrayContaining([
        { AttributeName: 'pk', AttributeType: 'S' },
        { AttributeName: 'reconcileShard', AttributeType: 'S' },
        { AttributeName: 'reconcileAt', AttributeType: 'N' },
        { AttributeName: 'parkedFor', AttributeType: 'S' },
        { AttributeName: 'parkedAt', AttributeType: 'N' },
      ]),
    );
    // Only the vessels carrying both attributes are in it.
    await putVessels(names.VESSELS_TABLE);
    expect(await sparseQuery(names.VESSELS_TABLE)).toEqual(['vessel#watched']);
    // The other tables have none, as TABLES says.
    for (const spec of TABLES.filter((t) => !t.indexes)) {
      expect((await describeTable(names[spec.envVar])).GlobalSecondaryIndexes, spec.id).toBeUndefined();
    }
  });

  it('adds the index to a Vessels table made by an older version (items already there included), and a second start changes nothing', async () => {
    // A DynamoDB Local of its own, as `npm start` has: DynamoDB Local's index backfill can stall for good while other
    // clients create tables at the same time (the other test files on the shared one do), which `npm start` never does.
    const own = await startDynamoLocal();
    onTestFinished(() => own.stop());
    const client = dynamoClient(own.endpoint);
    onTestFinished(() => client.destroy());
    const p = prefix();
    const name = tableNames(p).VESSELS_TABLE;
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
      }),
    );
    await putVessels(name, client);
    expect((await describeTable(name, client)).GlobalSecondaryIndexes).toBeUndefined();

    await ensureTables(own.endpoint, p);
    const after = await describeTable(name, client);
    expect(after.GlobalSecondaryIndexes?.map((i) => [i.IndexName, i.IndexStatus]).sort()).toEqual([
      ['parked', 'ACTIVE'],
      ['project', 'ACTIVE'],
      ['reconcile', 'ACTIVE'],
    ]);
    expect(await sparseQuery(name, client)).toEqual(['vessel#watched']);

    await ensureTables(own.endpoint, p);
    expect((await describeTable(name, client)).GlobalSecondaryIndexes).toHaveLength(3);
    // Its own DynamoDB Local's start and three indexes built one after another: about 25 s on 2 busy cores.
  }, 90_000);

  it('refuses an existing index of the same name with other keys, saying what to do', async () => {
    const p = prefix();
    const name = tableNames(p).VESSELS_TABLE;
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'status', AttributeType: 'S' },
        ],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        GlobalSecondaryIndexes: [{ IndexName: 'reconcile', KeySchema: [{ AttributeName: 'status', KeyType: 'HASH' }], Projection: { ProjectionType: 'ALL' } }],
      }),
    );
    await expect(ensureTables(inject('dynamoEndpoint'), p)).rejects.toThrow(/index reconcile with other keys.*delete that table/);
  });
});
