import { AsyncLocalStorage } from 'node:async_hooks';
import { logger } from './logger.ts';

/**
 * One access-log line per request, for every route of both apps (docs/contract.md, "Access log"). `httpApp` opens a
 * record when a request arrives and writes it when the response body has been delivered or abandoned, so a stream's
 * line carries its final charge. Code below a route fills in what only it knows (model, caller, cost, upstream time)
 * through `accessRecord()`. Never a token, key or body.
 */
export interface AccessRecord {
  requestId: string;
  method: string;
  path: string;
  status?: number;
  /** The refusal's error type, when the answer is an error. */
  error?: string;
  model?: string;
  project?: string;
  user?: string;
  costMicrodollars?: number;
  upstreamMs?: number;
  totalMs?: number;
  /** The client went away before the whole response was delivered. */
  clientClosed?: boolean;
  /** Where a metered request's time went, in milliseconds (docs/benchmarks.md, "Phases"). */
  phases?: Partial<Record<Phase, number>>;
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

/** Lambda: one structured JSON line (Powertools); client mistakes are INFO, a 5xx answer WARN. */
const structuredSink: AccessLogSink = (record) => {
  if ((record.status ?? 500) >= 500) logger.warn('request', { ...record });
  else logger.info('request', { ...record });
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

/** The record of the request being handled; a detached stand-in outside a request, so callers never need to check. */
export function accessRecord(): AccessRecord {
  return current.getStore() ?? { requestId: '', method: '', path: '' };
}

/** The records already written: a request has one line, however many ways its response ends. */
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

/** `POST /v1/messages 200 claude-sonnet-4-6 dev-project/dev-user 66µ$ upstream 12 ms, total 25 ms req_gw_…` */
export function formatAccessLine(r: Readonly<AccessRecord>): string {
  const parts = [r.method, r.path, String(r.status ?? '-')];
  if (r.error) parts.push(r.error);
  if (r.model) parts.push(r.model);
  if (r.project) parts.push(`${r.project}/${r.user ?? '-'}`);
  if (r.costMicrodollars !== undefined) parts.push(`${r.costMicrodollars}µ$`);
  const times = [r.upstreamMs !== undefined ? `upstream ${r.upstreamMs} ms` : '', `total ${r.totalMs ?? '-'} ms`].filter(Boolean).join(', ');
  parts.push(times);
  if (r.clientClosed) parts.push('(client closed)');
  parts.push(r.requestId);
  return parts.join(' ');
}
