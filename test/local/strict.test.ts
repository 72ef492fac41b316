import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, inject, it, vi } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import { MAX_CHAIN_INVOCATIONS } from '../../bin/local/recursion.ts';
import { startGateway, type RunningGateway } from '../../bin/local/runtime.ts';
import { type FunctionSpec, functionSpec } from '../../lambdas/handlers/manifest.ts';
import { drained } from '../support/drained.ts';
import { chainLinks } from './fixtures/chain.ts';

/**
 * The local runtime is as strict as AWS where it used to be more lenient (docs/local.md, "As strict as AWS"): each
 * function sees only the environment its manifest entry grants and may call only the tables and queues it grants;
 * Lambda's recursive-loop detection cuts a chain at its 17th invocation of a function that does not allow recursion;
 * requests over AWS's limits get AWS's answer, not the handler's.
 */

const probe: FunctionSpec = {
  id: 'Probe',
  entry: 'test/local/fixtures/aws-probe.ts',
  description: 'test probe: makes the AWS call it is asked for',
  memoryMb: 128,
  timeoutSeconds: 29,
  trigger: {
    kind: 'rest',
    routes: [
      { method: 'GET', path: '/probe' },
      { method: 'POST', path: '/probe' },
    ],
  },
  access: { tables: { Registry: 'read' }, providers: false, queues: ['run'] },
};

/** A function whose messages send the next one to its own trigger queue. */
const chain = (id: string, queue: 'turn' | 'webhook', recursion: boolean): FunctionSpec => ({
  id,
  entry: 'test/local/fixtures/chain.ts',
  description: `test chain on the ${queue} queue`,
  memoryMb: 128,
  timeoutSeconds: 30,
  trigger: { kind: 'sqs', queue, maxConcurrency: 1 },
  access: { tables: {}, providers: false, queues: [queue] },
  ...(recursion ? { recursion: { allowed: true, reason: 'the test chain ends itself at stopAt' } } : {}),
});

let gw: RunningGateway;
beforeAll(async () => {
  gw = await startGateway({
    dynamoEndpoint: inject('dynamoEndpoint'),
    tablePrefix: 'strict',
    simulateUpstreams: true,
    functions: [functionSpec('Channeling'), probe, chain('ChainStopped', 'turn', false), chain('ChainAllowed', 'webhook', true)],
    restIntegrationTimeoutMs: 1_000,
  });
}, 60_000);
afterAll(() => gw?.stop());

async function ask(query: Record<string, string>): Promise<Record<string, unknown>> {
  const res = await fetch(`${gw.url}/probe?${new URLSearchParams(query)}`);
  expect(res.status).toBe(200);
  return (await res.json()) as Record<string, unknown>;
}

