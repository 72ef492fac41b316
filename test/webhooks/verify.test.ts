import { createHmac } from 'node:crypto';
import { describe, expect, it } from 'vitest';
// Through the package name, as a receiver imports it (package.json "exports": "./webhooks").
import { DEFAULT_TOLERANCE_SECONDS, verifyWebhook, type WebhookHeaders } from 'prompt-gateway/webhooks';
import { verifyWebhook as verifyFromSource } from '../../lambdas/webhooks/verify.ts';
import { deliveryHeaders } from '../../lambdas/webhooks/deliver.ts';

/**
 * verifyWebhook for receivers (issue 15, "Verification helper"): both signature forms, the 5-minute timestamp
 * tolerance, rotation lists, the header shapes receivers hand it. Signatures here are made with node:crypto directly,
 * not with the gateway's signer, so a shared mistake in signature.ts would show.
 */

const SECRET = 'whk-secret-✓';
const BODY = '{"success":true,"text":"done","vesselId":"v-1","status":"COMPLETED"}';
const ID = 'msg_v-1';
/** The receiver's clock in every test (unless the test is about the real clock). */
const NOW = new Date('2030-06-01T12:00:00.000Z');
const NOW_S = NOW.getTime() / 1000;

const standard = (id: string, ts: number | string, body: string | Buffer, secret = SECRET) =>
  createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(Buffer.from(`${id}.${ts}.`, 'utf8'))
    .update(body)
    .digest('base64');
const hex = (body: string | Buffer, secret = SECRET) => createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex');

/** Standard Webhooks headers as the gateway sends them (lower-case record). */
function signed(opts: { id?: string; ts?: number; body?: string; secret?: string } = {}): Record<string, string> {
  const id = opts.id ?? ID;
  const ts = opts.ts ?? NOW_S;
  return {
    'content-type': 'application/json',
    'webhook-id': id,
    'webhook-timestamp': String(ts),
    'webhook-signature': `v1,${standard(id, ts, opts.body ?? BODY, opts.secret ?? SECRET)}`,
  };
}

const at = { now: NOW };
const OK = { ok: true, scheme: 'standard-webhooks', webhookId: ID, timestamp: NOW } as const;
const MISMATCH = { ok: false, reason: 'webhook-signature does not match' } as const;
const BAD_STAMP = { ok: false, reason: 'webhook-timestamp is missing or not whole seconds' } as const;

