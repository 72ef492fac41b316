import { randomBytes } from 'node:crypto';
import type { UpdateItemCommandInput } from '@aws-sdk/client-dynamodb';
import { GetCommand, PutCommand } from '@aws-sdk/lib-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inEveryInstance } from '../../bin/local/instances.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { documentClient, storeWire } from '../../lambdas/store/dynamo.ts';
import { DYNAMODB_MAX_ITEM_BYTES, isItemTooLarge, itemSize } from '../../lambdas/store/item-size.ts';
import { INTERRUPTED_TEXT, reconcileVessels } from '../../lambdas/vessels/reconciler.ts';
import type { StoredVessel, VesselOutput } from '../../lambdas/vessels/record.ts';
import {
  keptOutput,
  MAX_VESSEL_OUTPUT_BYTES,
  MAX_VESSEL_REQUEST_BYTES,
  outputSize,
  requestSize,
  requestTooLarge,
  utf8Prefix,
} from '../../lambdas/vessels/size.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { callbackBodyText } from '../../lambdas/webhooks/body.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { pollUntil } from '../support/vessels.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';
import { idempotencyItems, MODEL, vesselApi, vesselItems } from './incubate-client.ts';

/**
 * A vessel is one DynamoDB item, and an item is at most 400 KB (issue 33): a vessel that outgrew it could not have its
 * end written, stayed EXECUTING, was run again by the reconciler and charged each time, and ended FAILED with its
 * result lost. Here (docs/incubate.md, "Limits"):
 * - the size a store counts (store/item-size.ts) is DynamoDB's, to the byte, against DynamoDB Local;
 * - a request over its share (192 KiB) is a 413 before anything is stored or run, for /incubate and per batch item;
 * - an output over its share (128 KiB) is kept truncated and flagged, in the record and in the webhook body;
 * - an end refused for its size is written again smaller, once run and once charged;
 * - an end that cannot be written at all leaves the vessel to the reconciler, which ends it FAILED and never runs it
 *   again: one upstream request, one charge;
 * - an idempotency key with a lone surrogate is refused (it would be the same key as another once stored as UTF-8).
 *
 * The gateway's own reconciler runs only at start-up (period an hour): the tests call it themselves.
 */
let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
let rx: Receiver;
let seq = 0;

/** Writes of the gateway's functions that a test makes fail, and how often they did. */
interface WriteFailure {
  match: (input: UpdateItemCommandInput) => boolean;
  error: () => Error;
  failed: number;
}
const failures: WriteFailure[] = [];

beforeAll(async () => {
  gw = await startTestGateway({ scheduleIntervalMs: 3_600_000 });
  api = vesselApi(gw);
  rx = await startReceiver();
  // Every function's write client (bin/local/instances.ts) refuses the writes a test arms, before they are sent, as
  // DynamoDB would refuse them: nothing is written. Built again first, with nothing in flight.
  resetInstanceState();
  inEveryInstance(() =>
    storeWire().steps.call.push((call, next) => {
      const failure = failures.find((f) => f.match(call.input as UpdateItemCommandInput));
      if (failure) {
        failure.failed++;
        throw failure.error();
      }
      return next();
    }),
  );
});
afterAll(async () => {
  await rx?.close();
  resetInstanceState();
  await gw?.stop();
});

const freshKey = (what: string) => `size-${what}-${++seq}-${randomBytes(3).toString('hex')}`;
const user = (what: string) => `size-${what}-${randomBytes(3).toString('hex')}`;

/** The move of a vessel to COMPLETED whose output text contains `marker`: the executor's end of that run. */
const endOf = (marker: string) => (input: UpdateItemCommandInput) =>
  input.TableName === process.env.VESSELS_TABLE &&
  input.ExpressionAttributeValues?.[':sTo']?.S === 'COMPLETED' &&
  (input.ExpressionAttributeValues?.[':a_output']?.M?.text?.S ?? '').includes(marker);

/** Requests the simulated Anthropic upstream received whose body contains `marker`. */
const upstreamRuns = (marker: string) => gw.upstreams.anthropic!.requests.filter((r) => JSON.stringify(r.body).includes(marker)).length;

