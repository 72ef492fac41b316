import type { GatewayActivity, RunningGateway } from '../../bin/local/runtime.ts';
import { queueSpec, type QueueName } from '../../lambdas/store/queues.ts';

/**
 * "Nothing more happens", proved instead of slept for (issue 25). A test that used to wait a fixed `quietMs` and then
 * check that no further webhook attempt came, no second run started, a canceled vessel never ran, asks instead whether
 * the gateway is drained for `quietMs`: nothing of it is running and nothing is due within `quietMs` —
 *
 * - no invocation under way: no SQS batch being handled (received and not yet deleted or given back), no HTTP
 *   request, no WebSocket event, no run of a scheduled function (`gw.activity()`), and none started while the check
 *   looked (so none slipped in between its reads);
 * - on every queue this gateway consumes (fauxqs's own non-destructive inspection, `/_fauxqs/queues/{name}`): no
 *   message ready; no delayed message due within `quietMs`; no message in flight except one a handler has given back
 *   (a failed item, `released`) whose visibility timeout ends after `quietMs`. A queue nothing consumes here (the
 *   webhook queue of a gateway run without the webhook sender) moves nothing and is not looked at; neither are the
 *   dead-letter queues;
 * - no schedule of the scheduler stand-in due within `quietMs`, and no scheduled function's next run within it.
 *
 * Everything that moves the gateway comes from one of these (or from the test, which is waiting), so a gateway drained
 * for `quietMs` stays as it is for at least `quietMs`: what a test then reads is what it would have read after sleeping
 * that long — the check is exactly as strict as the sleep, and returns as soon as the work in hand is done. Something
 * due later (a vessel PENDING for ten minutes, a retry scheduled for tomorrow) is left alone, as the sleep left it.
 *
 * Only where one test runs at a time: concurrent tests keep the gateway busy with each other's work.
 */
export interface DrainedOptions {
  /** The fixed wait this check stands for: nothing may be due within it. */
  quietMs: number;
  /** How long the gateway may take to get there (default 30 s more than `quietMs`). */
  timeoutMs?: number;
  /** Between two looks (default 50 ms). */
  intervalMs?: number;
}

/** Resolves once the gateway is drained for `quietMs` (see above); fails with the last reason it was not. */
export async function drained(gw: RunningGateway, opts: DrainedOptions): Promise<void> {
  const timeoutMs = opts.timeoutMs ?? 30_000 + opts.quietMs;
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const reason = await notDrained(gw, opts.quietMs);
    if (reason === undefined) return;
    if (performance.now() > deadline) throw new Error(`the gateway did not drain (for ${opts.quietMs} ms) within ${timeoutMs} ms: ${reason}`);
    await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
  }
}

/** Why the gateway is not drained for `quietMs` now, or undefined when it is. */
export async function notDrained(gw: RunningGateway, quietMs: number): Promise<string | undefined> {
  const before = gw.activity();
  const busy = running(before);
  if (busy) return busy;

  let earliest = Number.POSITIVE_INFINITY;
  let earliestWhat = '';
  const due = (at: number, what: string) => {
    if (at < earliest) {
      earliest = at;
      earliestWhat = what;
    }
  };
  for (const s of gw.scheduler.pending()) due(Date.parse(s.at), `schedule ${s.name}`);
  for (const [name, poller] of Object.entries(before.queues) as [QueueName, GatewayActivity['queues'][QueueName]][]) {
    const { messages } = await inspectQueue(gw, name);
    if (messages.ready.length > 0) return `${messages.ready.length} message(s) ready on the ${name} queue`;
    for (const m of messages.delayed) due(m.delayUntil ?? 0, `a delayed message on the ${name} queue (${m.messageId})`);
    for (const f of messages.inflight) {
      // A message in flight that no handler has given back is being handled, or on its way to a handler.
      if (poller?.released.get(f.message.messageId) !== f.receiptHandle) return `a message in flight on the ${name} queue (${f.message.messageId})`;
      due(f.visibilityDeadline, `a failed message on the ${name} queue coming back (${f.message.messageId})`);
    }
  }

  const after = gw.activity();
  const moved = running(after) ?? startedMeanwhile(before, after);
  if (moved) return moved;
  for (const [id, fn] of Object.entries(after.schedules)) due(Date.now() + fn.nextRunInMs, `the next run of ${id}`);
  const inMs = earliest - Date.now();
  if (inMs <= quietMs) return `${earliestWhat} is due in ${Math.round(inMs)} ms, within ${quietMs} ms`;
  return undefined;
}

/** What is running, or undefined when nothing is. */
function running(a: GatewayActivity): string | undefined {
  for (const [name, q] of Object.entries(a.queues)) if (q.running > 0) return `${q.running} batch(es) of the ${name} queue being handled`;
  if (a.http.running > 0) return `${a.http.running} HTTP invocation(s) under way`;
  if (a.websocket.running > 0) return `${a.websocket.running} WebSocket event(s) being handled`;
  for (const [id, fn] of Object.entries(a.schedules)) if (fn.running) return `${id} running`;
  return undefined;
}

/** Which invocation started between two looks, or undefined when none did. */
function startedMeanwhile(before: GatewayActivity, after: GatewayActivity): string | undefined {
  for (const [name, q] of Object.entries(after.queues)) {
    if (q.received !== before.queues[name as QueueName]?.received) return `a batch of the ${name} queue was received meanwhile`;
  }
  if (after.http.started !== before.http.started) return 'an HTTP invocation started meanwhile';
  if (after.websocket.started !== before.websocket.started) return 'a WebSocket event came meanwhile';
  for (const [id, fn] of Object.entries(after.schedules)) if (fn.started !== before.schedules[id]?.started) return `${id} ran meanwhile`;
  return undefined;
}

interface FauxqsMessage {
  messageId: string;
  /** When a delayed message becomes visible (epoch ms, fauxqs's clock: `Date.now()`). */
  delayUntil?: number;
}
interface FauxqsQueue {
  messages: {
    ready: FauxqsMessage[];
    delayed: FauxqsMessage[];
    inflight: { message: FauxqsMessage; receiptHandle: string; visibilityDeadline: number }[];
  };
}

/** Every message of one of the gateway's queues, by state, as fauxqs holds them (read only: nothing is received). */
async function inspectQueue(gw: RunningGateway, name: QueueName): Promise<FauxqsQueue> {
  const queueName = gw.queues.urls[queueSpec(name).envVar].split('/').pop()!;
  const res = await fetch(`${gw.queues.endpoint}/_fauxqs/queues/${encodeURIComponent(queueName)}`);
  if (!res.ok) throw new Error(`fauxqs inspection of ${queueName}: ${res.status} ${await res.text()}`);
  return (await res.json()) as FauxqsQueue;
}

/**
 * Resolves once `count` more invocations of `kind` have started than `since` (a `gw.activity()` read before the
 * requests or frames were sent) counted: the gateway has at least begun to handle them.
 */
export async function startedSince(gw: RunningGateway, since: GatewayActivity, kind: 'http' | 'websocket', count = 1, timeoutMs = 10_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (gw.activity()[kind].started < since[kind].started + count) {
    if (performance.now() > deadline) {
      throw new Error(`${count} ${kind} invocation(s) expected within ${timeoutMs} ms; ${gw.activity()[kind].started - since[kind].started} started`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
}
