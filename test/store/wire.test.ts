import { randomBytes } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { env } from '../../lambdas/config/env.ts';
import { documentClient, storeWire } from '../../lambdas/store/dynamo.ts';
import { StoreWire } from '../../lambdas/store/wire.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * store/wire.ts: the conditional writes in DynamoDB's JSON protocol, with the SDK's credentials, signer and retry
 * strategy. Against DynamoDB Local (what a write does) and against a scripted server (what the retry loop and the
 * error shapes do when DynamoDB answers badly).
 */

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

const table = () => env().VESSELS_TABLE;
const freshKey = () => ({ pk: { S: `wire#${randomBytes(6).toString('hex')}` } });

describe('against DynamoDB Local', () => {
  it('writes, answers the attributes asked for, and carries binary and number values both ways', async () => {
    const key = freshKey();
    const bytes = new Uint8Array([0, 1, 2, 250, 255]);
    // A Buffer too (its toJSON must not win), as the session parts store their data.
    const buffer = Buffer.from('part ✓', 'utf16le');
    await storeWire().write('PutItem', {
      TableName: table(),
      Item: { ...key, n: { N: '41' }, raw: { B: bytes }, buf: { B: buffer }, set: { BS: [buffer, bytes] } },
    });
    const out = await storeWire().write('UpdateItem', {
      TableName: table(),
      Key: key,
      UpdateExpression: 'ADD n :one',
      ExpressionAttributeValues: { ':one': { N: '1' } },
      ReturnValues: 'ALL_NEW',
    });
    expect(out.Attributes).toEqual({ ...key, n: { N: '42' }, raw: { B: bytes }, buf: { B: new Uint8Array(buffer) }, set: { BS: expect.any(Array) } });
    expect(new Set((out.Attributes!.set!.BS as Uint8Array[]).map((b) => Buffer.from(b).toString('hex')))).toEqual(
      new Set([buffer.toString('hex'), Buffer.from(bytes).toString('hex')]),
    );
    const stored = (await documentClient().send(new GetCommand({ TableName: table(), Key: { pk: key.pk.S }, ConsistentRead: true }))).Item;
    expect(stored).toMatchObject({ pk: key.pk.S, n: 42, raw: bytes, buf: new Uint8Array(buffer) });
  });

  it("a failed condition is DynamoDB's ConditionalCheckFailedException, with the item it saw, sent once", async () => {
    const key = freshKey();
    await storeWire().write('PutItem', { TableName: table(), Item: { ...key, n: { N: '1' } } });
    const err = (await storeWire()
      .write('PutItem', { TableName: table(), Item: key, ConditionExpression: 'attribute_not_exists(pk)', ReturnValuesOnConditionCheckFailure: 'ALL_OLD' })
      .catch((e: unknown) => e)) as Error & { Item?: unknown; $metadata?: { httpStatusCode?: number; attempts?: number } };
    expect(err.name).toBe('ConditionalCheckFailedException');
    expect(err.Item).toEqual({ ...key, n: { N: '1' } });
    expect(err.$metadata).toMatchObject({ httpStatusCode: 400, attempts: 1 });
  });

  it('a request DynamoDB refuses as invalid is not retried', async () => {
    const err = (await storeWire()
      .write('UpdateItem', { TableName: table(), Key: freshKey(), UpdateExpression: 'SET #missing = :v' })
      .catch((e: unknown) => e)) as Error & { $metadata?: { attempts?: number } };
    expect(err.name).toBe('ValidationException');
    expect(err.$metadata?.attempts).toBe(1);
  });
});

