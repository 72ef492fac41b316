import pLimit from 'p-limit';
import type { z } from 'zod';
import { clock } from '../config/clock.ts';
import { checkedRunOptions } from '../agent/checked-options.ts';
import { authenticate } from '../auth/authenticate.ts';
import type { Caller } from '../auth/claims.ts';
import { parseJsonBody, readBodyText, requireJsonContentType } from '../http/body.ts';
import { bearerToken } from '../http/router.ts';
import { developerPlan } from '../plans/admission.ts';
import { describeIssue, messageOf } from '../refusals/describe.ts';
import { Refused } from '../refusals/refusal.ts';
import { cancelVessel, ownedVessel } from '../vessels/cancel.ts';
import { enqueueVessel, storedCallback, type EnqueueOutcome, type VesselRequest } from '../vessels/enqueue.ts';
import { vesselView } from '../vessels/record.ts';
import { BatchBody, BatchItem, dueTime, IncubateBody, MAX_BATCH_ITEMS } from '../vessels/request.ts';

/**
 * The incubate endpoints (docs/incubate.md): HTTP ⇄ the vessels domain. POST /incubate and /incubate/batch take the
 * token in `options.token`; the vessel's status and cancel take it as `Authorization: Bearer`.
 */

/** POST /incubate → 202 queue response; a replay of the same key and body → 200 with `Idempotent-Replayed: true`. */
export async function handleIncubate(req: Request): Promise<Response> {
  requireJsonContentType(req);
  const json = parseJsonBody(await readBodyText(req));
  const caller = await bodyCaller(json, req);
  if (isObject(json) && json.idempotencyKey === undefined) {
    throw new Refused({
      kind: 'missing_idempotency_key',
      message: 'idempotencyKey is required: a key unique per project, so that a retried request never queues a second vessel',
    });
  }
  const parsed = IncubateBody.safeParse(json);
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  const { message, idempotencyKey, options, callback, ttl, executeAt } = parsed.data;
  const request = await vesselRequest(caller, { options, callback, ttl, executeAt });
  const outcome = await enqueueVessel(request, { message, idempotencyKey });
  if (!outcome.ok) throw new Refused(outcome.refusal);
  return Response.json(outcome.response, {
    status: outcome.replayed ? 200 : 202,
    headers: outcome.replayed ? { 'idempotent-replayed': 'true' } : {},
  });
}

export type BatchEntry =
  | { index: number; idempotencyKey: string | null; status: 'queued'; vesselId: string; scheduledFor: string; replayed?: true }
  | { index: number; idempotencyKey: string | null; status: 'failed'; error: { code: string; message: string } };

/** Items of a batch queued at once: enough to be quick, few enough not to crowd the store. */
const BATCH_CONCURRENCY = 10;

/**
 * POST /incubate/batch → 202 `{total, queued, failed, items}`: each item an independent vessel with its own key,
 * sharing options, callback and timing; one failed item never fails the others.
 */
export async function handleBatch(req: Request): Promise<Response> {
  requireJsonContentType(req);
  const json = parseJsonBody(await readBodyText(req));
  const caller = await bodyCaller(json, req);
  if (isObject(json) && Array.isArray(json.items) && json.items.length > MAX_BATCH_ITEMS) {
    throw new Refused({ kind: 'invalid_request', message: `items: at most ${MAX_BATCH_ITEMS} items per batch, got ${json.items.length}` });
  }
  const parsed = BatchBody.safeParse(json);
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  const { items, options, callback, ttl, executeAt } = parsed.data;
  const request = await vesselRequest(caller, { options, callback, ttl, executeAt });

  const seen = new Set<string>();
  const entries: BatchEntry[] = new Array(items.length);
  const work: Array<() => Promise<void>> = [];
  for (const [index, raw] of items.entries()) {
    const key = isObject(raw) && typeof raw.idempotencyKey === 'string' ? raw.idempotencyKey : null;
    const fail = (code: string, message: string) => {
      entries[index] = { index, idempotencyKey: key, status: 'failed', error: { code, message } };
    };
    if (isObject(raw) && raw.idempotencyKey === undefined) {
      fail('missing_idempotency_key', `items.${index}.idempotencyKey is required`);
      continue;
    }
    const item = BatchItem.safeParse(raw);
    if (!item.success) {
      fail('invalid_request', itemProblem(index, item.error));
      continue;
    }
    if (seen.has(item.data.idempotencyKey)) {
      fail('duplicate_idempotency_key', `items.${index}: idempotencyKey "${item.data.idempotencyKey}" appears earlier in this batch`);
      continue;
    }
    seen.add(item.data.idempotencyKey);
    work.push(async () => {
      let outcome: EnqueueOutcome;
      try {
        outcome = await enqueueVessel(request, { ...item.data, what: `items.${index}: the vessel` });
      } catch {
        outcome = {
          ok: false,
          refusal: { kind: 'trigger_failed', message: 'The gateway could not store this vessel; retry it with the same idempotencyKey' },
        };
      }
      entries[index] = !outcome.ok
        ? { index, idempotencyKey: key, status: 'failed', error: { code: outcome.refusal.kind, message: messageOf(outcome.refusal) } }
        : {
            index,
            idempotencyKey: key,
            status: 'queued',
            vesselId: outcome.response.vesselId,
            scheduledFor: outcome.response.scheduledFor,
            ...(outcome.replayed ? { replayed: true as const } : {}),
          };
    });
  }
  await pLimit(BATCH_CONCURRENCY).map(work, (w) => w());

  const failed = entries.filter((e) => e.status === 'failed');
  // Nothing could be queued because the queue is down: the batch as a whole is the interface's 503.
  if (failed.length === entries.length && failed.every((e) => e.status === 'failed' && e.error.code === 'trigger_failed')) {
    throw new Refused({
      kind: 'trigger_failed',
      message: 'The run queue is unavailable, so no vessel of the batch was queued (nothing was kept; retry the batch)',
    });
  }
  // Every item too large (the shared options, or every message): the batch as a whole is a 413, naming the first.
  const first = failed[0];
  if (failed.length === entries.length && first?.status === 'failed' && failed.every((e) => e.status === 'failed' && e.error.code === 'request_too_large')) {
    throw new Refused({ kind: 'request_too_large', message: `No item of the batch could be kept. ${first.error.message}` });
  }
  return Response.json({ total: entries.length, queued: entries.length - failed.length, failed: failed.length, items: entries }, { status: 202 });
}

