import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { verifyWebhook } from 'prompt-gateway/webhooks';
import { hexSignature } from '../../lambdas/webhooks/signature.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, incubateBatch, pollUntil, vesselRecord } from '../support/vessels.ts';
import { MODEL, vesselApi, type VesselRecord } from '../vessels/incubate-client.ts';
import { receiverPool, type ReceivedRequest } from './receiver.ts';

/**
 * Issue 15, done-when 1, end to end through the local gateway (real HTTP, fauxqs, DynamoDB Local): a receiver on
 * loopback gets exactly one delivery for a COMPLETED, a FAILED and a CANCELED vessel, with the exact body; its own
 * HMAC of the raw bytes matches X-Service-Signature, the Standard Webhooks headers verify with the independent
 * `standardwebhooks` package and with our `verifyWebhook`; unsigned callbacks carry no signature; a batch's callback
 * gets one delivery per vessel; the vessel record shows the attempt.
 */

// Deliveries are polled for up to 30 s on a shared machine.
vi.setConfig({ testTimeout: 90_000 });

let gw: TestGateway;
let api: ReturnType<typeof vesselApi>;
const receivers = receiverPool();
let seq = 0;
const key = (what: string) => `wh-delivery-${what}-${++seq}`;

beforeAll(async () => {
  // Short waits: a wrongful retry after a 2xx would show within the grace period below.
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1' } });
  api = vesselApi(gw);
});
afterAll(async () => {
  await receivers.closeAll();
  await gw?.stop();
});

const receiver = (status: number) => receivers.start({ default: { status } });

const ISO = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/;
const GRACE_MS = 2_500;

/** The receiver's own checks, with node:crypto only: key = the UTF-8 bytes of the secret. */
const ownHex = (body: Buffer, secret: string) => createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex');
const ownStandard = (id: string, ts: string, body: Buffer, secret: string) =>
  createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(Buffer.concat([Buffer.from(`${id}.${ts}.`, 'utf8'), body]))
    .digest('base64');

/** The callback body a vessel's record implies, in the documented key order (so its JSON is the exact bytes). */
function expectedBody(rec: VesselRecord) {
  const out = rec.output!;
  return {
    success: out.success,
    text: out.text,
    result: {
      type: 'result',
      subtype: out.result.subtype,
      total_cost_usd: out.result.total_cost_usd,
      usage: { input_tokens: out.result.usage.input_tokens, output_tokens: out.result.usage.output_tokens },
    },
    vesselId: rec.vesselId,
    idempotencyKey: rec.idempotencyKey,
    status: rec.status,
  };
}

/**
 * Waits until the vessel's delivery is recorded as delivered, then until the gateway is drained for the grace period
 * (nothing running, nothing due within it: test/support/drained.ts), and answers the record.
 */
async function delivered(token: string, vesselId: string, graceMs = GRACE_MS): Promise<VesselRecord> {
  await pollUntil(
    () => vesselRecord(gw.url, token, vesselId),
    (r) => r.webhook?.status === 'delivered' || r.webhook?.status === 'failed',
    {
      timeoutMs: 30_000,
      what: `delivery of ${vesselId}`,
    },
  );
  if (graceMs > 0) await drained(gw, { quietMs: graceMs });
  return vesselRecord(gw.url, token, vesselId);
}

