import { timingSafeEqual } from 'node:crypto';
import { clock } from '../config/clock.ts';
import { hexSignature, standardSignature, type Bytes } from './signature.ts';

/**
 * For receivers: checks that a webhook delivery came from the gateway (docs/webhooks.md, "Verifying a delivery").
 * Exported by the package as `prompt-gateway/webhooks`; it needs only node:crypto (and config/clock.ts, which imports
 * nothing).
 *
 *   const check = verifyWebhook(rawBody, req.headers, process.env.CALLBACK_SECRET!);
 *   if (!check.ok) return reply(401, check.reason);
 *
 * - With Standard Webhooks headers (`webhook-id`, `webhook-timestamp`, `webhook-signature`): every `v1,` signature of
 *   the header is compared with the expected one in constant time, and the timestamp must be within the tolerance
 *   (5 minutes by default) of now, so an old delivery replayed later is refused. Receivers should also remember the
 *   `webhook-id`s they have handled: a retry of a delivery carries the same id.
 * - Otherwise with `X-Service-Signature` (the interface's scheme): the lowercase hex HMAC of the body, compared in
 *   constant time. It carries no timestamp, so it cannot tell a replay: prefer the Standard Webhooks headers.
 * When `webhook-signature` is present it decides; a failing one is never rescued by `X-Service-Signature`.
 */

/** How far a delivery's `webhook-timestamp` may be from the receiver's clock, either way (Standard Webhooks' 5 min). */
export const DEFAULT_TOLERANCE_SECONDS = 300;

/** Request headers as a Fetch `Headers`, or as Node's `req.headers` (any case; a repeated header as an array). */
export type WebhookHeaders = Headers | Readonly<Record<string, string | readonly string[] | undefined>>;

export type WebhookVerification =
  | { ok: true; scheme: 'standard-webhooks'; webhookId: string; timestamp: Date }
  | { ok: true; scheme: 'x-service-signature' }
  | { ok: false; reason: string };

export interface VerifyOptions {
  /** Default 300 s. */
  toleranceSeconds?: number;
  /** The receiver's clock (tests). */
  now?: Date;
}

/** Verifies a delivery: the raw body exactly as received (not re-serialised JSON), its headers, the callback secret. */
export function verifyWebhook(rawBody: Bytes, headers: WebhookHeaders, secret: string, opts: VerifyOptions = {}): WebhookVerification {
  if (typeof secret !== 'string' || secret === '') return { ok: false, reason: 'no secret to verify with' };
  const header = headerReader(headers);
  const standard = header('webhook-signature');
  if (standard !== undefined) return verifyStandard(rawBody, header, standard, secret, opts);
  const hex = header('x-service-signature');
  if (hex !== undefined) {
    return equalText(hex.trim(), hexSignature(rawBody, secret))
      ? { ok: true, scheme: 'x-service-signature' }
      : { ok: false, reason: 'X-Service-Signature does not match the body' };
  }
  return { ok: false, reason: 'no signature: neither webhook-signature nor X-Service-Signature is present' };
}

function verifyStandard(
  rawBody: Bytes,
  header: (name: string) => string | undefined,
  signatures: string,
  secret: string,
  opts: VerifyOptions,
): WebhookVerification {
  const id = header('webhook-id');
  const stamp = header('webhook-timestamp');
  if (!id) return { ok: false, reason: 'webhook-id is missing' };
  if (!stamp || !/^\d{1,15}$/.test(stamp.trim())) return { ok: false, reason: 'webhook-timestamp is missing or not whole seconds' };
  const timestamp = Number(stamp.trim());
  const now = Math.floor((opts.now?.getTime() ?? clock.now()) / 1000);
  const tolerance = opts.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (Math.abs(now - timestamp) > tolerance) return { ok: false, reason: `webhook-timestamp is more than ${tolerance} s from now` };
  const expected = standardSignature(id, timestamp, rawBody, secret);
  // A space-separated list of `version,signature` (several while a secret is being rotated); only v1 is known. The
  // base64 text is compared as sent, as the Standard Webhooks libraries do: no other spelling of the bytes passes.
  const matched = signatures
    .split(' ')
    .map((entry) => entry.replace(/,$/, '')) // a header sent twice arrives joined with ", "
    .filter((entry) => entry.startsWith('v1,'))
    .some((entry) => equalText(entry.slice(3), expected));
  return matched
    ? { ok: true, scheme: 'standard-webhooks', webhookId: id, timestamp: new Date(timestamp * 1000) }
    : { ok: false, reason: 'webhook-signature does not match' };
}

function headerReader(headers: WebhookHeaders): (name: string) => string | undefined {
  if (typeof (headers as Headers).get === 'function') return (name) => (headers as Headers).get(name) ?? undefined;
  const byLowerName = new Map<string, string>();
  for (const [key, value] of Object.entries(headers as Record<string, string | readonly string[] | undefined>)) {
    if (value === undefined) continue;
    // Node joins nothing for unknown headers sent twice: take them as one comma-joined value, as Fetch's Headers does.
    byLowerName.set(key.toLowerCase(), typeof value === 'string' ? value : value.join(', '));
  }
  return (name) => byLowerName.get(name);
}

/** Constant-time for equal lengths; different lengths differ (the length of a signature is no secret). */
function equalBytes(a: Buffer, b: Buffer): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

function equalText(given: string, expected: string): boolean {
  return equalBytes(Buffer.from(given, 'utf8'), Buffer.from(expected, 'utf8'));
}
