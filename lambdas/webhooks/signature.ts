import { createHmac } from 'node:crypto';

/**
 * The two signatures a webhook delivery carries (docs/webhooks.md), computed once here for the sender
 * (deliver.ts) and the receivers' helper (verify.ts). Both are HMAC-SHA256 keyed with the UTF-8 bytes of
 * `callback.secret` exactly as the caller gave it — no base64 decoding, no `whsec_` prefix handling — over the exact
 * bytes of the body that is sent. Only node:crypto, so receivers can import (or copy) it alone.
 */

export type Bytes = string | Uint8Array;

/** `X-Service-Signature`: lowercase hex HMAC-SHA256 of the raw body (the interface's own scheme). */
export function hexSignature(body: Bytes, secret: string): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(body).digest('hex');
}

/**
 * The Standard Webhooks signature (without its `v1,` prefix): base64 HMAC-SHA256 of `{id}.{timestamp}.{body}`, where
 * `timestamp` is whole seconds since the epoch, as sent in `webhook-timestamp`.
 */
export function standardSignature(id: string, timestamp: number, body: Bytes, secret: string): string {
  return createHmac('sha256', Buffer.from(secret, 'utf8')).update(`${id}.${timestamp}.`).update(body).digest('base64');
}
