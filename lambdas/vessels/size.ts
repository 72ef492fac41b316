import type { Refusal } from '../refusals/refusal.ts';
import { DYNAMODB_MAX_ITEM_BYTES, itemSize, utf8Bytes } from '../store/item-size.ts';
import { storedOutput, type StoredVessel, type VesselOutput } from './record.ts';

/**
 * A vessel lives in one DynamoDB item, which can never exceed 400 KB, and it grows after it is stored: its end adds
 * the output, its callback's delivery adds every attempt. So the item's 400 KB (409,600 bytes, counted as DynamoDB
 * counts: store/item-size.ts) are shared out once, and each part is held to its share before it is written
 * (docs/incubate.md, "Limits"):
 *
 *   the request (the item as queued: message, options, callback, caller, key, bookkeeping)   192 KiB   refused: 413
 *   the output (text, result figures, structured output)                                     128 KiB   truncated, flagged
 *   the callback's delivery record (every attempt: 8 a round × 20 rounds, ≤ 354 bytes each)   64 KiB
 *   what the run adds besides (start and end times, run id, attempts, write token, …)         16 KiB
 *
 * so a vessel accepted at enqueue can always be ended and its deliveries recorded: no write of its life is refused
 * for size. An attempt is at most 354 bytes — its error text is capped at 200 ASCII characters (webhooks/deliver.ts),
 * its five numbers at 21 bytes each, its names and map overhead 49 — so the default schedule's 160 attempts take at
 * most 56,640 bytes, the rest of the 64 KiB holding the delivery's state and attempts of rounds superseded mid-attempt.
 * (A WEBHOOK_RETRY_WAITS longer than the default's 7 waits narrows that margin.)
 */
export const MAX_VESSEL_REQUEST_BYTES = 196_608;
export const MAX_VESSEL_OUTPUT_BYTES = 131_072;
export const VESSEL_DELIVERY_RESERVE_BYTES = 65_536;
export const VESSEL_BOOKKEEPING_RESERVE_BYTES = 16_384;

if (MAX_VESSEL_REQUEST_BYTES + MAX_VESSEL_OUTPUT_BYTES + VESSEL_DELIVERY_RESERVE_BYTES + VESSEL_BOOKKEEPING_RESERVE_BYTES > DYNAMODB_MAX_ITEM_BYTES) {
  throw new Error("The vessel's size shares exceed DynamoDB's 400 KB item");
}

/** The vessel as queued, as DynamoDB counts it. */
export const requestSize = (vessel: StoredVessel): number => itemSize(vessel as unknown as Record<string, unknown>);

/** The refusal of a vessel whose request is over its share (`what` names it: "The vessel", "items.3: the vessel"). */
export function requestTooLarge(vessel: StoredVessel, what = 'The vessel'): Refusal | undefined {
  const size = requestSize(vessel);
  if (size <= MAX_VESSEL_REQUEST_BYTES) return undefined;
  return {
    kind: 'request_too_large',
    message:
      `${what} would be stored as ${size.toLocaleString('en-US')} bytes (its message, options and callback), above the ` +
      `${MAX_VESSEL_REQUEST_BYTES.toLocaleString('en-US')} bytes (192 KiB) a vessel's request may take: a vessel is kept in one ` +
      'DynamoDB item of at most 400 KB, and its result and delivery record need the rest. Send a shorter message or systemPrompt',
  };
}

/** The output as DynamoDB counts it, attribute name included. */
export const outputSize = (output: VesselOutput): number => itemSize({ output: storedOutput(output) });

/**
 * The output as it is kept: as it is when it fits in `max` bytes (MAX_VESSEL_OUTPUT_BYTES), else flagged
 * `truncated: true` with its text cut to what fits — at a character's end, never between the two halves of a
 * surrogate pair — and its structured output dropped only if that alone does not fit. Nothing else changes: the
 * status, the subtype and the figures (cost, usage) stay exact.
 */
export function keptOutput(output: VesselOutput, max = MAX_VESSEL_OUTPUT_BYTES): VesselOutput {
  if (outputSize(output) <= max) return output;
  let base: VesselOutput = { ...output, text: '', truncated: true };
  if (outputSize(base) > max && base.result.structured_output !== undefined) {
    const { structured_output: _dropped, ...result } = base.result;
    base = { ...base, result };
  }
  return { ...base, text: utf8Prefix(output.text, max - outputSize(base)) };
}

/** The longest prefix of `text` whose UTF-8 encoding takes at most `maxBytes` bytes, cut between characters. */
export function utf8Prefix(text: string, maxBytes: number): string {
  if (utf8Bytes(text) <= maxBytes) return text;
  let bytes = 0;
  let end = 0;
  for (const ch of text) {
    const cp = ch.codePointAt(0)!;
    // A lone surrogate is stored as U+FFFD: 3 bytes.
    const n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    if (bytes + n > maxBytes) break;
    bytes += n;
    end += ch.length;
  }
  return text.slice(0, end);
}