const sizeError = () =>
  Object.assign(new Error('Item size to update has exceeded the maximum allowed size'), { name: 'ValidationException', $fault: 'client' });
const throttled = () =>
  Object.assign(new Error('The level of configured provisioned throughput for the table was exceeded'), {
    name: 'ProvisionedThroughputExceededException',
    $fault: 'client',
  });

describe("the size DynamoDB counts (store/item-size.ts), against DynamoDB Local's own limit", () => {
  it('an item itemSize counts at exactly 409,600 bytes is stored; one byte more is refused as too large', async () => {
    // Every kind of value the store writes: strings (multi-byte too), numbers, booleans, null, lists, maps, binary.
    const shape = (pad: string) => ({
      pk: `size#${randomBytes(4).toString('hex')}`,
      name: 'josé 🙂',
      n: [0, 7, 12_345, 1_764_201_234_560, 0.25, -3.5e-7, 100_000, 123.456, -0.05, 1_000_001],
      flags: { on: true, off: false, none: null },
      nested: { list: [[], {}, ['a', { b: 'ç' }]], bytes: new Uint8Array(17) },
      pad,
    });
    const fixed = itemSize(shape(''));
    expect(fixed).toBe(itemSize(shape('')));
    const exactly = shape('x'.repeat(DYNAMODB_MAX_ITEM_BYTES - fixed));
    expect(itemSize(exactly)).toBe(409_600);
    await documentClient().send(new PutCommand({ TableName: process.env.VESSELS_TABLE, Item: exactly }));
    const back = await documentClient().send(new GetCommand({ TableName: process.env.VESSELS_TABLE, Key: { pk: exactly.pk }, ConsistentRead: true }));
    expect(String(back.Item?.pad ?? '').length).toBe(DYNAMODB_MAX_ITEM_BYTES - fixed);

    const over = shape('x'.repeat(DYNAMODB_MAX_ITEM_BYTES - fixed + 1));
    expect(itemSize(over)).toBe(409_601);
    const refused = await documentClient()
      .send(new PutCommand({ TableName: process.env.VESSELS_TABLE, Item: over }))
      .then(
        () => undefined,
        (err: unknown) => err,
      );
    expect(isItemTooLarge(refused), String(refused)).toBe(true);
  });
});