/** Everything a signed delivery must be: headers, body bytes, both signatures by three independent checks. */
function checkSigned(req: ReceivedRequest, rec: VesselRecord, secret: string) {
  const body = expectedBody(rec);
  const webhookId = `msg_${rec.vesselId}`;
  expect(req.method).toBe('POST');
  expect(req.path).toBe('/hook');
  expect(JSON.parse(req.text)).toEqual(body);
  expect(req.text).toBe(JSON.stringify(body)); // the exact bytes, key order included
  expect(req.headers['content-type']).toBe('application/json');
  expect(req.headers['user-agent']).toContain('prompt-gateway');
  expect(req.headers['webhook-id']).toBe(webhookId);
  const ts = req.headers['webhook-timestamp'] as string;
  expect(ts).toMatch(/^\d{10}$/);
  expect(Math.abs(Number(ts) - req.at / 1000)).toBeLessThan(5);

  // The receiver's own HMACs of the raw bytes.
  expect(req.headers['x-service-signature']).toBe(ownHex(req.body, secret));
  expect(req.headers['webhook-signature']).toBe(`v1,${ownStandard(webhookId, ts, req.body, secret)}`);
  expect(ownHex(req.body, `${secret}x`)).not.toBe(req.headers['x-service-signature']);

  // The independent Standard Webhooks implementation (its key is base64; ours is the raw UTF-8 bytes).
  const headers = req.headers as Record<string, string>;
  const wh = new Webhook(Buffer.from(secret, 'utf8').toString('base64'));
  expect(wh.verify(req.body, headers)).toEqual(body);
  expect(() => new Webhook(Buffer.from(`${secret}x`, 'utf8').toString('base64')).verify(req.body, headers)).toThrow('No matching signature found');

  // The package's helper, both schemes.
  expect(verifyWebhook(req.body, req.headers, secret)).toEqual({ ok: true, scheme: 'standard-webhooks', webhookId, timestamp: new Date(Number(ts) * 1000) });
  const { 'webhook-signature': _drop, ...hexOnly } = req.headers;
  expect(verifyWebhook(req.body, hexOnly, secret)).toEqual({ ok: true, scheme: 'x-service-signature' });
  expect(verifyWebhook(req.body, req.headers, `${secret}x`)).toMatchObject({ ok: false });
  expect(verifyWebhook(Buffer.concat([req.body, Buffer.from(' ')]), req.headers, secret)).toMatchObject({ ok: false });
}

/** The record's `webhook` after one attempt the receiver answered with `status`. */
function checkOneAttempt(rec: VesselRecord, req: ReceivedRequest, status: number) {
  expect(rec.webhook).toEqual({
    status: 'delivered',
    attempts: [{ round: 1, attempt: 1, time: expect.stringMatching(ISO), statusCode: status, durationMs: expect.any(Number) }],
  });
  const [attempt] = rec.webhook!.attempts;
  const sentAt = new Date(attempt!.time).getTime();
  // Sent before it arrived (same clock), not long before.
  expect(sentAt).toBeLessThanOrEqual(req.at);
  expect(req.at - sentAt).toBeLessThan(5_000);
  expect(attempt!.durationMs).toBeGreaterThanOrEqual(0);
  expect(attempt!.durationMs).toBeLessThan(10_000);
}

it("the receiver's HMAC agrees with the published test vector", () => {
  const vector = '757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';
  expect(ownHex(Buffer.from('Hello, World!'), "It's a Secret to Everybody")).toBe(vector);
  expect(hexSignature('Hello, World!', "It's a Secret to Everybody")).toBe(vector);
});

