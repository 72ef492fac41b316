import { createHmac, randomUUID } from 'node:crypto';
import { inspect } from 'node:util';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SchedulerClient } from '@aws-sdk/client-scheduler';
import { ReceiveMessageCommand, SQSClient, type Message } from '@aws-sdk/client-sqs';
import { DynamoDBDocumentClient, ScanCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { verifyWebhook } from 'prompt-gateway/webhooks';

// Before any module (the Powertools logger reads its level once, when it is created, and goes back to it after each
// invocation): every line the code has. This file runs in a process of its own (test/tiers.ts, OWN_PROCESS_FILES).
const levelBefore = vi.hoisted(() => {
  const before = process.env.POWERTOOLS_LOG_LEVEL;
  process.env.POWERTOOLS_LOG_LEVEL = 'DEBUG';
  return before;
});

import { main } from '../../bin/gateway.ts';
import { sqsClient } from '../../bin/local/queues.ts';
import { logger } from '../../lambdas/observability/logger.ts';
import { keyCipher } from '../../lambdas/registry/key-cipher.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import type { WebhookView } from '../../lambdas/deliveries/record.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { pollUntil } from '../support/vessels.ts';
import { MODEL } from '../vessels/incubate-client.ts';
import { startReceiver, type Receiver } from './receiver.ts';

/**
 * Issue 15, done-when 4: no callback secret appears in any log line, record or response. One scenario with a
 * distinctive secret exercises every path that touches it — a delivery after a failure, a delivery that exhausts its
 * retries onto the dead-letter queue, a batch, an idempotent replay, records, cancels, refusals, the operator CLI's
 * `webhook show` / `webhook redeliver` — while everything the process prints is captured; then the captured output,
 * every response, every table, every queue message and the scheduler's schedules are scanned for the secret in clear,
 * base64 or hex. The receivers, meanwhile, got valid signatures: the secret was used.
 */

vi.setConfig({ testTimeout: 180_000 });

const SECRET_ID = randomUUID();
const SECRET = `whsec-${SECRET_ID}`;
const VERBOSE = process.env.WEBHOOK_SECRETS_VERBOSE === '1';

// ---------------------------------------------------------------------------------------------------------------
// What the secret looks like in the encodings a leak could take.

const b64 = (b: Buffer) => b.toString('base64');
const b64url = (b: Buffer) => b.toString('base64url');
/** The part of a base64 text that encodes `value` whatever the bytes before it (3 alignments), trimmed of the edges. */
function base64Cores(value: string): string[] {
  const cores: string[] = [];
  for (const pad of [0, 1, 2]) {
    const bytes = Buffer.concat([Buffer.alloc(pad, 0x78), Buffer.from(value, 'utf8')]);
    for (const enc of [b64(bytes), b64url(bytes)]) {
      const trimmed = enc.replace(/=+$/, '');
      cores.push(trimmed.slice(pad === 0 ? 0 : 4, trimmed.length - 4));
    }
  }
  return cores;
}
const hex = (value: string) => Buffer.from(value, 'utf8').toString('hex');
const NEEDLES: { what: string; text: string }[] = [
  { what: 'secret', text: SECRET },
  { what: 'secret uuid', text: SECRET_ID },
  { what: 'secret uuid without dashes', text: SECRET_ID.replace(/-/g, '') },
  { what: 'secret hex', text: hex(SECRET) },
  { what: 'secret uuid hex', text: hex(SECRET_ID) },
  ...base64Cores(SECRET).map((text) => ({ what: 'secret base64', text })),
  ...base64Cores(SECRET_ID).map((text) => ({ what: 'secret uuid base64', text })),
];
/** The needles found in `text` (case-insensitive for hex and the uuid; base64 is case-sensitive). */
function leaks(text: string): string[] {
  const lower = text.toLowerCase();
  return NEEDLES.filter((n) => (n.what.includes('base64') ? text.includes(n.text) : lower.includes(n.text.toLowerCase()))).map((n) => n.what);
}

// ---------------------------------------------------------------------------------------------------------------
// Everything the process prints while the scenario runs.

const captured: string[] = [];
const restores: (() => void)[] = [];
const format = (args: unknown[]) =>
  args
    .map((a) => (typeof a === 'string' ? a : inspect(a, { depth: Infinity, maxArrayLength: Infinity, maxStringLength: Infinity, breakLength: Infinity })))
    .join(' ');

function startCapture() {
  for (const stream of [process.stdout, process.stderr]) {
    const original = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    const spy = vi.spyOn(stream, 'write').mockImplementation(((chunk: unknown, ...rest: unknown[]) => {
      captured.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString('utf8'));
      if (VERBOSE) return original(chunk, ...rest);
      const done = rest.find((r) => typeof r === 'function') as (() => void) | undefined;
      done?.();
      return true;
    }) as typeof stream.write);
    restores.push(() => spy.mockRestore());
  }
  for (const method of ['log', 'info', 'warn', 'error', 'debug', 'trace', 'dir'] as const) {
    const original = console[method].bind(console) as (...args: unknown[]) => void;
    const spy = vi.spyOn(console, method).mockImplementation((...args: unknown[]) => {
      captured.push(format(args));
      if (VERBOSE) original(...args);
    });
    restores.push(() => spy.mockRestore());
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Every AWS call the process makes (SQS, DynamoDB, Scheduler), input and output: every message put on or taken from a
// queue while it was there, every item written or read, every schedule — not only what is left at the end.

const traffic: { service: string; command: string; input: string; output: string }[] = [];
function recordAwsCalls() {
  for (const [service, proto] of [
    ['sqs', SQSClient.prototype],
    ['dynamodb', DynamoDBClient.prototype],
    ['dynamodb', DynamoDBDocumentClient.prototype],
    ['scheduler', SchedulerClient.prototype],
  ] as const) {
    const original = proto.send as (this: unknown, ...args: unknown[]) => Promise<unknown>;
    const spy = vi.spyOn(proto as { send: (...args: unknown[]) => Promise<unknown> }, 'send').mockImplementation(async function (
      this: unknown,
      ...args: unknown[]
    ) {
      const command = args[0] as { constructor: { name: string }; input: unknown };
      const entry = { service, command: command.constructor.name, input: JSON.stringify(command.input) ?? '', output: '' };
      traffic.push(entry);
      const out = await original.apply(this, args);
      entry.output = JSON.stringify(out) ?? '';
      return out;
    });
    restores.push(() => spy.mockRestore());
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Every response received, status line, headers and body.

/** What this file reads of an answer's body: a queue response's vesselId, a batch answer's items, a vessel record's webhook. */
type Answer = { vesselId: string; items: Array<{ vesselId: string }>; webhook?: WebhookView };
interface Got {
  status: number;
  headers: Headers;
  text: string;
  /** Parsed as JSON (kept as the text when it is not JSON). */
  body: Answer;
}
const responses: string[] = [];
/** The request bodies sent (they hold the secret: the positive control of the scanner). */
const sentBodies: string[] = [];

let gw: TestGateway;
let token: string;

async function call(method: 'GET' | 'POST', path: string, body?: unknown, bearer?: string): Promise<Got> {
  const payload = body === undefined ? undefined : JSON.stringify(body);
  if (payload) sentBodies.push(payload);
  const res = await fetch(`${gw.url}${path}`, {
    method,
    headers: { ...(payload ? { 'content-type': 'application/json' } : {}), ...(bearer ? { authorization: `Bearer ${bearer}` } : {}) },
    ...(payload ? { body: payload } : {}),
  });
  const text = await res.text();
  responses.push(`${method} ${path} → ${res.status}\n${[...res.headers].map(([k, v]) => `${k}: ${v}`).join('\n')}\n\n${text}`);
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: kept as text
  }
  return { status: res.status, headers: res.headers, text, body: parsed as Answer };
}
const record = (vesselId: string) => call('GET', `/incubate/vessel/${vesselId}`, undefined, token);

/** Runs the operator CLI in-process against this gateway; its output is captured like everything else. */
async function cli(...argv: string[]): Promise<{ code: number; out: string }> {
  const from = captured.length;
  const code = await main(argv, { resolveTarget: async () => ({ kind: 'local', secretCacheSeconds: 0, env: {} }) });
  return { code, out: captured.slice(from).join('') };
}

async function settled(vesselId: string, done: (w: WebhookView) => boolean, what: string): Promise<Got> {
  let last: Got | undefined;
  await pollUntil(
    async () => (last = await record(vesselId)),
    (r) => r.status === 200 && r.body.webhook !== undefined && done(r.body.webhook),
    { timeoutMs: 30_000, what },
  );
  return last!;
}

/** Every message of a queue, peeked (VisibilityTimeout 0: left as it is for its consumer). */
async function peekAll(queueUrl: string): Promise<Message[]> {
  const client = sqsClient(gw.queues.endpoint);
  const seen = new Map<string, Message>();
  try {
    for (let round = 0; round < 3; round++) {
      const out = await client.send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          VisibilityTimeout: 0,
          WaitTimeSeconds: 1,
          MessageAttributeNames: ['All'],
          MessageSystemAttributeNames: ['All'],
        }),
      );
      for (const m of out.Messages ?? []) seen.set(m.MessageId ?? m.Body ?? '', m);
    }
  } finally {
    client.destroy();
  }
  return [...seen.values()];
}

