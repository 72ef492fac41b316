import type { Context, SQSEvent, SQSRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { MalformedMessageError, sqsConsumer } from '../../lambdas/queues/consumer.ts';

/** A record as Lambda's SQS event source delivers it (shape of a real event, values made up). */
function record(messageId: string, body: string): SQSRecord {
  return {
    messageId,
    receiptHandle: `AQEB${messageId}Zx9f…`,
    body,
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: '1732280000000',
      SenderId: 'AROAEXAMPLE:prompt-gateway-dev-ConjureApi',
      ApproximateFirstReceiveTimestamp: '1732280000123',
    },
    messageAttributes: {},
    md5OfBody: '0'.repeat(32),
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:eu-west-1:123456789012:PromptGateway-dev-QueuesWebhookQueue-AbC',
    awsRegion: 'eu-west-1',
  };
}

const context = {
  callbackWaitsForEmptyEventLoop: false,
  functionName: 'webhook-sender',
  functionVersion: '$LATEST',
  invokedFunctionArn: 'arn:aws:lambda:eu-west-1:123456789012:function:webhook-sender',
  memoryLimitInMB: '256',
  awsRequestId: 'req-1',
  logGroupName: '/aws/lambda/webhook-sender',
  logStreamName: 'stream',
  getRemainingTimeInMillis: () => 30_000,
  done: () => undefined,
  fail: () => undefined,
  succeed: () => undefined,
} satisfies Context;

describe('sqsConsumer', () => {
  it('hands each JSON body and its record to the processor; a good batch reports no failure', async () => {
    const seen: Array<{ body: unknown; id: string }> = [];
    const handler = sqsConsumer(async (body, r) => {
      seen.push({ body, id: r.messageId });
    });
    const event: SQSEvent = { Records: [record('m1', '{"vessel":"v1"}'), record('m2', '[1,2]'), record('m3', '"text"')] };
    expect(await handler(event, context)).toEqual({ batchItemFailures: [] });
    expect(seen.sort((a, b) => a.id.localeCompare(b.id))).toEqual([
      { body: { vessel: 'v1' }, id: 'm1' },
      { body: [1, 2], id: 'm2' },
      { body: 'text', id: 'm3' },
    ]);
  });

  it('a body that is not JSON fails that record only; so does a processor that throws', async () => {
    const processed: string[] = [];
    const handler = sqsConsumer(async (body, r) => {
      if ((body as { fail?: boolean }).fail) throw new Error('delivery refused');
      processed.push(r.messageId);
    });
    const event: SQSEvent = {
      Records: [record('ok-1', '{"n":1}'), record('not-json', '{"n":'), record('throws', '{"fail":true}'), record('ok-2', '{"n":2}')],
    };
    const result = await handler(event, context);
    expect(result.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(['not-json', 'throws']);
    expect(processed.sort()).toEqual(['ok-1', 'ok-2']);
  });

  it('a batch where every record fails is answered with all of them, not thrown', async () => {
    let reason: unknown;
    const handler = sqsConsumer(async () => {
      throw new Error('never');
    });
    const event: SQSEvent = { Records: [record('a', '{}'), record('b', 'plain text')] };
    const result = await handler(event, context).catch((err: unknown) => {
      reason = err;
      return undefined;
    });
    expect(reason).toBeUndefined();
    expect(result!.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(['a', 'b']);
  });

  it('an empty body is not JSON either', async () => {
    const handler = sqsConsumer(async () => undefined);
    expect(await handler({ Records: [record('empty', '')] }, context)).toEqual({ batchItemFailures: [{ itemIdentifier: 'empty' }] });
    expect(new MalformedMessageError('x').name).toBe('MalformedMessageError');
  });
});