describe('each function gets only the environment its manifest entry grants', () => {
  it('the probe (run queue, Registry read) sees the run queue, not the webhook queue, the provider key or the scheduler', async () => {
    const seen = await ask({
      do: 'env',
      names: 'RUN_QUEUE_URL,WEBHOOK_QUEUE_URL,WEBHOOK_DEAD_LETTER_QUEUE_URL,ANTHROPIC_API_KEY,SCHEDULE_GROUP_NAME,REGISTRY_TABLE,AWS_LAMBDA_FUNCTION_NAME',
    });
    expect(seen).toEqual({
      RUN_QUEUE_URL: gw.queues.urls.RUN_QUEUE_URL,
      WEBHOOK_QUEUE_URL: null,
      WEBHOOK_DEAD_LETTER_QUEUE_URL: null,
      ANTHROPIC_API_KEY: null,
      SCHEDULE_GROUP_NAME: null,
      REGISTRY_TABLE: gw.tables.REGISTRY_TABLE,
      AWS_LAMBDA_FUNCTION_NAME: 'probe',
    });
    // The test process (no invocation) keeps the whole environment.
    expect(process.env.WEBHOOK_QUEUE_URL).toBe(gw.queues.urls.WEBHOOK_QUEUE_URL);
  });

  it('a function sending to a queue it was not granted fails: its URL is not in its environment', async () => {
    expect(await ask({ do: 'send-to', queue: 'webhook' })).toEqual({
      result: 'Error: WEBHOOK_QUEUE_URL is not set: this function may not send to the webhook queue (manifest access.queues)',
    });
    expect(await ask({ do: 'send-to', queue: 'run' })).toEqual({ result: 'ok' });
  });

  it('…and knowing the URL does not help: SQS answers AccessDeniedException, as IAM would', async () => {
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const denied = (await ask({ do: 'send', url: gw.queues.urls.WEBHOOK_QUEUE_URL })).result as string;
    expect(denied).toMatch(
      /^AccessDenied(Exception)?: User: arn:aws:sts::000000000000:assumed-role\/probe-role\/probe is not authorized to perform: sqs:SendMessage/,
    );
    expect(denied).toContain('queue/webhook');
    expect(await ask({ do: 'send', url: gw.queues.urls.RUN_QUEUE_URL })).toEqual({ result: 'ok' });
    vi.restoreAllMocks();
  });

  it('tables: read where granted read, nothing where not granted, no write without readwrite', async () => {
    vi.spyOn(console, 'error').mockImplementation(() => undefined);
    const registry = gw.tables.REGISTRY_TABLE!;
    const vessels = gw.tables.VESSELS_TABLE!;
    const get = (await ask({ do: 'get', table: registry })).result as string;
    expect(get).not.toMatch(/AccessDenied/); // allowed (the probe's key may not match the schema: that is DynamoDB's answer)
    expect((await ask({ do: 'put', table: registry })).result).toMatch(
      new RegExp(`^AccessDeniedException: .* is not authorized to perform: dynamodb:PutItem on resource: .*table/${registry} `),
    );
    expect((await ask({ do: 'get', table: vessels })).result).toMatch(/^AccessDeniedException: .*dynamodb:GetItem on resource: .*table\//);
    vi.restoreAllMocks();
  });

  it('each invocation carries a trace header of its own, as Lambda sets _X_AMZN_TRACE_ID', async () => {
    const a = (await ask({ do: 'env', names: '_X_AMZN_TRACE_ID' }))._X_AMZN_TRACE_ID as string;
    const b = (await ask({ do: 'env', names: '_X_AMZN_TRACE_ID' }))._X_AMZN_TRACE_ID as string;
    expect(a).toMatch(/^Root=1-[0-9a-f]{8}-[0-9a-f]{24};/);
    expect(b).not.toBe(a);
  });
});

describe("Lambda's recursive-loop detection", () => {
  it(`a chain of sends to a function's own queue is cut at its ${MAX_CHAIN_INVOCATIONS + 1}th invocation, unless the function allows recursion`, async () => {
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    const sqs = sqsClient(gw.queues.endpoint);
    try {
      for (const queue of ['turn', 'webhook'] as const) {
        const url = queue === 'turn' ? gw.queues.urls.TURN_QUEUE_URL : gw.queues.urls.WEBHOOK_QUEUE_URL;
        await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: JSON.stringify({ n: 1, stopAt: 20, queue }) }));
      }
      await expect.poll(() => chainLinks().filter((l) => l.queue === 'webhook').length, { timeout: 30_000 }).toBe(20);
      await expect.poll(() => chainLinks().filter((l) => l.queue === 'turn').length, { timeout: 30_000 }).toBe(MAX_CHAIN_INVOCATIONS);
      // The 17th message stays on the queue, given back and never handed to the function.
      await drained(gw, { quietMs: 1_000 });
      const stopped = chainLinks().filter((l) => l.queue === 'turn');
      expect(stopped.map((l) => l.n)).toEqual(Array.from({ length: MAX_CHAIN_INVOCATIONS }, (_, i) => i + 1));
      // One chain: every link after the first carries the first one's root.
      const root = stopped[1]!.trace!.split(';')[0];
      expect(stopped.slice(1).every((l) => l.trace?.startsWith(`${root};`))).toBe(true);
      expect(stopped[0]!.trace).toBeUndefined(); // the test's own message starts the chain
      expect(warn.mock.calls.map((c) => String(c[0])).filter((line) => line.includes('recursive-loop detection stopped'))).toHaveLength(1);
      expect(String(warn.mock.calls.find((c) => String(c[0]).includes('recursive-loop'))![0])).toContain('ChainStopped 16 times');
    } finally {
      sqs.destroy();
      warn.mockRestore();
    }
  }, 90_000);
});

describe("AWS's request limits, with AWS's answers", () => {
  it('a function URL refuses an invocation whose event is over 6 MB with 413, before the handler', async () => {
    const body = JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: 1, messages: [{ role: 'user', content: 'x'.repeat(6 * 1024 * 1024) }] });
    const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    expect(res.status).toBe(413);
    expect(await res.json()).toEqual({ Message: 'Request must be smaller than 6291456 bytes for the InvokeFunction operation' });
  });

  it('the REST API: over 10 MB → 413 Request Too Long; over Lambda’s 6 MB → 502; past 29 s → 504 while the function runs on', async () => {
    const big = await fetch(`${gw.url}/probe`, { method: 'POST', body: 'x'.repeat(10 * 1024 * 1024 + 1) });
    expect([big.status, await big.json()]).toEqual([413, { message: 'Request Too Long' }]);
    const over = await fetch(`${gw.url}/probe`, { method: 'POST', body: 'x'.repeat(7 * 1024 * 1024) });
    expect([over.status, await over.json()]).toEqual([502, { message: 'Internal server error' }]);
    const fits = await fetch(`${gw.url}/probe`, { method: 'POST', body: 'x'.repeat(1024) });
    expect([fits.status, await fits.json()]).toEqual([200, { bodyBytes: 1024 }]);
    // This gateway's integration time-out is 1 s (29 s by default).
    const slow = await fetch(`${gw.url}/probe?do=sleep&ms=1500`);
    expect([slow.status, await slow.json()]).toEqual([504, { message: 'Endpoint request timed out' }]);
  });
});
