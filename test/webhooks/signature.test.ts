import { createHmac } from 'node:crypto';
import fc from 'fast-check';
import { Webhook, WebhookVerificationError } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { deliveryHeaders, WEBHOOK_USER_AGENT } from '../../lambdas/webhooks/deliver.ts';
import { hexSignature, standardSignature } from '../../lambdas/webhooks/signature.ts';
import { verifyWebhook } from '../../lambdas/webhooks/verify.ts';

/**
 * The two signatures of a delivery (issue 15, "Headers"): the published X-Service-Signature test vector, UTF-8 keys and
 * bodies checked against node:crypto directly, and the Standard Webhooks signature checked against the independent
 * `standardwebhooks` implementation of the spec. Both are keyed with the UTF-8 bytes of the secret as given, which is
 * what `standardwebhooks` uses when handed the base64 of those bytes.
 */

const VECTOR_SECRET = "It's a Secret to Everybody";
const VECTOR_BODY = 'Hello, World!';
const VECTOR_HEX = '757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17';

/** An independent HMAC: node:crypto over explicit UTF-8 bytes. */
const hmac = (secret: string, data: Buffer | string, encoding: 'hex' | 'base64') =>
  createHmac('sha256', Buffer.from(secret, 'utf8'))
    .update(typeof data === 'string' ? Buffer.from(data, 'utf8') : data)
    .digest(encoding);

/** `standardwebhooks` takes a base64 secret; ours is the raw UTF-8 bytes of the caller's secret. */
const standardWebhook = (secret: string) => new Webhook(Buffer.from(secret, 'utf8').toString('base64'));

const nowSeconds = () => Math.floor(Date.now() / 1000);

describe('hexSignature (X-Service-Signature)', () => {
  it('matches the published test vector', () => {
    expect(hexSignature(VECTOR_BODY, VECTOR_SECRET)).toBe(VECTOR_HEX);
  });

  it('gives the same signature for the body as a Buffer or a Uint8Array', () => {
    expect(hexSignature(Buffer.from(VECTOR_BODY, 'utf8'), VECTOR_SECRET)).toBe(VECTOR_HEX);
    expect(hexSignature(new TextEncoder().encode(VECTOR_BODY), VECTOR_SECRET)).toBe(VECTOR_HEX);
  });

  it('is lowercase hex of 32 bytes', () => {
    expect(hexSignature('{"a":1}', 's')).toMatch(/^[0-9a-f]{64}$/);
  });

  it('keys with the UTF-8 bytes of a unicode secret and signs the UTF-8 bytes of a unicode body', () => {
    const secret = 'sécret-🔑-秘密';
    const body = '{"text":"héllo wörld — 你好 🌍"}';
    const expected = hmac(secret, body, 'hex');
    expect(hexSignature(body, secret)).toBe(expected);
    expect(hexSignature(Buffer.from(body, 'utf8'), secret)).toBe(expected);
    // Not Latin-1 or UTF-16 bytes: those would give other signatures.
    expect(expected).not.toBe(createHmac('sha256', Buffer.from(secret, 'latin1')).update(Buffer.from(body, 'utf8')).digest('hex'));
    expect(expected).not.toBe(createHmac('sha256', Buffer.from(secret, 'utf8')).update(Buffer.from(body, 'utf16le')).digest('hex'));
  });

  it('uses the secret exactly as given: no base64 decoding, no whsec_ prefix handling', () => {
    const secret = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
    expect(hexSignature('x', secret)).toBe(hmac(secret, 'x', 'hex'));
    expect(hexSignature('x', secret)).not.toBe(
      createHmac('sha256', Buffer.from(secret.slice('whsec_'.length), 'base64'))
        .update('x')
        .digest('hex'),
    );
  });

  it('differs for another secret or another body', () => {
    expect(hexSignature(VECTOR_BODY, `${VECTOR_SECRET}.`)).not.toBe(VECTOR_HEX);
    expect(hexSignature(`${VECTOR_BODY} `, VECTOR_SECRET)).not.toBe(VECTOR_HEX);
  });
});

describe('standardSignature (webhook-signature)', () => {
  it('is base64 HMAC-SHA256 of "id.timestamp.body", without the v1, prefix', () => {
    const sig = standardSignature('msg_1', 1_700_000_000, '{"ok":true}', 'topsecret');
    expect(sig).toBe(hmac('topsecret', 'msg_1.1700000000.{"ok":true}', 'base64'));
    expect(sig).not.toMatch(/^v1,/);
    expect(Buffer.from(sig, 'base64')).toHaveLength(32);
  });

  it('equals what standardwebhooks signs for the same id, timestamp, body and key', () => {
    const secret = 'sécret-🔑';
    const body = '{"text":"héllo 🌍"}';
    const ts = 1_700_000_123;
    expect(`v1,${standardSignature('msg_abc', ts, body, secret)}`).toBe(standardWebhook(secret).sign('msg_abc', new Date(ts * 1000), body));
    expect(standardSignature('msg_abc', ts, Buffer.from(body, 'utf8'), secret)).toBe(standardSignature('msg_abc', ts, body, secret));
  });

  it('headers from deliveryHeaders verify with standardwebhooks', () => {
    const secret = VECTOR_SECRET;
    const body = JSON.stringify({ success: true, text: 'done', vesselId: 'v-1', status: 'COMPLETED' });
    const headers = deliveryHeaders({ webhookId: 'msg_v-1', timestamp: nowSeconds(), body, secret });
    expect(standardWebhook(secret).verify(body, headers)).toEqual(JSON.parse(body));
    expect(() => standardWebhook(`${secret}x`).verify(body, headers)).toThrow(WebhookVerificationError);
    expect(() => standardWebhook(secret).verify(body.replace('done', 'dona'), headers)).toThrow(WebhookVerificationError);
  });
});

