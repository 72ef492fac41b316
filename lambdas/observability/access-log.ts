import { AsyncLocalStorage } from 'node:async_hooks';
import { logger } from './logger.ts';

/**
 * One access-log line per unit of work (docs/contract.md, "Access log"):
 * - every HTTP request of both apps, and every /ws upgrade (`unit: 'request'`). `httpApp` opens a record when a
 *   request arrives and writes it when the response body has been delivered or abandoned, so a stream's line carries
 *   its final charge;
 * - every /ws turn (`ws_turn`), written when the turn ends, across the segments it paused between (sessions/turn.ts);
 * - every vessel run (`vessel_run`), written when the executor has ended the vessel (vessels/executor.ts).
 * Code below fills in what only it knows through `accessRecord()`, the record of the unit being worked on: the caller
 * (auth), the model, each metered model call's charge (`addCost`: a unit's cost is the sum of its calls, so a line
 * carries the whole run's, never the last call's) and an agent run's compute (`addCompute`). Never a token, key or body.
 */
export type AccessRecord = RequestAccess | WsTurnAccess | VesselRunAccess;

/** What every line may carry, whatever its unit. */
interface AccessCommon {
  /** The HTTP status answered (a request's; a refused /ws turn's, as its error frame states it). */
  status?: number;
  /** The refusal's or failure's error type, when the answer is an error. */
  error?: string;
  model?: string;
  project?: string;
  user?: string;
  /** Every metered model call of the unit, as charged: the sum of their charges, in microdollars. */
  costMicrodollars?: number;
  /** An agent run's compute, as charged to the user's compute meter (whole seconds; summed over a turn's segments). */
  computeSeconds?: number;
  /** The (last) model call's time to the upstream's response headers. */
  upstreamMs?: number;
  totalMs?: number;
  /** The client went away before the whole answer was delivered. */
  clientClosed?: boolean;
  /** Where a metered request's time went, in milliseconds (docs/benchmarks.md, "Phases"). */
  phases?: Partial<Record<Phase, number>>;
}

/** An HTTP request: every route of both apps, and a /ws upgrade (accepted: 101; refused: its status and error). */
export interface RequestAccess extends AccessCommon {
  unit: 'request';
  requestId: string;
  method: string;
  path: string;
}

/**
 * A /ws turn, from the user's message to its end. `outcome`: the `result` frame's subtype (`success`, `error_…`,
 * `interrupted`); `refused` (not run: the admission or the user's budget refused it — `status` and `error` are the
 * error frame's); `failed` (the gateway failed during it: `error: internal_error`); `lost` (the sweeper freed it
 * from under a stalled worker).
 */
export interface WsTurnAccess extends AccessCommon {
  unit: 'ws_turn';
  sessionId: string;
  turnId: string;
  outcome?: string;
}

/**
 * A vessel run, from its admission to its end. `outcome`: the end the executor wrote (`COMPLETED`, `FAILED`,
 * `CANCELED`), or `lost` (it did not write one: the reconciler took the vessel over, the run lost its lease, or its
 * end could not be stored; the reconciler ends it FAILED); `subtype`: the vessel's result subtype.
 */
export interface VesselRunAccess extends AccessCommon {
  unit: 'vessel_run';
  vesselId: string;
  /** The execution (its lease); absent for a vessel refused when due, which ended without running. */
  runId?: string;
  outcome?: string;
  subtype?: string;
}

/** Adds a metered model call's charge to the unit's cost. */
export function addCost(record: AccessRecord, microdollars: number): void {
  record.costMicrodollars = (record.costMicrodollars ?? 0) + microdollars;
}

/** Adds compute seconds charged by an agent run (or a segment of one) to the unit's. */
export function addCompute(record: AccessRecord, seconds: number): void {
  record.computeSeconds = (record.computeSeconds ?? 0) + seconds;
}

/**
 * The phases of a metered request, in order: reading and validating the body, verifying the token, resolving the
 * project and credential, pricing, the reservation (estimate and ledger write), the upstream's response headers
 * (`connect`), its first body chunk after them (`firstByte`; for a JSON answer, the whole body), and the
 * settlement write, which happens after the answer has been delivered.
 */
