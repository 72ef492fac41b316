import type { RunOptions } from '../agent/options.ts';
import type { RunResult } from '../agent/result.ts';
import type { Caller } from '../auth/claims.ts';
import { webhookView, type StoredWebhook } from '../deliveries/record.ts';
import { flagsOf, type VesselStatus } from './states.ts';

/**
 * A vessel as stored (one item of the vessels table, `pk = vessel#<vesselId>`) and as shown (the interface's vessel
 * status record). Instants are epoch milliseconds in the store and ISO 8601 strings on the wire.
 */

/** The interface's fixed name of the task every vessel runs (docs/incubate.md). */
export const TASK_IDENTIFIER = 'agent-run';

/** Why a vessel ended without a successful run, beyond the agent runtime's own subtypes (agent/run.ts). */
export type VesselEndSubtype =
  | RunResult['subtype']
  /** The user's budget was spent when the vessel was due. */
  | 'error_user_budget_exhausted'
  /** The developer's monthly compute was spent when the vessel was due. */
  | 'error_developer_budget_exhausted'
  /** The user was blocked, or the vessel's token revoked, before the vessel was due (auth/revocations.ts). */
  | 'error_token_revoked'
  | 'canceled';

/** The interface's `output`, present once the vessel has ended; `result` carries the run's figures. */
export interface VesselOutput {
  success: boolean;
  text: string;
  /**
   * Present when the output was too large to keep whole (size.ts `keptOutput`, docs/incubate.md, "Limits"): `text`
   * is its first 128 KiB or so, cut between characters; a structured output that did not fit beside it is dropped.
   */
  truncated?: true;
  result: {
    type: 'result';
    subtype: VesselEndSubtype;
    total_cost_usd: number;
    total_cost_microdollars: number;
    usage: { input_tokens: number; output_tokens: number };
    num_turns: number;
    duration_secs: number;
    model?: string;
    structured_output?: unknown;
    /** How the record keeps `structured_output` (`storedOutput`); never shown. */
    structured_output_json?: string;
  };
}

export interface StoredCallback {
  url: string;
  /** `callback.secret`, encrypted with the provider-keys cipher for the vessel's project; never shown. */
  secretCiphertext?: string;
}

export interface StoredVessel {
  pk: string;
  vesselId: string;
  projectId: string;
  userId: string;
  /** The project's developer when the vessel was queued: whose capacity it waits for. */
  developerId: string;
  /** The token's caller as verified at enqueue: the run uses this budget even after the token expired. */
  caller: Caller;
  message: string;
  /**
   * The run's options, without the token, with the model resolved, as JSON text (`storedOptions` / `runOptionsOf`):
   * DynamoDB refuses a map nested deeper than 32 levels, and an `outputFormat.schema` or a tool's `input_schema` may
   * nest that deep on its own (docs/contract.md, "What a run may carry") — as text, any options the route accepted
   * can be kept. A record written before options were text holds the map, which is read as it is.
   */
  options: string | (RunOptions & { model: string });
  idempotencyKey: string;
  status: VesselStatus;
  createdAt: number;
  updatedAt: number;
  scheduledFor: number;
  startedAt?: number;
  completedAt?: number;
  /** Executions started: 0, then 1 (a vessel runs at most once: reconciler.ts). */
  attempts: number;
  /** The current trigger: a run message naming another is stale and dropped. */
  driveId: string;
  /** The execution in progress (its lease id), while EXECUTING. */
  runId?: string;
  cancelRequested?: boolean;
  /** Present while parked for capacity (the `parked` index): the developer whose slot it waits for. */
  parkedFor?: string;
  /** When it first started waiting for capacity (epoch ms): its place in the line, kept across wakes. */
  parkedAt?: number;
  output?: VesselOutput;
  callback?: StoredCallback;
  /** When the callback was put on the webhook queue (epoch ms); until then the reconciler watches for the hand-off. */
  callbackHandedOffAt?: number;
  /** The callback's delivery, from the vessel's end on (docs/webhooks.md). */
  webhook?: StoredWebhook;
  /** The one-time schedule that will deliver the trigger, when due later than SQS can delay. */
  scheduleName?: string;
  /** Present while the reconciler must watch the vessel (the table's `reconcile` index). */
  reconcileShard?: string;
  /** When the reconciler should look next (epoch ms). */
  reconcileAt?: number;
  /** DynamoDB TTL (epoch seconds). */
  expiresAt: number;
}

export const vesselKey = (vesselId: string) => ({ pk: `vessel#${vesselId}` });

const iso = (ms: number) => new Date(ms).toISOString();