/** A server that answers each request with the next scripted answer and records what it was sent. */
async function scripted(answers: Array<(req: IncomingMessage, res: ServerResponse) => void>) {
  const seen: { headers: IncomingMessage['headers']; body: string }[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      seen.push({ headers: req.headers, body: Buffer.concat(chunks).toString('utf8') });
      const answer = answers.shift() ?? ok;
      answer(req, res);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client = new DynamoDBClient({
    region: 'eu-west-1',
    credentials: { accessKeyId: 'AKIDWIRE', secretAccessKey: 'secret', sessionToken: 'session-token' },
  });
  const wire = new StoreWire(client.config, url);
  return {
    wire,
    seen,
    close: async () => {
      wire.destroy();
      client.destroy();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    },
  };
}
const ok = (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': 'REQ1' });
  res.end(JSON.stringify({ Attributes: { n: { N: '7' } } }));
};
const error = (status: number, type: string) => (_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(status, { 'content-type': 'application/x-amz-json-1.0' });
  res.end(JSON.stringify({ __type: `com.amazonaws.dynamodb.v20120810#${type}`, message: `${type} happened` }));
};
const reset = (req: IncomingMessage) => req.socket.destroy();
const input = { TableName: 't', Key: { pk: { S: 'a' } }, UpdateExpression: 'ADD n :one', ExpressionAttributeValues: { ':one': { N: '1' } } };

describe('against a scripted DynamoDB', () => {
  it('signs with the credentials and region of the SDK client, for dynamodb, and names the action', async () => {
    const s = await scripted([ok]);
    try {
      expect(await s.wire.write('UpdateItem', input)).toEqual({ Attributes: { n: { N: '7' } } });
      const { headers, body } = s.seen[0]!;
      expect(headers['x-amz-target']).toBe('DynamoDB_20120810.UpdateItem');
      expect(headers['content-type']).toBe('application/x-amz-json-1.0');
      expect(headers['x-amz-security-token']).toBe('session-token');
      expect(headers.authorization).toMatch(
        /^AWS4-HMAC-SHA256 Credential=AKIDWIRE\/\d{8}\/eu-west-1\/dynamodb\/aws4_request, SignedHeaders=[^,]*host[^,]*x-amz-target[^,]*, Signature=[0-9a-f]{64}$/,
      );
      expect(JSON.parse(body)).toEqual(input);
    } finally {
      await s.close();
    }
  });

  it('retries throttling, a 500 and a dropped connection as the SDK does, then answers', async () => {
    // As many bad answers as the SDK client allows attempts (its DynamoDB default: 4): the last one is the error.
    const attempts = await new DynamoDBClient({ region: 'eu-west-1' }).config.maxAttempts();
    const bad = [error(400, 'ProvisionedThroughputExceededException'), error(500, 'InternalServerError'), reset, error(503, 'ServiceUnavailable')];
    const s = await scripted(Array.from({ length: attempts }, (_, i) => bad[i % bad.length]!));
    try {
      const err = (await s.wire.write('UpdateItem', input).catch((e: unknown) => e)) as Error & { code?: string; $metadata?: { attempts?: number } };
      expect(s.seen).toHaveLength(attempts);
      expect(err.$metadata?.attempts).toBe(attempts);
      // ...and the same write against two bad answers succeeds on its third attempt.
      const t = await scripted([error(400, 'ThrottlingException'), reset, ok]);
      try {
        expect(await t.wire.write('PutItem', { TableName: 't', Item: { pk: { S: 'b' } } })).toEqual({ Attributes: { n: { N: '7' } } });
        expect(t.seen).toHaveLength(3);
        expect(t.seen.map((x) => x.body)).toEqual(Array(3).fill(JSON.stringify({ TableName: 't', Item: { pk: { S: 'b' } } })));
      } finally {
        await t.close();
      }
    } finally {
      await s.close();
    }
  });

  it("a client error is the SDK's shape (name, message, $fault, $metadata, body fields) and is not retried", async () => {
    const s = await scripted([
      (_req, res) => {
        res.writeHead(400, { 'content-type': 'application/x-amz-json-1.0', 'x-amzn-requestid': 'REQ9' });
        res.end(
          JSON.stringify({
            __type: 'com.amazonaws.dynamodb.v20120810#TransactionCanceledException',
            Message: 'cancelled',
            CancellationReasons: [{ Code: 'None' }],
          }),
        );
      },
    ]);
    try {
      const err = (await s.wire.write('UpdateItem', input).catch((e: unknown) => e)) as Error & Record<string, unknown>;
      expect(err).toBeInstanceOf(Error);
      expect({ name: err.name, message: err.message, $fault: err.$fault, CancellationReasons: err.CancellationReasons }).toEqual({
        name: 'TransactionCanceledException',
        message: 'cancelled',
        $fault: 'client',
        CancellationReasons: [{ Code: 'None' }],
      });
      expect(err.$metadata).toEqual({ httpStatusCode: 400, requestId: 'REQ9', attempts: 1, totalRetryDelay: 0 });
      expect(s.seen).toHaveLength(1);
    } finally {
      await s.close();
    }
  });

  it('steps run around the whole write once and around each attempt', async () => {
    const s = await scripted([error(503, 'ServiceUnavailable'), ok]);
    const order: string[] = [];
    s.wire.steps.call.push(async (call, next) => {
      order.push(`call ${call.action}`);
      return next();
    });
    s.wire.steps.attempt.push(async (_call, next) => {
      order.push('attempt');
      return next();
    });
    try {
      await s.wire.write('UpdateItem', input);
      expect(order).toEqual(['call UpdateItem', 'attempt', 'attempt']);
    } finally {
      await s.close();
    }
  });
});