describe('a request over its share: 413 before anything is stored or run', () => {
  it('POST /incubate with a 450 KB message, and with a 450 KB systemPrompt: 413 request_too_large with the size and the maximum; nothing kept, nothing run', async () => {
    const projectId = gw.projectId;
    const token = await gw.token({ user: user('big') });
    const before = (await vesselItems(projectId)).length;
    for (const [field, body] of [
      ['message', (key: string) => ({ message: `big-message ${'m'.repeat(450_000)}`, idempotencyKey: key, options: { token, model: MODEL } })],
      ['systemPrompt', (key: string) => ({ message: 'big-system', idempotencyKey: key, options: { token, model: MODEL, systemPrompt: 's'.repeat(450_000) } })],
    ] as const) {
      const key = freshKey(field);
      const res = await api.incubate<{ error: string; message: string }>(body(key));
      expect(res.status, JSON.stringify(res.body).slice(0, 500)).toBe(413);
      expect(res.body.error).toBe('request_too_large');
      expect(res.body.message).toMatch(
        /^The vessel would be stored as 45\d,\d{3} bytes \(its message, options and callback\), above the 196,608 bytes \(192 KiB\) a vessel's request may take: a vessel is kept in one DynamoDB item of at most 400 KB, and its result and delivery record need the rest\. Send a shorter message or systemPrompt$/,
      );
      // The size it states is the item's: the 450,000 bytes of the field plus the rest of the record.
      const stated = Number(/stored as ([\d,]+) bytes/.exec(res.body.message)![1]!.replaceAll(',', ''));
      expect(stated - 450_000).toBeGreaterThan(500);
      expect(stated - 450_000).toBeLessThan(2_500);
      // The key is free: nothing was claimed.
      expect((await idempotencyItems(projectId)).filter((i) => i.idempotencyKey === key)).toEqual([]);
    }
    expect(await vesselItems(projectId)).toHaveLength(before);
    expect(upstreamRuns('big-message')).toBe(0);
    expect(upstreamRuns('big-system')).toBe(0);
  });

  it('POST /incubate/batch: an item over it fails alone (request_too_large, naming the item); every item over it is a 413 for the batch', async () => {
    const token = await gw.token({ user: user('batch') });
    const small = { message: 'batch-small [[words:2]]', idempotencyKey: freshKey('b0') };
    const big = { message: `batch-big ${'m'.repeat(200_000)}`, idempotencyKey: freshKey('b1') };
    const res = await api.batch<{ total: number; queued: number; failed: number; items: Record<string, unknown>[] }>({
      items: [small, big],
      options: { token, model: MODEL },
    });
    expect(res.status, JSON.stringify(res.body).slice(0, 500)).toBe(202);
    expect(res.body).toMatchObject({ total: 2, queued: 1, failed: 1 });
    expect(res.body.items[0]).toMatchObject({ index: 0, idempotencyKey: small.idempotencyKey, status: 'queued' });
    expect(res.body.items[1]).toEqual({
      index: 1,
      idempotencyKey: big.idempotencyKey,
      status: 'failed',
      error: {
        code: 'request_too_large',
        message: expect.stringMatching(/^items\.1: the vessel would be stored as 20\d,\d{3} bytes .* above the 196,608 bytes \(192 KiB\)/),
      },
    });

    // The shared options too large for any item: the whole batch is refused, nothing queued.
    const all = await api.batch<{ error: string; message: string }>({
      items: [
        { message: 'batch-all-a', idempotencyKey: freshKey('a0') },
        { message: 'batch-all-b', idempotencyKey: freshKey('a1') },
      ],
      options: { token, model: MODEL, systemPrompt: 's'.repeat(200_000) },
    });
    expect(all.status).toBe(413);
    expect(all.body.error).toBe('request_too_large');
    expect(all.body.message).toMatch(
      /^No item of the batch could be kept\. items\.0: the vessel would be stored as 20\d,\d{3} bytes .* above the 196,608 bytes/,
    );
    await drained(gw, { quietMs: 300 });
    expect(upstreamRuns('batch-big')).toBe(0);
    expect(upstreamRuns('batch-all-')).toBe(0);
  });

  it('the limit, to the byte: a request of exactly 196,608 bytes is accepted, 196,609 refused (requestTooLarge on a stored vessel)', async () => {
    // A real vessel's record, as stored, its message then sized to put the whole record on either side of the limit.
    const token = await gw.token({ user: user('edge') });
    const q = await api.incubate({ message: 'edge', idempotencyKey: freshKey('edge'), options: { token, model: MODEL }, ttl: 3_600 });
    expect(q.status).toBe(202);
    const stored = (await getVessel(q.body.vesselId))!;
    const room = MAX_VESSEL_REQUEST_BYTES - (requestSize(stored) - 'edge'.length);
    const at = { ...stored, message: `${'é'.repeat(Math.floor(room / 2))}${room % 2 ? 'x' : ''}` } as StoredVessel;
    expect(requestSize(at)).toBe(196_608);
    expect(requestTooLarge(at)).toBeUndefined();
    const over = { ...at, message: `${at.message}x` } as StoredVessel;
    expect(requestSize(over)).toBe(196_609);
    expect(requestTooLarge(over)).toEqual({
      kind: 'request_too_large',
      message:
        "The vessel would be stored as 196,609 bytes (its message, options and callback), above the 196,608 bytes (192 KiB) a vessel's request may take: a vessel is kept in one DynamoDB item of at most 400 KB, and its result and delivery record need the rest. Send a shorter message or systemPrompt",
    });
  });
});