// ---------------------------------------------------------------------------------------------------------------

let rxA: Receiver; // fails once, then 204
let rxB: Receiver; // always 500 until the operator redelivers
let rxC: Receiver; // the batch and the canceled vessel: 204
const ids = { a: '', b: '', canceled: '', batch: [] as string[] };
const cliRuns: { argv: string[]; code: number; out: string }[] = [];

beforeAll(async () => {
  startCapture();
  recordAwsCalls();
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1', POWERTOOLS_LOG_LEVEL: 'DEBUG' } });
  token = await gw.token({ user: 'secret-keeper' });
  rxA = await startReceiver();
  rxA.answer({ status: 500 });
  rxB = await startReceiver({ default: { status: 500 } });
  rxC = await startReceiver();
});
afterAll(async () => {
  for (const restore of restores.splice(0)) restore();
  await Promise.all([rxA?.close(), rxB?.close(), rxC?.close()]);
  await gw?.stop();
  if (levelBefore === undefined) delete process.env.POWERTOOLS_LOG_LEVEL;
  else process.env.POWERTOOLS_LOG_LEVEL = levelBefore;
});

describe('a scenario that uses one callback secret everywhere', () => {
  it('runs: deliveries (after a failure, exhausted, batch, canceled), replay, refusals, records, cancels, CLI show/redeliver', async () => {
    const callback = (rx: Receiver) => ({ url: rx.url, secret: SECRET });

    // A: delivered after one failure. And its idempotent replay.
    const aBody = { message: 'A [[words:2]]', idempotencyKey: 'secret-a', options: { token, model: MODEL }, callback: callback(rxA) };
    const a = await call('POST', '/incubate', aBody);
    expect(a.status, a.text).toBe(202);
    ids.a = a.body.vesselId;
    const replay = await call('POST', '/incubate', aBody);
    expect(replay.status).toBe(200);
    expect(replay.headers.get('idempotent-replayed')).toBe('true');
    expect(replay.body).toEqual(a.body);
    // The same key with another secret: a conflict, which must not echo either secret.
    const conflict = await call('POST', '/incubate', { ...aBody, callback: { url: rxA.url, secret: `${SECRET}-other` } });
    expect(conflict.status).toBe(409);
    // Refused at enqueue while carrying the secret.
    const refused = await call('POST', '/incubate', { ...aBody, idempotencyKey: 'secret-refused', callback: { url: 'http://10.0.0.1/x', secret: SECRET } });
    expect(refused.status).toBe(400);
    const badSecretField = await call('POST', '/incubate', {
      ...aBody,
      idempotencyKey: 'secret-bad',
      callback: { url: rxA.url, secret: SECRET, extra: SECRET },
    });
    expect(badSecretField.status).toBe(400);

    // B: fails every time until exhausted → dead-letter queue.
    const b = await call('POST', '/incubate', {
      message: 'B [[words:2]]',
      idempotencyKey: 'secret-b',
      options: { token, model: MODEL },
      callback: callback(rxB),
    });
    expect(b.status, b.text).toBe(202);
    ids.b = b.body.vesselId;

    // A signed batch.
    const batch = await call('POST', '/incubate/batch', {
      items: [0, 1, 2].map((i) => ({ message: `Batch ${i} [[words:1]]`, idempotencyKey: `secret-batch-${i}` })),
      options: { token, model: MODEL },
      callback: callback(rxC),
    });
    expect(batch.status, batch.text).toBe(202);
    expect(batch.body).toMatchObject({ total: 3, queued: 3, failed: 0 });
    ids.batch = batch.body.items.map((i: { vesselId: string }) => i.vesselId);

    // A signed PENDING vessel, canceled (and canceled again: 409).
    const c = await call('POST', '/incubate', {
      message: 'Later [[words:2]]',
      idempotencyKey: 'secret-canceled',
      options: { token, model: MODEL },
      ttl: 600,
      callback: callback(rxC),
    });
    expect(c.status, c.text).toBe(202);
    ids.canceled = c.body.vesselId;
    const cancel = await call('POST', `/incubate/vessel/${ids.canceled}/cancel`, undefined, token);
    expect(cancel.status, cancel.text).toBe(200);
    expect(cancel.body).toMatchObject({ status: 'CANCELED', callback: { url: rxC.url, signed: true } });
    const cancelAgain = await call('POST', `/incubate/vessel/${ids.canceled}/cancel`, undefined, token);
    expect(cancelAgain.status).toBe(409);

    // Everything settles: A delivered on its 2nd attempt, B exhausted (3 attempts) and dead-lettered, the rest delivered.
    const aDone = await settled(ids.a, (w) => w.status === 'delivered', 'A delivered');
    expect(aDone.body.webhook!.attempts.map((x: { statusCode?: number }) => x.statusCode)).toEqual([500, 204]);
    const bDone = await settled(ids.b, (w) => w.status === 'failed', 'B exhausted');
    expect(bDone.body.webhook).toMatchObject({ status: 'failed', failure: 'exhausted' });
    expect(bDone.body.webhook!.attempts.map((x: { statusCode?: number }) => x.statusCode)).toEqual([500, 500, 500]);
    for (const id of [...ids.batch, ids.canceled]) await settled(id, (w) => w.status === 'delivered', `${id} delivered`);
    await pollUntil(
      async () => (await peekAll(gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL!)).length,
      (n) => n > 0,
      { timeoutMs: 30_000, what: 'the dead letter of B' },
    );

    // The operator CLI: show, redeliver (B's receiver now accepts), show again; and a refusal.
    const run = async (...argv: string[]) => {
      const r = await cli(...argv);
      cliRuns.push({ argv, ...r });
      return r;
    };
    const showA = await run('webhook', 'show', '--vessel', ids.a);
    expect(showA.code, showA.out).toBe(0);
    expect(showA.out).toContain(`Vessel ${ids.a} (COMPLETED) → ${rxA.url} (signed)`);
    const showB = await run('webhook', 'show', '--vessel', ids.b, '--json');
    expect(showB.code, showB.out).toBe(0);
    expect(JSON.parse(showB.out.trim())).toMatchObject({ vesselId: ids.b, url: rxB.url, signed: true, webhook: { status: 'failed', failure: 'exhausted' } });
    rxB.setDefault({ status: 204 });
    const redeliver = await run('webhook', 'redeliver', '--vessel', ids.b);
    expect(redeliver.code, redeliver.out).toBe(0);
    const redeliverJson = await run('webhook', 'redeliver', '--vessel', ids.canceled, '--json');
    expect(redeliverJson.code, redeliverJson.out).toBe(0);
    const unknown = await run('webhook', 'redeliver', '--vessel', 'no-such-vessel');
    expect(unknown.code).toBe(1);
    await settled(ids.b, (w) => w.status === 'delivered', 'B redelivered');
    await settled(ids.canceled, (w) => w.status === 'delivered' && w.attempts.length === 2, 'canceled redelivered');
    const showAfter = await run('webhook', 'show', '--vessel', ids.b, '--json');
    expect(JSON.parse(showAfter.out.trim())).toMatchObject({ webhook: { status: 'delivered' } });
    expect(JSON.parse(showAfter.out.trim()).webhook.attempts).toHaveLength(4);

    // Every record once more, now settled: nothing in flight, nothing due for 2 s (the canceled vessel's own trigger
    // comes in ten minutes).
    await drained(gw, { quietMs: 2_000 });
    for (const id of [ids.a, ids.b, ids.canceled, ...ids.batch]) expect((await record(id)).status).toBe(200);
  });
});