describe('deliveryHeaders', () => {
  it('with a secret: the Standard Webhooks trio, the hex signature, content-type and user-agent', () => {
    const body = VECTOR_BODY;
    const headers = deliveryHeaders({ webhookId: 'msg_1', timestamp: 1_700_000_000, body, secret: VECTOR_SECRET });
    expect(headers).toEqual({
      'content-type': 'application/json',
      'user-agent': WEBHOOK_USER_AGENT,
      'webhook-id': 'msg_1',
      'webhook-timestamp': '1700000000',
      'webhook-signature': `v1,${hmac(VECTOR_SECRET, `msg_1.1700000000.${body}`, 'base64')}`,
      'X-Service-Signature': VECTOR_HEX,
    });
    expect(WEBHOOK_USER_AGENT).toBe('prompt-gateway-webhooks/1.0');
  });

  it('without a secret: exactly content-type, user-agent, webhook-id and webhook-timestamp (no signatures)', () => {
    const headers = deliveryHeaders({ webhookId: 'msg_2', timestamp: 1_700_000_001, body: '{}' });
    expect(headers).toEqual({
      'content-type': 'application/json',
      'user-agent': 'prompt-gateway-webhooks/1.0',
      'webhook-id': 'msg_2',
      'webhook-timestamp': '1700000001',
    });
    expect(Object.keys(headers).sort()).toEqual(['content-type', 'user-agent', 'webhook-id', 'webhook-timestamp']);
    const withUndefined = deliveryHeaders({ webhookId: 'msg_2', timestamp: 1_700_000_001, body: '{}', secret: undefined });
    expect(withUndefined).toEqual(headers);
  });
});

describe('property: deliveryHeaders verify with standardwebhooks and verifyWebhook; a one-byte change fails both', () => {
  // Any Unicode (no lone surrogates: a JSON body from JSON.stringify is well-formed), ids and secrets non-empty.
  const text = (minLength: number) => fc.string({ unit: 'binary', minLength, maxLength: 200 });
  const input = fc.record({
    body: text(0),
    secret: text(1),
    webhookId: text(1),
    // Anywhere within standardwebhooks' (and our) 5-minute tolerance of the real clock.
    skew: fc.integer({ min: -240, max: 240 }),
  });

  it('always verifies with both', () => {
    fc.assert(
      fc.property(input, ({ body, secret, webhookId, skew }) => {
        const timestamp = nowSeconds() + skew;
        const headers = deliveryHeaders({ webhookId, timestamp, body, secret });
        expect(() => standardWebhook(secret).verify(body, headers, { jsonParse: false })).not.toThrow();
        expect(verifyWebhook(body, headers, secret)).toEqual({
          ok: true,
          scheme: 'standard-webhooks',
          webhookId,
          timestamp: new Date(timestamp * 1000),
        });
        // Both signatures keyed with the UTF-8 bytes of the secret, over the UTF-8 bytes of the body.
        expect(headers['X-Service-Signature']).toBe(hmac(secret, body, 'hex'));
        expect(headers['webhook-signature']).toBe(`v1,${hmac(secret, `${webhookId}.${timestamp}.${body}`, 'base64')}`);
      }),
      { numRuns: 200 },
    );
  });

  it('fails both after a one-byte change of the body', () => {
    fc.assert(
      fc.property(
        input.filter((i) => i.body.length > 0),
        fc.nat(),
        fc.integer({ min: 1, max: 255 }),
        ({ body, secret, webhookId, skew }, at, xor) => {
          const timestamp = nowSeconds() + skew;
          const headers = deliveryHeaders({ webhookId, timestamp, body, secret });
          const bytes = Buffer.from(body, 'utf8');
          const changed = Buffer.from(bytes);
          const i = at % changed.length;
          changed[i] = changed[i]! ^ xor;
          // Ours checks the bytes themselves.
          expect(verifyWebhook(changed, headers, secret)).toEqual({ ok: false, reason: 'webhook-signature does not match' });
          const { 'webhook-signature': _, ...hexOnly } = headers;
          expect(verifyWebhook(changed, hexOnly, secret)).toEqual({ ok: false, reason: 'X-Service-Signature does not match the body' });
          // standardwebhooks decodes a Buffer as UTF-8 before signing: an invalid sequence can decode to the very text of
          // the original only in contrived cases, which are not a change it could see.
          fc.pre(changed.toString('utf8') !== body);
          expect(() => standardWebhook(secret).verify(changed, headers, { jsonParse: false })).toThrow(WebhookVerificationError);
        },
      ),
      { numRuns: 200 },
    );
  });
});