describe('an output over its share: kept truncated, flagged, never lost', () => {
  it('keptOutput: cut between characters (never inside a surrogate pair) to exactly what fits; the figures untouched', () => {
    const output = (text: string, structured?: unknown): VesselOutput => ({
      success: true,
      text,
      result: {
        type: 'result',
        subtype: 'success',
        total_cost_usd: 0.123456,
        total_cost_microdollars: 123_456,
        usage: { input_tokens: 40_001, output_tokens: 1 },
        num_turns: 1,
        duration_secs: 1.234,
        model: MODEL,
        ...(structured === undefined ? {} : { structured_output: structured }),
      },
    });
    const fits = output('🙂'.repeat(1_000));
    expect(keptOutput(fits)).toBe(fits);

    const whole = output(`a${'🙂'.repeat(40_000)}`);
    expect(outputSize(whole)).toBeGreaterThan(MAX_VESSEL_OUTPUT_BYTES);
    const kept = keptOutput(whole);
    const base = outputSize({ ...whole, text: '', truncated: true });
    const emojis = Math.floor((131_072 - base - 1) / 4);
    expect(kept).toEqual({ ...whole, truncated: true, text: `a${'🙂'.repeat(emojis)}` });
    expect(outputSize(kept)).toBeLessThanOrEqual(131_072);
    expect(outputSize(kept)).toBeGreaterThan(131_072 - 4);
    // Every character whole: no lone surrogate at the cut.
    expect(/\p{Cs}/u.test(kept.text)).toBe(false);
    expect(utf8Prefix('a🙂', 4)).toBe('a');
    expect(utf8Prefix('a🙂', 5)).toBe('a🙂');

    // A structured output that fits is kept and the text cut around it; one that does not is dropped.
    const withStructured = keptOutput(output('t'.repeat(200_000), { items: 'i'.repeat(100_000) }));
    expect(withStructured.result.structured_output).toEqual({ items: 'i'.repeat(100_000) });
    expect(withStructured.truncated).toBe(true);
    expect(outputSize(withStructured)).toBe(131_072);
    const dropped = keptOutput(output('t'.repeat(200_000), { items: 'i'.repeat(140_000) }));
    expect(dropped.result).not.toHaveProperty('structured_output');
    expect(outputSize(dropped)).toBe(131_072);
    // At the executor's smallest fallback, the figures alone.
    expect(keptOutput(output('t'.repeat(10)), 0)).toEqual({ ...output(''), truncated: true });
  });

  it('a 160 KB answer: COMPLETED with `truncated: true` and the first 128 KiB of its text, in the record and in the webhook body; charged once, exactly', async () => {
    const token = await gw.token({ user: user('long') });
    // The simulated upstream echoes the message: 40,000 four-byte emoji (160,000 bytes) as one word.
    const message = '🙂'.repeat(40_000);
    const q = await api.incubate({ message, idempotencyKey: freshKey('long'), options: { token, model: MODEL }, callback: { url: rx.url, secret: 's' } });
    expect(q.status, JSON.stringify(q.body)).toBe(202);
    const done = await api.ended(q.body.vesselId, token, 30_000);
    const stored = (await getVessel(q.body.vesselId))!;
    const base = outputSize({ ...stored.output!, text: '' });
    const emojis = Math.floor((131_072 - base - 'Echo: '.length) / 4);
    expect(done).toMatchObject({
      status: 'COMPLETED',
      isSuccess: true,
      attempts: 1,
      output: { success: true, truncated: true, result: { subtype: 'success' } },
    });
    expect(done.output!.text).toBe(`Echo: ${'🙂'.repeat(emojis)}`);
    expect(emojis).toBeGreaterThan(32_000);
    expect(outputSize(stored.output!)).toBeLessThanOrEqual(131_072);
    expect(Object.keys(done.output!)).toEqual(['success', 'text', 'truncated', 'result']);
    // One run, charged what it used.
    expect(upstreamRuns('🙂🙂🙂')).toBe(1);
    const micro = charge(priceFor(MODEL, 'anthropic')!, done.output!.result.usage).microdollars;
    expect(done.output!.result.total_cost_microdollars).toBe(micro);
    expect((await api.usage(token)).ai).toMatchObject({ used: micro, reserved: 0 });

    // The webhook body says so too, with the same text.
    const hook = await pollUntil(
      async () => rx.requests.filter((r) => r.headers['webhook-id'] === `msg_${q.body.vesselId}`),
      (r) => r.length > 0,
      { timeoutMs: 15_000, everyMs: 100, what: 'the callback delivered' },
    );
    const body = JSON.parse(hook[0]!.text) as Record<string, unknown>;
    expect(body).toMatchObject({ success: true, truncated: true, text: done.output!.text, status: 'COMPLETED', vesselId: q.body.vesselId });
    expect(Object.keys(body)).toEqual(['success', 'text', 'truncated', 'result', 'vesselId', 'idempotencyKey', 'status']);
    expect(hook[0]!.text).toBe(callbackBodyText(stored));
  });
});