describe('Standard Webhooks headers', () => {
  it('accept a delivery signed with the secret', () => {
    expect(verifyWebhook(BODY, signed(), SECRET, at)).toEqual(OK);
  });

  it('accept what the gateway itself sends (deliveryHeaders), on the real clock by default', () => {
    const ts = Math.floor(Date.now() / 1000);
    const result = verifyWebhook(BODY, deliveryHeaders({ webhookId: 'msg_x', timestamp: ts, body: BODY, secret: SECRET }), SECRET);
    expect(result).toEqual({ ok: true, scheme: 'standard-webhooks', webhookId: 'msg_x', timestamp: new Date(ts * 1000) });
  });

  it('is the same function through the package name and from the source', () => {
    expect(verifyFromSource(BODY, signed(), SECRET, at)).toEqual(verifyWebhook(BODY, signed(), SECRET, at));
    expect(DEFAULT_TOLERANCE_SECONDS).toBe(300);
  });

  it('refuse a tampered body', () => {
    expect(verifyWebhook(BODY.replace('done', 'Done'), signed(), SECRET, at)).toEqual(MISMATCH);
    expect(verifyWebhook(`${BODY} `, signed(), SECRET, at)).toEqual(MISMATCH);
    expect(verifyWebhook('', signed(), SECRET, at)).toEqual(MISMATCH);
  });

  it('refuse a wrong secret', () => {
    expect(verifyWebhook(BODY, signed(), `${SECRET}!`, at)).toEqual(MISMATCH);
    expect(verifyWebhook(BODY, signed({ secret: 'other' }), SECRET, at)).toEqual(MISMATCH);
  });

  it('refuse a signature over another id or timestamp', () => {
    const headers = signed();
    expect(verifyWebhook(BODY, { ...headers, 'webhook-id': 'msg_other' }, SECRET, at)).toEqual(MISMATCH);
    expect(verifyWebhook(BODY, { ...headers, 'webhook-timestamp': String(NOW_S - 1) }, SECRET, at)).toEqual(MISMATCH);
  });

  it('refuse a missing webhook-id', () => {
    const { 'webhook-id': _, ...headers } = signed();
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual({ ok: false, reason: 'webhook-id is missing' });
    expect(verifyWebhook(BODY, { ...signed(), 'webhook-id': '' }, SECRET, at)).toEqual({ ok: false, reason: 'webhook-id is missing' });
  });

  it('refuse a missing webhook-timestamp', () => {
    const { 'webhook-timestamp': _, ...headers } = signed();
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual(BAD_STAMP);
  });

  it.each(['abc', '12abc', '1.5', '-5', '0x10', '1e9', '', ' '])('refuse a non-numeric webhook-timestamp %j', (stamp) => {
    const headers: Record<string, string> = { ...signed(), 'webhook-timestamp': stamp };
    headers['webhook-signature'] = `v1,${standard(ID, stamp, BODY)}`; // even signed over that very text
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual(BAD_STAMP);
  });

  describe('timestamp tolerance (300 s either way by default)', () => {
    const check = (ts: number, opts: { toleranceSeconds?: number } = {}) => verifyWebhook(BODY, signed({ ts }), SECRET, { ...at, ...opts });

    it('accepts exactly 300 s old and exactly 300 s ahead', () => {
      expect(check(NOW_S - 300)).toEqual({ ...OK, timestamp: new Date((NOW_S - 300) * 1000) });
      expect(check(NOW_S + 300)).toEqual({ ...OK, timestamp: new Date((NOW_S + 300) * 1000) });
    });

    it('refuses 301 s old and 301 s ahead', () => {
      const reason = { ok: false, reason: 'webhook-timestamp is more than 300 s from now' };
      expect(check(NOW_S - 301)).toEqual(reason);
      expect(check(NOW_S + 301)).toEqual(reason);
      expect(check(0)).toEqual(reason);
    });

    it('takes a custom toleranceSeconds', () => {
      expect(check(NOW_S - 10, { toleranceSeconds: 10 })).toMatchObject({ ok: true });
      expect(check(NOW_S + 10, { toleranceSeconds: 10 })).toMatchObject({ ok: true });
      expect(check(NOW_S - 11, { toleranceSeconds: 10 })).toEqual({ ok: false, reason: 'webhook-timestamp is more than 10 s from now' });
      expect(check(NOW_S + 11, { toleranceSeconds: 10 })).toEqual({ ok: false, reason: 'webhook-timestamp is more than 10 s from now' });
      expect(check(NOW_S - 3600, { toleranceSeconds: 3600 })).toMatchObject({ ok: true });
      expect(check(NOW_S - 1, { toleranceSeconds: 0 })).toEqual({ ok: false, reason: 'webhook-timestamp is more than 0 s from now' });
      expect(check(NOW_S, { toleranceSeconds: 0 })).toMatchObject({ ok: true });
    });

    it('refuses a stale delivery even though its signature is right', () => {
      const ts = NOW_S - 3600;
      expect(verifyWebhook(BODY, signed({ ts }), SECRET, { now: new Date(ts * 1000) })).toMatchObject({ ok: true });
      expect(verifyWebhook(BODY, signed({ ts }), SECRET, at)).toEqual({ ok: false, reason: 'webhook-timestamp is more than 300 s from now' });
    });
  });

  describe('several signatures (secret rotation)', () => {
    const good = standard(ID, NOW_S, BODY);
    const bad = standard(ID, NOW_S, BODY, 'old-secret');
    const withSignature = (value: string) => ({ ...signed(), 'webhook-signature': value });

    it('accepts when any v1 entry matches', () => {
      expect(verifyWebhook(BODY, withSignature(`v1,${bad} v1,${good}`), SECRET, at)).toEqual(OK);
      expect(verifyWebhook(BODY, withSignature(`v1,${good} v1,${bad}`), SECRET, at)).toEqual(OK);
      expect(verifyWebhook(BODY, withSignature(`v1,${bad} v1,${bad}`), SECRET, at)).toEqual(MISMATCH);
    });

    it('ignores entries of other versions, even with the right signature', () => {
      expect(verifyWebhook(BODY, withSignature(`v2,${good}`), SECRET, at)).toEqual(MISMATCH);
      expect(verifyWebhook(BODY, withSignature(`v1a,${good}`), SECRET, at)).toEqual(MISMATCH);
      expect(verifyWebhook(BODY, withSignature(good), SECRET, at)).toEqual(MISMATCH);
      expect(verifyWebhook(BODY, withSignature(`v2,${good} v1,${good}`), SECRET, at)).toEqual(OK);
      // v1a, would be read as v1 only by a prefix match on "v1".
      expect(verifyWebhook(BODY, withSignature(`v1a,${bad} v1,${good}`), SECRET, at)).toEqual(OK);
    });

    it('refuses an empty signature list', () => {
      expect(verifyWebhook(BODY, withSignature(''), SECRET, at)).toEqual(MISMATCH);
      expect(verifyWebhook(BODY, withSignature('v1,'), SECRET, at)).toEqual(MISMATCH);
    });
  });

  it('compare signatures of another length as different, without throwing', () => {
    const good = standard(ID, NOW_S, BODY);
    const raw = Buffer.from(good, 'base64');
    const variants = [
      `v1,${raw.subarray(0, 31).toString('base64')}`,
      `v1,${Buffer.concat([raw, Buffer.from([0])]).toString('base64')}`,
      `v1,${raw.subarray(0, 1).toString('base64')}`,
      `v1,${Buffer.alloc(1024, 7).toString('base64')}`,
      'v1,%%%%',
    ];
    for (const value of variants) {
      expect(() => verifyWebhook(BODY, { ...signed(), 'webhook-signature': value }, SECRET, at)).not.toThrow();
      expect(verifyWebhook(BODY, { ...signed(), 'webhook-signature': value }, SECRET, at)).toEqual(MISMATCH);
    }
  });
});