/** GET /incubate/vessel/{vesselId} → the vessel status record, for a token of its project and user; else 404. */
export async function handleStatus(req: Request, params: Record<string, string>): Promise<Response> {
  const owned = await ownedVessel(await bearerCallerOrNone(req), params.vesselId ?? '');
  if (!owned.ok) throw new Refused(owned.refusal);
  return Response.json(vesselView(owned.vessel));
}

/** POST /incubate/vessel/{vesselId}/cancel → 200 with the record; an ended vessel → 409 with its status. */
export async function handleCancel(req: Request, params: Record<string, string>): Promise<Response> {
  const owned = await ownedVessel(await bearerCallerOrNone(req), params.vesselId ?? '');
  if (!owned.ok) throw new Refused(owned.refusal);
  const canceled = await cancelVessel(owned.vessel);
  if (!canceled.ok) throw new Refused(canceled.refusal);
  return Response.json(vesselView(canceled.vessel));
}

/** What every vessel of a request shares: checked options, due time, the developer's plan, the stored callback. */
async function vesselRequest(
  caller: Caller,
  body: { options: IncubateBody['options']; callback?: IncubateBody['callback']; ttl?: number | undefined; executeAt?: string | undefined },
): Promise<VesselRequest> {
  const { token: _token, ...given } = body.options;
  const options = await checkedRunOptions(given);
  const now = new Date(clock.now());
  const due = dueTime(body, now);
  if ('problem' in due) throw new Refused({ kind: 'invalid_request', message: due.problem });
  // A vessel the developer's plan could not run is refused now, with the admission step's own 402.
  const plan = await developerPlan(caller, now);
  if (!plan.ok) throw new Refused(plan.refusal);
  return {
    caller,
    developerId: plan.developer.developerId,
    options,
    callback: body.callback,
    stored: await storedCallback(caller, body.callback),
    ttl: body.ttl,
    executeAt: body.executeAt,
    due: due.at,
  };
}

/**
 * The token of a queue request (`options.token`), checked first: a request without a valid one learns nothing about
 * what else is wrong with it.
 */
async function bodyCaller(json: unknown, req: Request): Promise<Caller> {
  const token = isObject(json) && isObject(json.options) ? json.options.token : undefined;
  return authenticate(typeof token === 'string' ? token : undefined, { origin: req.headers.get('origin'), missingHint: ': send it in options.token' });
}

/** The caller of a bearer token, or none when it is missing or not valid (the vessel is then "not found"). */
async function bearerCallerOrNone(req: Request): Promise<Caller | undefined> {
  try {
    return await authenticate(bearerToken(req), { origin: req.headers.get('origin') });
  } catch (err) {
    if (err instanceof Refused && err.refusal.kind === 'token') return undefined;
    throw err;
  }
}

/** An item's first problem under its path in the batch: "items.4.message: …", "items.5: Unrecognized key: …". */
function itemProblem(index: number, error: z.ZodError): string {
  const issue = error.issues[0];
  return `${['items', index, ...(issue?.path ?? [])].map(String).join('.')}: ${issue?.message ?? 'Invalid item'}`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