describe('one signed delivery per ended vessel', () => {
  it('COMPLETED: the exact body (cost and usage as in the record), both signatures verify three ways, the attempt is recorded', async () => {
    const rx = await receiver(202);
    const token = await gw.token({ user: `completed-${++seq}` });
    const secret = 'whsec_completed-secret';
    const idempotencyKey = key('completed');
    const q = await incubate(gw.url, { message: 'Done [[words:2]]', idempotencyKey, options: { token, model: MODEL }, callback: { url: rx.url, secret } });
    const rec = await delivered(token, q.vesselId);
    expect(rec).toMatchObject({ status: 'COMPLETED', callback: { url: rx.url, signed: true } });
    expect(rec.output).toMatchObject({ success: true, text: 'word1 word2', result: { subtype: 'success', usage: { output_tokens: 2 } } });
    expect(rec.output!.result.total_cost_usd).toBeGreaterThan(0);

    expect(rx.requests).toHaveLength(1);
    const [req] = rx.requests;
    checkSigned(req!, rec, secret);
    expect(JSON.parse(req!.text)).toMatchObject({
      success: true,
      text: 'word1 word2',
      result: { subtype: 'success' },
      vesselId: q.vesselId,
      idempotencyKey,
      status: 'COMPLETED',
    });
    checkOneAttempt(rec, req!, 202);
  });

  it('FAILED (budget spent when due): success false, text = the error, subtype error_user_budget_exhausted', async () => {
    const rx = await receiver(200);
    const token = await gw.token({ user: `spent-${++seq}`, budget: { ai: 0 } });
    const secret = 'failed-secret';
    const q = await incubate(gw.url, {
      message: 'Never runs [[words:2]]',
      idempotencyKey: key('failed'),
      options: { token, model: MODEL },
      callback: { url: rx.url, secret },
    });
    const rec = await delivered(token, q.vesselId);
    expect(rec.status).toBe('FAILED');

    expect(rx.requests).toHaveLength(1);
    const [req] = rx.requests;
    checkSigned(req!, rec, secret);
    expect(JSON.parse(req!.text)).toEqual({
      success: false,
      text: "The vessel could not run: The user's budget is used up for the current day window: AI (0 of 0 microdollars)",
      result: { type: 'result', subtype: 'error_user_budget_exhausted', total_cost_usd: 0, usage: { input_tokens: 0, output_tokens: 0 } },
      vesselId: q.vesselId,
      idempotencyKey: q.idempotencyKey,
      status: 'FAILED',
    });
    checkOneAttempt(rec, req!, 200);
  });

  it('FAILED after running (max turns): the agent’s subtype and text, and what the run cost', async () => {
    const rx = await receiver(200);
    const token = await gw.token({ user: `turns-${++seq}` });
    const secret = 'turns-secret';
    const q = await incubate(gw.url, {
      message: 'Loop [[1> tool:get_weather {}]] [[2> tool:get_weather {}]]',
      idempotencyKey: key('turns'),
      options: {
        token,
        model: MODEL,
        maxTurns: 1,
        tools: [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object' }, url: 'http://127.0.0.1:9/weather' }],
      },
      callback: { url: rx.url, secret },
    });
    const rec = await delivered(token, q.vesselId);
    expect(rec.status).toBe('FAILED');
    expect(rec.output!.result.subtype).toBe('error_max_turns');
    expect(rec.output!.result.total_cost_usd).toBeGreaterThan(0);
    expect(rec.output!.text.length).toBeGreaterThan(0);

    expect(rx.requests).toHaveLength(1);
    const [req] = rx.requests;
    checkSigned(req!, rec, secret);
    expect(JSON.parse(req!.text)).toMatchObject({ success: false, text: rec.output!.text, result: { subtype: 'error_max_turns' }, status: 'FAILED' });
    checkOneAttempt(rec, req!, 200);
  });

  it('CANCELED (a PENDING vessel canceled): subtype canceled, status CANCELED', async () => {
    const rx = await receiver(204);
    const token = await gw.token({ user: `cancel-${++seq}` });
    const secret = 'cancel-secret';
    const q = await incubate(gw.url, {
      message: 'Later [[words:2]]',
      idempotencyKey: key('cancel'),
      options: { token, model: MODEL },
      ttl: 600,
      callback: { url: rx.url, secret },
    });
    const canceled = await api.cancel(q.vesselId, token);
    expect(canceled.status).toBe(200);
    expect(canceled.body.status).toBe('CANCELED');
    const rec = await delivered(token, q.vesselId);
    expect(rec.status).toBe('CANCELED');

    expect(rx.requests).toHaveLength(1);
    const [req] = rx.requests;
    checkSigned(req!, rec, secret);
    expect(JSON.parse(req!.text)).toEqual({
      success: false,
      text: 'The vessel was canceled before it ran',
      result: { type: 'result', subtype: 'canceled', total_cost_usd: 0, usage: { input_tokens: 0, output_tokens: 0 } },
      vesselId: q.vesselId,
      idempotencyKey: q.idempotencyKey,
      status: 'CANCELED',
    });
    checkOneAttempt(rec, req!, 204);
  });
});

it('an unsigned callback: webhook-id and webhook-timestamp, but neither signature header', async () => {
  const rx = await receiver(200);
  const token = await gw.token({ user: `unsigned-${++seq}` });
  const q = await incubate(gw.url, {
    message: 'Plain [[words:3]]',
    idempotencyKey: key('unsigned'),
    options: { token, model: MODEL },
    callback: { url: rx.url },
  });
  const rec = await delivered(token, q.vesselId);
  expect(rec.callback).toEqual({ url: rx.url, signed: false });

  expect(rx.requests).toHaveLength(1);
  const [req] = rx.requests;
  expect(req!.text).toBe(JSON.stringify(expectedBody(rec)));
  expect(req!.headers['content-type']).toBe('application/json');
  expect(req!.headers['user-agent']).toContain('prompt-gateway');
  expect(req!.headers['webhook-id']).toBe(`msg_${q.vesselId}`);
  expect(Math.abs(Number(req!.headers['webhook-timestamp']) - req!.at / 1000)).toBeLessThan(5);
  expect(req!.headers).not.toHaveProperty('webhook-signature');
  expect(req!.headers).not.toHaveProperty('x-service-signature');
  expect(req!.rawHeaders.map((h) => h.toLowerCase())).not.toContain('x-service-signature');
  expect(verifyWebhook(req!.body, req!.headers, 'anything')).toEqual({
    ok: false,
    reason: 'no signature: neither webhook-signature nor X-Service-Signature is present',
  });
  checkOneAttempt(rec, req!, 200);
});

it("a batch's callback: exactly one delivery per vessel, distinct webhook-ids matching the batch's vesselIds", async () => {
  const rx = await receiver(200);
  const token = await gw.token({ user: `batch-${++seq}` });
  const secret = 'batch-secret';
  const items = [0, 1, 2].map((i) => ({ message: `Item ${i} [[words:${i + 1}]]`, idempotencyKey: key(`batch-${i}`) }));
  const answer = await incubateBatch(gw.url, { items, options: { token, model: MODEL }, callback: { url: rx.url, secret } });
  expect(answer).toMatchObject({ total: 3, queued: 3, failed: 0 });
  const vesselIds = answer.items.map((i) => (i.status === 'queued' ? i.vesselId : ''));
  expect(new Set(vesselIds).size).toBe(3);

  for (const id of vesselIds) await delivered(token, id, 0);
  await drained(gw, { quietMs: GRACE_MS });
  const records: VesselRecord[] = [];
  for (const id of vesselIds) records.push(await vesselRecord(gw.url, token, id));

  expect(rx.requests).toHaveLength(3);
  const ids = rx.requests.map((r) => r.headers['webhook-id']);
  expect(new Set(ids).size).toBe(3);
  expect([...ids].sort()).toEqual(vesselIds.map((id) => `msg_${id}`).sort());
  for (const [i, rec] of records.entries()) {
    const req = rx.requests.find((r) => r.headers['webhook-id'] === `msg_${rec.vesselId}`)!;
    checkSigned(req, rec, secret);
    expect(JSON.parse(req.text)).toMatchObject({
      success: true,
      text: Array.from({ length: i + 1 }, (_, w) => `word${w + 1}`).join(' '),
      idempotencyKey: items[i]!.idempotencyKey,
      status: 'COMPLETED',
    });
    checkOneAttempt(rec, req, 200);
  }
});

it('a secret with non-ASCII characters signs with its UTF-8 bytes', async () => {
  const rx = await receiver(200);
  const token = await gw.token({ user: `unicode-${++seq}` });
  const secret = 'pässwörd-🔑';
  const q = await incubate(gw.url, {
    message: 'Unicode [[words:2]]',
    idempotencyKey: key('unicode'),
    options: { token, model: MODEL },
    callback: { url: rx.url, secret },
  });
  const rec = await delivered(token, q.vesselId);

  expect(rx.requests).toHaveLength(1);
  const [req] = rx.requests;
  checkSigned(req!, rec, secret);
  // Not any other reading of the characters: Latin-1 bytes, or UTF-16 code units, give other signatures.
  expect(req!.headers['x-service-signature']).not.toBe(createHmac('sha256', Buffer.from(secret, 'latin1')).update(req!.body).digest('hex'));
  expect(req!.headers['x-service-signature']).not.toBe(createHmac('sha256', Buffer.from(secret, 'utf16le')).update(req!.body).digest('hex'));
  checkOneAttempt(rec, req!, 200);
});