describe('what DynamoDB cannot hold as a map is kept as text', () => {
  it('options nested as deep as the limits allow and a structured output nested 32 levels, holding 1e200: queued, run once, COMPLETED with the value intact', async () => {
    // A map nests at most 32 levels in DynamoDB; a vessel's options sit 3 deep in the record, its structured output 4.
    let schema: Record<string, unknown> = { type: 'number' };
    for (let i = 0; i < 31; i++) schema = { type: 'array', items: schema };
    let inputSchema: Record<string, unknown> = { type: 'object' };
    for (let i = 0; i < 40; i++) inputSchema = { type: 'object', properties: { a: inputSchema } };
    inputSchema = { ...inputSchema, type: 'object' };
    let value: unknown = 1e200;
    for (let i = 0; i < 31; i++) value = [value];
    const token = await gw.token({ user: user('deep') });
    const q = await api.incubate({
      message: `deep-value [[json:${JSON.stringify(value)}]]`,
      idempotencyKey: freshKey('deep'),
      options: {
        token,
        model: MODEL,
        outputFormat: { type: 'json_schema', schema },
        tools: [{ name: 'never_called', input_schema: inputSchema, url: 'https://tools.example.com/never' }],
      },
    });
    expect(q.status, JSON.stringify(q.body)).toBe(202);
    const done = await api.ended(q.body.vesselId, token, 30_000);
    expect(done).toMatchObject({ status: 'COMPLETED', isSuccess: true, attempts: 1, output: { success: true, result: { subtype: 'success' } } });
    expect(done.output!.result.structured_output).toEqual(value);
    expect(upstreamRuns('deep-value')).toBe(1);
  });
});