describe('the secret appears nowhere', () => {
  it('the scanner finds the secret in clear, hex and base64 at any alignment (positive control)', () => {
    expect(leaks(sentBodies.join('\n'))).toContain('secret');
    expect(leaks(`x${hex(SECRET)}y`)).toContain('secret hex');
    for (const prefix of ['', 'a', 'ab', 'abc']) {
      expect(leaks(b64(Buffer.from(`${prefix}${SECRET}tail`)))).toContain('secret base64');
      expect(leaks(b64url(Buffer.from(`${prefix}${SECRET}`)))).toContain('secret base64');
    }
    expect(leaks('nothing to see')).toEqual([]);
  });

  it('in everything the process printed — which really holds the log lines (DEBUG level, every webhook attempt)', () => {
    expect(logger.getLevelName()).toBe('DEBUG');
    const text = captured.join('\n');
    // 2 (A) + 3 + 1 (B) + 3 (batch) + 2 (canceled) attempts, each logged once.
    const attemptLines = text.match(/"message":\s*"webhook attempt"/g) ?? [];
    expect(attemptLines.length).toBeGreaterThanOrEqual(11);
    expect(text).toContain('webhook delivery exhausted its retries');
    // The CLI's output is in there too.
    expect(cliRuns.length).toBe(6);
    for (const r of cliRuns) expect(r.out.length).toBeGreaterThan(0);
    expect(leaks(text)).toEqual([]);
  });

  it('in every response: status, headers and bodies', () => {
    expect(responses.length).toBeGreaterThanOrEqual(15);
    for (const r of responses) expect(leaks(r), r.slice(0, 500)).toEqual([]);
  });

  it("in every table (a raw Scan); the vessels' stored secretCiphertext exists, differs from the secret and decrypts to it", async () => {
    const all: Record<string, unknown>[] = [];
    for (const [envVar, table] of Object.entries(gw.tables)) {
      let start: Record<string, unknown> | undefined;
      do {
        const page = await documentClient().send(new ScanCommand({ TableName: table, ConsistentRead: true, ExclusiveStartKey: start }));
        for (const item of page.Items ?? []) {
          all.push(item);
          expect(leaks(JSON.stringify(item)), `${envVar}: ${JSON.stringify(item).slice(0, 500)}`).toEqual([]);
        }
        start = page.LastEvaluatedKey;
      } while (start);
    }
    expect(gw.tables.VESSELS_TABLE).toBe(process.env.VESSELS_TABLE);
    const vessels = all.filter((i) => typeof i.pk === 'string' && i.pk.startsWith('vessel#') && i.projectId === gw.projectId);
    const signed = [ids.a, ids.b, ids.canceled, ...ids.batch];
    for (const id of signed) {
      const item = vessels.find((v) => v.vesselId === id) as { callback?: { url: string; secretCiphertext?: string }; webhook?: unknown } | undefined;
      expect(item, id).toBeDefined();
      const ciphertext = item!.callback?.secretCiphertext;
      expect(typeof ciphertext).toBe('string');
      expect(ciphertext!.length).toBeGreaterThan(0);
      expect(ciphertext).not.toBe(SECRET);
      expect(await keyCipher().decrypt(ciphertext!, { projectId: gw.projectId })).toBe(SECRET);
      expect(item!.webhook).toBeDefined();
    }
  });

  it('in every queue message (run and webhook queues and their dead-letter queues), B’s dead letter included', async () => {
    const urls = { ...gw.queues.urls, ...gw.queues.deadLetterUrls } as Record<string, string>;
    expect(Object.keys(urls)).toEqual(expect.arrayContaining(['WEBHOOK_QUEUE_URL', 'WEBHOOK_DEAD_LETTER_QUEUE_URL']));
    const byQueue: Record<string, Message[]> = {};
    for (const [name, url] of Object.entries(urls)) {
      byQueue[name] = await peekAll(url);
      for (const m of byQueue[name]!) expect(leaks(JSON.stringify(m)), `${name}: ${JSON.stringify(m).slice(0, 500)}`).toEqual([]);
    }
    const dead = byQueue.WEBHOOK_DEAD_LETTER_QUEUE_URL!.map((m) => JSON.parse(m.Body!));
    expect(dead).toEqual([
      {
        vesselId: ids.b,
        projectId: gw.projectId,
        webhookId: `msg_${ids.b}`,
        url: rxB.url,
        round: 1,
        attempts: [1, 2, 3].map((attempt) => ({ round: 1, attempt, at: expect.any(String), durationMs: expect.any(Number), statusCode: 500 })),
        redeliver: `gateway webhook redeliver --vessel ${ids.b}`,
      },
    ]);
  });

  it('in every AWS call made meanwhile: each message sent to or received from a queue, each DynamoDB read and write', () => {
    const sent = traffic.filter((t) => t.service === 'sqs' && t.command === 'SendMessageCommand');
    const webhookQueue = gw.queues.urls.WEBHOOK_QUEUE_URL!;
    const dlq = gw.queues.deadLetterUrls.WEBHOOK_DEAD_LETTER_QUEUE_URL!;
    // The capture is real: the webhook queue's messages (first attempts and retries), B's dead letter, the vessel writes.
    expect(sent.filter((t) => t.input.includes(JSON.stringify(webhookQueue))).length).toBeGreaterThanOrEqual(8);
    expect(sent.filter((t) => t.input.includes(JSON.stringify(dlq))).length).toBe(1);
    expect(traffic.filter((t) => t.service === 'sqs' && t.command === 'ReceiveMessageCommand' && t.output.includes(ids.b)).length).toBeGreaterThan(0);
    expect(traffic.filter((t) => t.service === 'dynamodb' && t.input.includes(ids.b)).length).toBeGreaterThan(3);
    // Ciphertext passes through DynamoDB, never the secret.
    expect(traffic.some((t) => t.service === 'dynamodb' && t.input.includes('secretCiphertext'))).toBe(true);
    for (const t of traffic) expect(leaks(`${t.input}\n${t.output}`), `${t.service} ${t.command}: ${t.input.slice(0, 300)}`).toEqual([]);
  });

  it("in the scheduler's schedules and the process environment", () => {
    expect(leaks(JSON.stringify(gw.scheduler.pending()))).toEqual([]);
    expect(leaks(JSON.stringify(process.env))).toEqual([]);
  });

  it('yet the receivers got valid signatures keyed with it: the secret was really used', () => {
    const all = [...rxA.requests, ...rxB.requests, ...rxC.requests];
    expect(rxA.requests).toHaveLength(2);
    expect(rxB.requests).toHaveLength(4);
    expect(rxC.requests).toHaveLength(5); // 3 batch + canceled + its redelivery
    for (const req of all) {
      expect(verifyWebhook(req.body, req.headers, SECRET)).toMatchObject({ ok: true, scheme: 'standard-webhooks' });
      expect(req.headers['x-service-signature']).toBe(createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(req.body).digest('hex'));
      // And the secret is not in what the receivers got either (body or headers).
      expect(leaks(`${req.text}\n${JSON.stringify(req.headers)}`)).toEqual([]);
    }
  });
});