/** The vessel status record of GET /incubate/vessel/{id} (docs/incubate.md, "The record"). */
export function vesselView(v: StoredVessel) {
  return {
    vesselId: v.vesselId,
    status: v.status,
    taskIdentifier: TASK_IDENTIFIER,
    ...flagsOf(v.status),
    idempotencyKey: v.idempotencyKey,
    createdAt: iso(v.createdAt),
    updatedAt: iso(v.updatedAt),
    scheduledFor: iso(v.scheduledFor),
    attempts: v.attempts,
    ...(v.startedAt === undefined ? {} : { startedAt: iso(v.startedAt) }),
    ...(v.completedAt === undefined ? {} : { completedAt: iso(v.completedAt) }),
    ...(v.cancelRequested && v.status === 'EXECUTING' ? { cancelRequested: true } : {}),
    ...(v.callback ? { callback: { url: v.callback.url, signed: v.callback.secretCiphertext !== undefined } } : {}),
    ...(v.output && flagsOf(v.status).isCompleted ? { output: ordered(v.output) } : {}),
    ...(v.callback && v.webhook ? { webhook: webhookView(v.webhook) } : {}),
  };
}
export type VesselView = ReturnType<typeof vesselView>;

/**
 * The output as the record keeps it: the structured output as JSON text. A value the schema accepted may nest past
 * DynamoDB's 32 levels or hold a number beyond its range (1e200), which a map could not store — and the end write
 * must never be refused for what the answer holds (docs/incubate.md, "Limits").
 */
export function storedOutput(output: VesselOutput): VesselOutput {
  const { structured_output, ...result } = output.result;
  return structured_output === undefined ? output : { ...output, result: { ...result, structured_output_json: JSON.stringify(structured_output) } };
}

/** The output in the interface's order (the store keeps maps unordered): success, text, then result's figures. */
function ordered(o: VesselOutput): VesselOutput {
  const { type, subtype, total_cost_usd, total_cost_microdollars, usage, num_turns, duration_secs, model, structured_output_json } = o.result;
  // A record written before structured outputs were kept as text holds the value itself.
  const structured_output = structured_output_json === undefined ? o.result.structured_output : JSON.parse(structured_output_json);
  return {
    success: o.success,
    text: o.text,
    ...(o.truncated ? { truncated: true as const } : {}),
    result: {
      type,
      subtype,
      total_cost_usd,
      total_cost_microdollars,
      usage: { input_tokens: usage.input_tokens, output_tokens: usage.output_tokens },
      num_turns,
      duration_secs,
      ...(model === undefined ? {} : { model }),
      ...(structured_output === undefined ? {} : { structured_output }),
    },
  };
}

/** The interface's queue response: what POST /incubate answers, and replays. */
export function queueResponse(v: Pick<StoredVessel, 'vesselId' | 'idempotencyKey' | 'scheduledFor'>) {
  return { vesselId: v.vesselId, idempotencyKey: v.idempotencyKey, status: 'queued' as const, scheduledFor: iso(v.scheduledFor) };
}
export type QueueResponse = ReturnType<typeof queueResponse>;

/** The output of a run that ended (agent/run.ts's result); a failed run's text is its error. */
export function runOutput(result: RunResult, canceled: boolean): VesselOutput {
  const subtype: VesselEndSubtype = canceled ? 'canceled' : result.subtype;
  return {
    success: subtype === 'success',
    text: subtype === 'success' ? result.text : (result.error ?? result.text),
    result: {
      type: 'result',
      subtype,
      total_cost_usd: result.total_cost_usd,
      total_cost_microdollars: result.total_cost_microdollars,
      usage: result.usage,
      num_turns: result.num_turns,
      duration_secs: result.duration_secs,
      model: result.model,
      ...(result.structured_output === undefined ? {} : { structured_output: result.structured_output }),
    },
  };
}

/** The output of a vessel that ended without running (canceled while waiting, refused when due, executor lost). */
export function endedWithoutRun(subtype: Exclude<VesselEndSubtype, 'success'>, text: string): VesselOutput {
  return {
    success: false,
    text,
    result: {
      type: 'result',
      subtype,
      total_cost_usd: 0,
      total_cost_microdollars: 0,
      usage: { input_tokens: 0, output_tokens: 0 },
      num_turns: 0,
      duration_secs: 0,
    },
  };
}

/** A vessel's options as its record keeps them (see `StoredVessel.options`). */
export function storedOptions(options: RunOptions & { model: string }): string {
  return JSON.stringify(options);
}

/** The options a vessel runs with, from its record. */
export function runOptionsOf(vessel: Pick<StoredVessel, 'options'>): RunOptions & { model: string } {
  return typeof vessel.options === 'string' ? (JSON.parse(vessel.options) as RunOptions & { model: string }) : vessel.options;
}