describe('X-Service-Signature', () => {
  const HEX_OK = { ok: true, scheme: 'x-service-signature' } as const;
  const HEX_BAD = { ok: false, reason: 'X-Service-Signature does not match the body' } as const;

  it('alone is accepted when it matches the body', () => {
    expect(verifyWebhook(BODY, { 'x-service-signature': hex(BODY) }, SECRET)).toEqual(HEX_OK);
    expect(verifyWebhook(BODY, { 'X-Service-Signature': hex(BODY) }, SECRET)).toEqual(HEX_OK);
    expect(
      verifyWebhook(
        'Hello, World!',
        { 'x-service-signature': '757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17' },
        "It's a Secret to Everybody",
      ),
    ).toEqual(HEX_OK);
  });

  it('alone is refused for a tampered body or a wrong secret', () => {
    expect(verifyWebhook(`${BODY}x`, { 'x-service-signature': hex(BODY) }, SECRET)).toEqual(HEX_BAD);
    expect(verifyWebhook(BODY, { 'x-service-signature': hex(BODY) }, 'other')).toEqual(HEX_BAD);
  });

  it('of another length is different, without throwing', () => {
    const good = hex(BODY);
    for (const value of [good.slice(0, 63), `${good}0`, good.slice(0, 2), '', `${good}${good}`, 'é'.repeat(32)]) {
      expect(() => verifyWebhook(BODY, { 'x-service-signature': value }, SECRET)).not.toThrow();
      expect(verifyWebhook(BODY, { 'x-service-signature': value }, SECRET)).toEqual(HEX_BAD);
    }
  });

  it('does not rescue a failing webhook-signature', () => {
    const headers = { ...signed({ body: 'something else' }), 'x-service-signature': hex(BODY) };
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual(MISMATCH);
    const stale = { ...signed({ ts: NOW_S - 301 }), 'x-service-signature': hex(BODY) };
    expect(verifyWebhook(BODY, stale, SECRET, at)).toEqual({ ok: false, reason: 'webhook-timestamp is more than 300 s from now' });
    const withHex: Record<string, string> = { ...signed(), 'x-service-signature': hex(BODY) };
    const { 'webhook-id': _, ...noId } = withHex;
    expect(verifyWebhook(BODY, noId, SECRET, at)).toEqual({ ok: false, reason: 'webhook-id is missing' });
  });

  it('is not consulted when webhook-signature is valid (a wrong hex does not spoil it)', () => {
    expect(verifyWebhook(BODY, { ...signed(), 'x-service-signature': '00' }, SECRET, at)).toEqual(OK);
  });
});

it('nothing to check: not ok, with a reason', () => {
  const reason = { ok: false, reason: 'no signature: neither webhook-signature nor X-Service-Signature is present' };
  expect(verifyWebhook(BODY, {}, SECRET)).toEqual(reason);
  expect(verifyWebhook(BODY, { 'webhook-id': ID, 'webhook-timestamp': String(NOW_S) }, SECRET, at)).toEqual(reason);
  expect(verifyWebhook(BODY, new Headers(), SECRET)).toEqual(reason);
});