export type Phase = 'parse' | 'token' | 'project' | 'pricing' | 'reservation' | 'connect' | 'firstByte' | 'settle';

/** Records phase `name` of `record` as the time since `since` (a `performance.now()` reading), to 0.01 ms. */
export function timePhase(record: AccessRecord, name: Phase, since: number): void {
  record.phases ??= {};
  record.phases[name] = Math.round((performance.now() - since) * 100) / 100;
}

export type AccessLogSink = (record: Readonly<AccessRecord>) => void;

/** Whether the line tells of the gateway's own failure (a 5xx, a unit the gateway failed or lost) rather than a client's. */
function gatewayFailed(record: Readonly<AccessRecord>): boolean {
  if (record.unit === 'request') return (record.status ?? 500) >= 500;
  return record.error === 'internal_error' || record.outcome === 'lost' || (record.status ?? 0) >= 500;
}

/**
 * Lambda: one structured JSON line (Powertools) whose message is the unit (`request`, `ws_turn`, `vessel_run`);
 * client mistakes are INFO, the gateway's own failures WARN.
 */
const structuredSink: AccessLogSink = (record) => {
  if (gatewayFailed(record)) logger.warn(record.unit, { ...record });
  else logger.info(record.unit, { ...record });
};

let sink: AccessLogSink = structuredSink;

/** The local runtime prints a short readable line instead (bin/local.ts). */
export function setAccessLogSink(next: AccessLogSink | undefined): void {
  sink = next ?? structuredSink;
}

const current = new AsyncLocalStorage<AccessRecord>();

export function withAccessRecord<T>(record: AccessRecord, fn: () => Promise<T>): Promise<T> {
  return current.run(record, fn);
}

/** The record of the unit being worked on; a detached stand-in outside one, so callers never need to check. */
export function accessRecord(): AccessRecord {
  return current.getStore() ?? { unit: 'request', requestId: '', method: '', path: '' };
}

/** The records already written: a unit has one line, however many ways it ends. */
const written = new WeakSet<AccessRecord>();

/** Writes `record`'s line; a record already written is not written again (and the sink never sees it twice). */
export function writeAccessLog(record: AccessRecord): void {
  if (written.has(record)) return;
  written.add(record);
  try {
    sink(record);
  } catch {
    // A broken log sink must never break a response.
  }
}

/**
 * The local runtime's readable line:
 * `POST /v1/messages 200 claude-sonnet-4-6 dev-project/dev-user 66µ$ upstream 12 ms, total 25 ms req_gw_…`
 * `ws_turn success claude-sonnet-4-6 dev-project/dev-user 798µ$ + 2 s compute upstream 4 ms, total 1840 ms <session>/<turn>`
 * `vessel_run COMPLETED success claude-sonnet-4-6 dev-project/dev-user 798µ$ + 2 s compute upstream 4 ms, total 1840 ms <vessel>`
 */
export function formatAccessLine(r: Readonly<AccessRecord>): string {
  const parts =
    r.unit === 'request'
      ? [r.method, r.path, String(r.status ?? '-')]
      : r.unit === 'ws_turn'
        ? [r.unit, r.outcome ?? '-', ...(r.status !== undefined ? [String(r.status)] : [])]
        : [r.unit, r.outcome ?? '-', ...(r.subtype ? [r.subtype] : [])];
  if (r.error) parts.push(r.error);
  if (r.model) parts.push(r.model);
  if (r.project) parts.push(`${r.project}/${r.user ?? '-'}`);
  if (r.costMicrodollars !== undefined) parts.push(`${r.costMicrodollars}µ$`);
  if (r.computeSeconds !== undefined) parts.push(`+ ${r.computeSeconds} s compute`);
  const times = [r.upstreamMs !== undefined ? `upstream ${r.upstreamMs} ms` : '', `total ${r.totalMs ?? '-'} ms`].filter(Boolean).join(', ');
  parts.push(times);
  if (r.clientClosed) parts.push('(client closed)');
  parts.push(r.unit === 'request' ? r.requestId : r.unit === 'ws_turn' ? `${r.sessionId}/${r.turnId}` : r.vesselId);
  return parts.join(' ');
}
