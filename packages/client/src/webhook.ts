import { constantTimeEqual, fromBase64, hmac, toBase64, toHex, utf8 } from './crypto.js';

/**
 * Verifying a vessel's callback (the gateway's docs/webhooks.md). Each delivery carries two signatures, both
 * HMAC-SHA256 keyed with the UTF-8 bytes of the `callback.secret` you gave `/incubate`:
 *
 * - Standard Webhooks (https://www.standardwebhooks.com): `webhook-id`, `webhook-timestamp` and
 *   `webhook-signature: v1,<base64 HMAC of "<id>.<timestamp>.<body>">` (a space-separated list while secrets rotate).
 *   The timestamp must be within the tolerance (5 minutes) of now, so a captured delivery cannot be replayed later.
 *   When this header is present it decides: a failing one is never rescued by the other signature.
 * - `X-Service-Signature`: the lowercase hex HMAC of the raw body (the interface's own scheme; no timestamp).
 *
 * Standard Webhooks secrets are written `whsec_<base64 key>`, and its libraries key the HMAC with the decoded bytes.
 * The gateway keys with the secret's text as given. So for a secret that starts with `whsec_`, a `v1` signature made
 * with either key is accepted: the one the gateway makes, and the one a Standard Webhooks sender makes (that is how
 * the standard's own test vectors verify). Both need the secret.
 */

/** The body the gateway POSTs when a vessel ends (docs/webhooks.md, "Body"). */
export interface WebhookPayload {
  /** `true` only for a run that completed. */
  success: boolean;
  /** The answer; for a failed run, its error; for a canceled vessel, why. */
  text: string;
  /** Present (true) only when the output was too large to keep whole: `text` is its beginning. */
  truncated?: true;
  result: {
    type: 'result';
    /** `success`, an error subtype (`error_max_turns`, `error_user_budget_exhausted`, …) or `canceled`. */
    subtype: string;
    total_cost_usd: number;
    usage: { input_tokens: number; output_tokens: number };
  };
  vesselId: string;
  idempotencyKey: string;
  status: 'COMPLETED' | 'FAILED' | 'CANCELED';
}

/** Request headers as a Fetch `Headers`, or Node's `req.headers` (any letter case; a repeated header as an array). */
export type WebhookHeaders = Headers | { readonly [name: string]: string | readonly string[] | undefined };

export type WebhookVerificationErrorCode =
  /** No secret was given to verify with. */
  | 'no_secret'
  /** Neither `webhook-signature` nor `X-Service-Signature` is present. */
  | 'no_signature'
  /** `webhook-signature` without `webhook-id`, or `webhook-timestamp` missing or not whole seconds. */
  | 'invalid_headers'
  /** `webhook-timestamp` is further than the tolerance from now: an old delivery replayed, or a clock far off. */
  | 'timestamp_out_of_tolerance'
  /** No signature matches the body. */
  | 'invalid_signature'
  /** The signature matches but the body is not a JSON object. */
  | 'invalid_payload';

export class WebhookVerificationError extends Error {
  override readonly name = 'WebhookVerificationError';
  constructor(
    readonly code: WebhookVerificationErrorCode,
    message: string,
  ) {
    super(message);
  }
}

export interface VerifyWebhookOptions {
  /** How far `webhook-timestamp` may be from now, either way. Default 300 s (Standard Webhooks' 5 minutes). */
  toleranceSeconds?: number;
  /** The receiver's clock (default now). */
  now?: Date | number;
}

export const DEFAULT_TOLERANCE_SECONDS = 300;

/**
 * Checks a delivery and answers its parsed body; throws a `WebhookVerificationError` when it is not genuine.
 * `rawBody` must be the bytes exactly as they arrived (not JSON parsed and serialised again). `secret` may be a list
 * (while you move vessels to a new callback secret): any of them may match.
 */