it('an empty secret is never ok, even for a body signed with the empty key', () => {
  const reason = { ok: false, reason: 'no secret to verify with' };
  expect(verifyWebhook(BODY, signed({ secret: '' }), '', at)).toEqual(reason);
  expect(verifyWebhook(BODY, { 'x-service-signature': hex(BODY, '') }, '')).toEqual(reason);
  expect(verifyWebhook(BODY, signed(), undefined as unknown as string, at)).toEqual(reason);
});

describe('header shapes', () => {
  it('a Fetch Headers', () => {
    expect(verifyWebhook(BODY, new Headers(signed()), SECRET, at)).toEqual(OK);
    expect(verifyWebhook(BODY, new Headers({ 'X-Service-Signature': hex(BODY) }), SECRET)).toEqual({ ok: true, scheme: 'x-service-signature' });
    expect(verifyWebhook(`${BODY} `, new Headers(signed()), SECRET, at)).toEqual(MISMATCH);
  });

  it('a Fetch Headers with webhook-signature appended twice (joined with ", ")', () => {
    const headers = new Headers(signed());
    headers.set('webhook-signature', `v1,${standard(ID, NOW_S, BODY, 'old')}`);
    headers.append('webhook-signature', `v1,${standard(ID, NOW_S, BODY)}`);
    expect(headers.get('webhook-signature')).toContain(', v1,');
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual(OK);
  });

  it('a Node-style record in lower case, mixed case or upper case', () => {
    const headers = signed();
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual(OK);
    const mixed = Object.fromEntries(
      Object.entries(headers).map(([k, v]) => [k.replace(/(^|-)([a-z])/g, (_m, d: string, c: string) => d + c.toUpperCase()), v]),
    );
    expect(Object.keys(mixed)).toContain('Webhook-Signature');
    expect(verifyWebhook(BODY, mixed, SECRET, at)).toEqual(OK);
    const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
    expect(verifyWebhook(BODY, upper, SECRET, at)).toEqual(OK);
  });

  it('array values (a header sent twice) and undefined values', () => {
    const headers: WebhookHeaders = {
      'webhook-id': [ID],
      'webhook-timestamp': String(NOW_S),
      'webhook-signature': [`v1,${standard(ID, NOW_S, BODY, 'old')}`, `v1,${standard(ID, NOW_S, BODY)}`],
      'x-service-signature': undefined,
    };
    expect(verifyWebhook(BODY, headers, SECRET, at)).toEqual(OK);
    const allBad: WebhookHeaders = { ...headers, 'webhook-signature': [`v1,${standard(ID, NOW_S, BODY, 'a')}`, `v1,${standard(ID, NOW_S, BODY, 'b')}`] };
    expect(verifyWebhook(BODY, allBad, SECRET, at)).toEqual(MISMATCH);
    expect(verifyWebhook(BODY, { 'x-service-signature': [hex(BODY)] }, SECRET)).toEqual({ ok: true, scheme: 'x-service-signature' });
    expect(verifyWebhook(BODY, { 'webhook-signature': undefined, 'x-service-signature': hex(BODY) }, SECRET)).toEqual({
      ok: true,
      scheme: 'x-service-signature',
    });
  });
});

describe('raw body forms', () => {
  it('a Buffer or Uint8Array of the exact bytes', () => {
    expect(verifyWebhook(Buffer.from(BODY, 'utf8'), signed(), SECRET, at)).toEqual(OK);
    expect(verifyWebhook(new TextEncoder().encode(BODY), signed(), SECRET, at)).toEqual(OK);
    expect(verifyWebhook(Buffer.from(BODY, 'utf8'), { 'x-service-signature': hex(BODY) }, SECRET)).toEqual({ ok: true, scheme: 'x-service-signature' });
  });

  it('a unicode body: the UTF-8 bytes are what is signed', () => {
    const body = '{"text":"héllo 🌍 — 你好"}';
    const headers = signed({ body });
    expect(verifyWebhook(body, headers, SECRET, at)).toEqual(OK);
    expect(verifyWebhook(Buffer.from(body, 'utf8'), headers, SECRET, at)).toEqual(OK);
    expect(verifyWebhook(Buffer.from(body, 'latin1'), headers, SECRET, at)).toEqual(MISMATCH);
  });

  it('a re-serialised body is not the raw body', () => {
    const pretty = JSON.stringify(JSON.parse(BODY), null, 2);
    expect(verifyWebhook(pretty, signed(), SECRET, at)).toEqual(MISMATCH);
  });
});