describe('an end that cannot be written never runs the vessel again', () => {
  it('an end refused for its size is written again with a shorter output: COMPLETED, truncated, one upstream request, one charge', async () => {
    const token = await gw.token({ user: user('refused') });
    const marker = `end-size-${randomBytes(3).toString('hex')}`;
    // DynamoDB refuses this run's end while its text is longer than 4,000 bytes (an item near its 400 KB).
    const failure: WriteFailure = {
      match: (input) => endOf(marker)(input) && (input.ExpressionAttributeValues?.[':a_output']?.M?.text?.S ?? '').length > 4_000,
      error: sizeError,
      failed: 0,
    };
    failures.push(failure);
    const message = `${marker} ${'abc '.repeat(2_000)}`;
    const q = await api.incubate({ message, idempotencyKey: freshKey('refused'), options: { token, model: MODEL } });
    expect(q.status).toBe(202);
    const done = await api.ended(q.body.vesselId, token, 15_000);
    expect(failure.failed).toBe(1);
    const stored = (await getVessel(q.body.vesselId))!;
    expect(outputSize(stored.output!)).toBeLessThanOrEqual(4_096);
    expect(done).toMatchObject({ status: 'COMPLETED', isSuccess: true, attempts: 1, output: { success: true, truncated: true } });
    expect(`Echo: ${message.trim()}`.startsWith(done.output!.text)).toBe(true);
    expect(done.output!.text.length).toBeGreaterThan(3_500);
    await drained(gw, { quietMs: 500 });
    expect(upstreamRuns(marker)).toBe(1);
    const micro = charge(priceFor(MODEL, 'anthropic')!, done.output!.result.usage).microdollars;
    expect(done.output!.result.total_cost_microdollars).toBe(micro);
    expect((await api.usage(token)).ai).toMatchObject({ used: micro, reserved: 0 });
  });

  it('an end that cannot be written at all (throttled on every try): FAILED by the reconciler, never run again — one upstream request, one charge', async () => {
    // The same run for a user whose end is written: what one run costs.
    const controlToken = await gw.token({ user: user('control') });
    const control = await api.incubate({
      message: 'end-fail-control [[words:40]]',
      idempotencyKey: freshKey('control'),
      options: { token: controlToken, model: MODEL },
    });
    const controlled = await api.ended(control.body.vesselId, controlToken);
    expect(controlled).toMatchObject({ status: 'COMPLETED', output: { text: expect.stringMatching(/^word1 word2 .* word40$/) } });
    const oneRun = controlled.output!.result.total_cost_microdollars;
    expect((await api.usage(controlToken)).ai).toMatchObject({ used: oneRun, reserved: 0 });

    const token = await gw.token({ user: user('throttled') });
    const failure: WriteFailure = { match: endOf('word40'), error: throttled, failed: 0 };
    failures.push(failure);
    try {
      const q = await api.incubate({ message: 'end-fail-failing [[words:40]]', idempotencyKey: freshKey('throttled'), options: { token, model: MODEL } });
      expect(q.status).toBe(202);
      // The executor tries its end 4 times, then gives the vessel up to the reconciler.
      await expect.poll(() => failure.failed, { timeout: 20_000, interval: 100 }).toBe(4);
      const left = await pollUntil(
        () => getVessel(q.body.vesselId),
        (v) => v?.status === 'EXECUTING' && v.reconcileAt !== undefined,
        { timeoutMs: 5_000, what: 'the vessel left EXECUTING' },
      );
      await drained(gw, { quietMs: 500 });
      expect(upstreamRuns('end-fail-failing')).toBe(1);

      // Its heartbeat lapses: the reconciler ends it FAILED — it does not queue it again.
      expect(await reconcileVessels(new Date(left!.reconcileAt!))).toMatchObject({ failed: 1, redriven: 0 });
      const end = await api.ended(q.body.vesselId, token);
      expect(end).toMatchObject({
        status: 'FAILED',
        isFailed: true,
        attempts: 1,
        output: { success: false, text: INTERRUPTED_TEXT, result: { subtype: 'error_during_execution' } },
      });
      await drained(gw, { quietMs: 1_000 });
      expect(upstreamRuns('end-fail-failing')).toBe(1);
      expect(failure.failed).toBe(4);
      // Charged for the one run, to the microdollar, and one second of compute.
      const usage = await api.usage(token);
      expect(usage.ai).toMatchObject({ used: oneRun, reserved: 0 });
      expect(usage.compute).toMatchObject({ used: 1, reserved: 0 });
    } finally {
      failures.splice(failures.indexOf(failure), 1);
    }
  });
});

describe('idempotency keys are well-formed Unicode', () => {
  it('a key with a lone surrogate is refused (400 naming the field), on /incubate and per batch item; keys that would collide never do', async () => {
    const token = await gw.token({ user: user('lone') });
    const message = 'lone-key [[words:2]]';
    for (const key of ['k-\uD800', 'k-\uDBFF', '\uDC00k', 'k\uD83D']) {
      const res = await api.incubate<{ error: string; message: string }>({ message, idempotencyKey: key, options: { token, model: MODEL } });
      expect(res.status, JSON.stringify(res.body)).toBe(400);
      expect(res.body).toEqual({
        error: 'invalid_request',
        message: 'idempotencyKey must be well-formed Unicode: it contains a lone surrogate (half of a UTF-16 surrogate pair)',
      });
    }
    // A pair is a character like any other.
    const pair = await api.incubate({ message, idempotencyKey: `k-🙂-${randomBytes(3).toString('hex')}`, options: { token, model: MODEL } });
    expect(pair.status).toBe(202);

    const batch = await api.batch<{ items: Record<string, unknown>[] }>({
      items: [
        { message, idempotencyKey: 'b-\uD800' },
        { message, idempotencyKey: freshKey('lone-ok') },
      ],
      options: { token, model: MODEL },
    });
    expect(batch.status).toBe(202);
    expect(batch.body.items[0]).toEqual({
      index: 0,
      idempotencyKey: 'b-\uD800',
      status: 'failed',
      error: {
        code: 'invalid_request',
        message: 'items.0.idempotencyKey: idempotencyKey must be well-formed Unicode: it contains a lone surrogate (half of a UTF-16 surrogate pair)',
      },
    });
    expect(batch.body.items[1]).toMatchObject({ index: 1, status: 'queued' });
  });
});