export async function verifyWebhook<T = WebhookPayload>(
  rawBody: string | Uint8Array | ArrayBuffer,
  headers: WebhookHeaders,
  secret: string | readonly string[],
  opts: VerifyWebhookOptions = {},
): Promise<T> {
  const secrets = (typeof secret === 'string' ? [secret] : [...(secret ?? [])]).filter((s) => typeof s === 'string' && s !== '');
  if (secrets.length === 0) throw new WebhookVerificationError('no_secret', 'No secret to verify with');
  const body = typeof rawBody === 'string' ? utf8(rawBody) : rawBody instanceof Uint8Array ? rawBody : new Uint8Array(rawBody);
  const header = headerReader(headers);

  const standard = header('webhook-signature');
  if (standard !== undefined) await verifyStandard(body, header, standard, secrets, opts);
  else {
    const hex = header('x-service-signature');
    if (hex === undefined) throw new WebhookVerificationError('no_signature', 'No signature: neither webhook-signature nor X-Service-Signature is present');
    const given = hex.trim();
    let matched = false;
    for (const s of secrets) if (constantTimeEqual(given, toHex(await hmac('SHA-256', utf8(s), body)))) matched = true;
    if (!matched) throw new WebhookVerificationError('invalid_signature', 'X-Service-Signature does not match the body');
  }

  let parsed: unknown;
  try {
    parsed = JSON.parse(new TextDecoder('utf-8', { fatal: true }).decode(body));
  } catch {
    throw new WebhookVerificationError('invalid_payload', 'The body is not JSON');
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) throw new WebhookVerificationError('invalid_payload', 'The body is not a JSON object');
  return parsed as T;
}

async function verifyStandard(
  body: Uint8Array,
  header: (name: string) => string | undefined,
  signatures: string,
  secrets: string[],
  opts: VerifyWebhookOptions,
): Promise<void> {
  const id = header('webhook-id');
  const stamp = header('webhook-timestamp')?.trim();
  if (!id) throw new WebhookVerificationError('invalid_headers', 'webhook-id is missing');
  if (!stamp || !/^\d{1,15}$/.test(stamp)) throw new WebhookVerificationError('invalid_headers', 'webhook-timestamp is missing or not whole seconds');
  const timestamp = Number(stamp);
  const nowMs = opts.now === undefined ? Date.now() : typeof opts.now === 'number' ? opts.now : opts.now.getTime();
  const tolerance = opts.toleranceSeconds ?? DEFAULT_TOLERANCE_SECONDS;
  if (Math.abs(Math.floor(nowMs / 1000) - timestamp) > tolerance) {
    throw new WebhookVerificationError('timestamp_out_of_tolerance', `webhook-timestamp is more than ${tolerance} s from now`);
  }
  const signed = concat(utf8(`${id}.${stamp}.`), body);
  const expected: string[] = [];
  for (const key of secrets.flatMap(keysOf)) expected.push(toBase64(await hmac('SHA-256', key, signed)));
  // A space-separated list of `version,signature`; only v1 (HMAC-SHA256) is known. A header sent twice arrives joined
  // with ", ", hence the comma trimmed. The base64 text is compared as sent, as the Standard Webhooks libraries do.
  const given = signatures
    .split(' ')
    .map((entry) => entry.replace(/,$/, ''))
    .filter((entry) => entry.startsWith('v1,'))
    .map((entry) => entry.slice(3));
  let matched = false;
  for (const g of given) for (const e of expected) if (constantTimeEqual(g, e)) matched = true;
  if (!matched) throw new WebhookVerificationError('invalid_signature', 'webhook-signature does not match');
}

/** The HMAC keys a secret stands for: its UTF-8 bytes (the gateway's), and for `whsec_<base64>` the decoded bytes too. */
function keysOf(secret: string): Uint8Array[] {
  const keys = [utf8(secret)];
  if (secret.startsWith('whsec_')) {
    const decoded = fromBase64(secret.slice('whsec_'.length));
    if (decoded && decoded.length > 0) keys.push(decoded);
  }
  return keys;
}

function headerReader(headers: WebhookHeaders): (name: string) => string | undefined {
  if (headers && typeof (headers as Headers).get === 'function') return (name) => (headers as Headers).get(name) ?? undefined;
  const byLowerName = new Map<string, string>();
  for (const [key, value] of Object.entries(headers ?? {})) {
    if (value === undefined) continue;
    byLowerName.set(key.toLowerCase(), typeof value === 'string' ? value : (value as readonly string[]).join(', '));
  }
  return (name) => byLowerName.get(name);
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}
