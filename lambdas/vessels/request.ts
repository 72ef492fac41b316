import { createHash } from 'node:crypto';
import { stringify } from 'safe-stable-stringify';
import * as z from 'zod';
import { RunOptions } from '../agent/options.ts';
import { MAX_SCHEDULE_AHEAD_SECONDS } from '../config/timing.ts';
import { checkUrl, OutboundRefused } from '../outbound/guard.ts';

/**
 * The bodies of POST /incubate and POST /incubate/batch (docs/incubate.md), one zod schema each, reused for
 * validation, types and the docs. `options` is /prompt's schema (agent/options.ts), so a vessel's options are
 * validated exactly as a /prompt run's.
 */

export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;
/** The most a vessel's request may take in its record (size.ts); more is a 413. */
export { MAX_VESSEL_REQUEST_BYTES } from './size.ts';
export const MAX_BATCH_ITEMS = 100;

const Message = z.string({ error: 'message is required and must be a string' }).min(1, 'message must not be empty');

/**
 * A key is stored and hashed as UTF-8, where a lone surrogate (half of a UTF-16 pair without the other) becomes
 * U+FFFD: two keys differing only there would be one key — a 409 for a new request, or another request's vessel
 * answered as a replay. So they are refused, as in ids (docs/contract.md, "Identifiers").
 */
const LONE_SURROGATE = /\p{Cs}/u;

export const IdempotencyKey = z
  .string({ error: 'idempotencyKey must be a string' })
  .min(1, 'idempotencyKey must not be empty')
  .max(MAX_IDEMPOTENCY_KEY_LENGTH, `idempotencyKey must be at most ${MAX_IDEMPOTENCY_KEY_LENGTH} characters`)
  .refine((key) => !LONE_SURROGATE.test(key), {
    message: 'idempotencyKey must be well-formed Unicode: it contains a lone surrogate (half of a UTF-16 surrogate pair)',
  })
  .describe('Unique per project for 30 days: the same key with the same body answers the same vessel, with another body 409.');

/**
 * Where the result is POSTed (docs/webhooks.md). A URL whose host is a literal private or metadata address is refused
 * here already; a host name is checked again at every delivery, when it resolves.
 */
export const Callback = z.strictObject({
  url: z.string({ error: 'callback.url must be a string' }).transform((url, ctx) => {
    try {
      return checkUrl(url).toString();
    } catch (err) {
      ctx.addIssue({ code: 'custom', message: `callback.url is refused: ${err instanceof OutboundRefused ? err.message : 'not a valid absolute URL'}` });
      return z.NEVER;
    }
  }),
  secret: z.string({ error: 'callback.secret must be a string' }).min(1, 'callback.secret must not be empty').optional(),
});
export type Callback = z.infer<typeof Callback>;

/** When to run: `executeAt` wins over `ttl` (docs/incubate.md, "Scheduling"). */
const Timing = {
  ttl: z
    .number({ error: 'ttl must be a number of seconds' })
    .min(0, 'ttl must not be negative')
    .max(MAX_SCHEDULE_AHEAD_SECONDS, `ttl must be at most ${MAX_SCHEDULE_AHEAD_SECONDS} seconds (365 days)`)
    .optional()
    .describe('Seconds from now until the vessel is due.'),
  executeAt: z.iso
    .datetime({ offset: true, error: 'executeAt must be an ISO 8601 date-time with a time zone, e.g. 2026-12-01T09:00:00Z' })
    .optional()
    .describe('When the vessel is due: wins over ttl; a past one means now; at most 365 days ahead.'),
};

const Options = RunOptions.extend({
  token: z.string({ error: 'options.token is required: the JWT goes in the body' }).describe('The user’s token (JWT): on these routes it goes here.'),
});

export const IncubateBody = z.strictObject({
  message: Message,
  idempotencyKey: IdempotencyKey,
  options: Options,
  callback: Callback.optional().describe('Where the result is POSTed when the vessel ends (docs/webhooks.md).'),
  ...Timing,
});
export type IncubateBody = z.infer<typeof IncubateBody>;

/** One item of a batch: its own message and key; the options, callback and timing are the batch's. */
export const BatchItem = z.strictObject({ message: Message, idempotencyKey: IdempotencyKey });
export type BatchItem = z.infer<typeof BatchItem>;
// How the OpenAPI document (lambdas/openapi) names it, and shows `items`, which are parsed one by one: as BatchItems.
z.globalRegistry.add(BatchItem, { id: 'BatchItem', unusedIO: 'input' });
const DocumentedItem = z.unknown().meta({ override: { $ref: '#/components/schemas/BatchItem' } });

export const BatchBody = z.strictObject({
  // Items are checked one by one (an invalid item fails alone), so here only the list itself.
  items: z
    .array(DocumentedItem, { error: 'items is required and must be an array' })
    .min(1, 'items must not be empty')
    .max(MAX_BATCH_ITEMS, `items: at most ${MAX_BATCH_ITEMS} items per batch`),
  options: Options,
  callback: Callback.optional().describe('Where each vessel’s result is POSTed when it ends (docs/webhooks.md).'),
  ...Timing,
});
export type BatchBody = z.infer<typeof BatchBody>;

/**
 * When a vessel is due: `executeAt` when given (a past one means now), else `ttl` seconds from now, else now.
 * Returns an error message for a time more than 365 days ahead.
 */
export function dueTime(timing: { ttl?: number | undefined; executeAt?: string | undefined }, now: Date): { at: Date } | { problem: string } {
  if (timing.executeAt !== undefined) {
    const at = new Date(timing.executeAt);
    if (at.getTime() - now.getTime() > MAX_SCHEDULE_AHEAD_SECONDS * 1000) {
      return {
        problem: `executeAt must be at most 365 days ahead (${timing.executeAt} is later than ${new Date(now.getTime() + MAX_SCHEDULE_AHEAD_SECONDS * 1000).toISOString()})`,
      };
    }
    return { at: at.getTime() < now.getTime() ? now : at };
  }
  return { at: new Date(now.getTime() + Math.round((timing.ttl ?? 0) * 1000)) };
}

/**
 * What makes two requests "the same body" for an idempotency key: everything the caller sent except the token (the
 * options come here without it: a retry with a refreshed token is the same request), and who sent it — a key another user of the project already
 * used is a conflict, never a way to read their vessel. SHA-256 of the canonical JSON (keys sorted).
 */
export function fingerprint(input: {
  userId: string;
  message: string;
  options: RunOptions;
  callback?: Callback | undefined;
  ttl?: number | undefined;
  executeAt?: string | undefined;
}): string {
  const canonical = stringify(input) ?? '';
  return createHash('sha256').update(canonical).digest('hex');
}
