import { env, MAX_INVOCATION_SECONDS } from './env.ts';

/**
 * The gateway's timings, every one of lambdas/ in this file: how long a claim lives and how often it is renewed, how
 * often a running job looks at its record, time-outs, back-offs, how long records are kept. One commented figure
 * each, saying why that value; the docs that state a value are cited. What an operator may tune is in env.ts instead
 * (UPSTREAM_TIMEOUT_MS, RESERVATION_TTL_SECONDS, SESSION_IDLE_SECONDS, …). The lease length is read from the
 * environment (LEASE_TTL_SECONDS, so tests and local runs can shorten it), and the environment is read per instance
 * (env() is an instanceValue), so it and what derives from it are functions, not constants. Limits that are not
 * timings (sizes, counts) stay beside the code they bound.
 */

const HOUR_SECONDS = 3_600;
const DAY_SECONDS = 24 * HOUR_SECONDS;

// ——— Concurrency leases and the claims that follow the lease's length ———

/**
 * A concurrency lease lapses this long after its last renewal (docs/contract.md, "Concurrency leases": 60 s by
 * default, LEASE_TTL_SECONDS): long enough that a slow store does not lose a live run its lease, short enough that a
 * crashed holder frees its slot within a minute.
 */
export const leaseTtlMs = (): number => env().LEASE_TTL_SECONDS * 1_000;
/**
 * How often a holder renews its lease: a third of its life (20 s of 60), so three renewals fit in one expiry and one
 * lost renewal does not lose it. An executing vessel's heartbeat rides on the same interval, pushing its `reconcileAt`
 * a lease's length ahead (docs/incubate.md, "The table is the source of truth").
 */
export const leaseRenewIntervalMs = (): number => Math.floor(leaseTtlMs() / 3);
/**
 * How long a parked vessel waits before the reconciler checks whether its developer has room after all: a lease's
 * length (a minute by default), because a run that died never gives its slot back before its lease lapses
 * (docs/incubate.md, "Execution" and "The table is the source of truth").
 */
export const parkCheckMs = (): number => leaseTtlMs();

// ——— Running jobs: polls and heartbeats ———

/**
 * How often an executing vessel looks for a cancel request: the longest a cancel waits to be seen (docs/incubate.md,
 * "Cancel").
 */
export const CANCEL_POLL_MS = 1_000;
/**
 * How long a cancel of an executing vessel waits for the run to stop before answering with the record as it is
 * (docs/incubate.md, "Cancel": 5 s).
 */
export const CANCEL_WAIT_MS = 5_000;
/**
 * How often a running /ws turn looks for an interrupt: the longest an interrupt waits to be seen (docs/ws.md, "How a
 * turn runs": 250 ms).
 */
export const STOP_POLL_MS = 250;
/**
 * A running /ws turn's worker renews its claim this often (docs/ws.md, "How a turn runs": every 20 s), a third of
 * TURN_STALE_MS…
 */
export const TURN_HEARTBEAT_MS = 20_000;
/** …and the sweeper frees a turn whose claim is older than this: its worker stopped (docs/ws.md: 60 s). */
export const TURN_STALE_MS = 60_000;
/**
 * A queued /ws turn no worker has claimed for this long is freed too: its queue message was lost. Twice a running
 * turn's stale time, so a turn queued behind a busy worker pool is not taken for lost.
 */
export const TURN_QUEUED_STALE_MS = 120_000;

// ——— Runs ———

/** A run ends this long before Lambda's limit, so its charges are written before the invocation is cut. */
export const RUN_SECONDS_MARGIN = 30;
/** The longest run: Lambda's 15 minutes less the margin, 870 s (docs/incubate.md, docs/prompt.md, docs/ws.md). */
export const MAX_RUN_SECONDS = MAX_INVOCATION_SECONDS - RUN_SECONDS_MARGIN;
/**
 * How long a stream whose reader left may still be read to learn the input count the provider reports
 * (docs/contract.md, "Budgets and money": a stream is read on for at most 5 s): a `message_start` comes within the
 * first bytes.
 */
export const INPUT_REPORT_WAIT_MS = 5_000;

// ——— Budget holds ———

/** How long a model call waits for holds of the user's requests in flight to settle (env BUDGET_HOLD_WAIT_MS). */
export const budgetHoldWaitMs = (): number => env().BUDGET_HOLD_WAIT_MS;
/**
 * The first and the longest pause between two looks at a held budget (docs/contract.md, "Holds wait"): a settlement
 * lands within milliseconds of an answer, so the first look is soon; the pause doubles (with jitter, so a burst of
 * waiters does not look in step) up to half a second, which keeps a crowd of waiters to a few writes per second each.
 */
export const HOLD_POLL_FIRST_MS = 25;
export const HOLD_POLL_MAX_MS = 500;

// ——— Vessels: scheduling, back-offs ———

/**
 * A far delivery's schedule fires this long before the message is due; the last stretch is a queue delay, precise to
 * the second, where EventBridge's `at()` is precise to about a minute (docs/incubate.md, "Scheduling": 60 s).
 */
export const SCHEDULE_LEAD_SECONDS = 60;
/**
 * An early run message closer than this to its time is waited out by the executor instead of being put back: a queue
 * delay is whole seconds, rounded down, so a message may come up to a second early (docs/incubate.md, "Scheduling":
 * 1.5 s).
 */
export const WAIT_OUT_MS = 1_500;
/**
 * SQS's longest delivery delay (15 minutes): a later delivery goes through the scheduler (docs/incubate.md,
 * "Scheduling").
 */
export const SQS_MAX_DELAY_SECONDS = 900;
/**
 * How far ahead a vessel may be scheduled (docs/incubate.md, "Scheduling": 365 days), a year of EventBridge schedules.
 */
export const MAX_SCHEDULE_AHEAD_SECONDS = 365 * DAY_SECONDS;
/**
 * The longest back-off while the user's budget is held by their runs in flight: 1 s, doubling per wait, at most this
 * (docs/incubate.md, "Execution": 1, 2, 4 … 30 s with jitter), so a freed budget is found within half a minute.
 */
export const HELD_BUDGET_BACKOFF_MAX_SECONDS = 30;
/**
 * The first wait before writing a run's end again after the store failed, doubling per try: a hiccup passes in a
 * second.
 */
export const END_WRITE_BACKOFF_MS = 250;
/**
 * A claim of an idempotency key that met a concurrent transaction waits this long, plus up to
 * IDEMPOTENCY_RETRY_JITTER_MS per try, before it looks again: long enough for the other transaction to land, jittered
 * so two claimers part.
 */
export const IDEMPOTENCY_RETRY_BASE_MS = 10;
export const IDEMPOTENCY_RETRY_JITTER_MS = 40;

// ——— Webhooks and outbound calls ———

/**
 * One webhook delivery attempt is cut here (docs/webhooks.md, "Delivery": 10 s; docs/contract.md, "Outbound safety").
 */
export const WEBHOOK_ATTEMPT_TIMEOUT_MS = 10_000;
/**
 * A webhook attempt's claim this old belongs to a sender that died: twice the sender's 30 s limit (docs/webhooks.md,
 * "The delivery record": 60 s).
 */
export const WEBHOOK_CLAIM_STALE_MS = 60_000;
/**
 * The longest Retry-After honoured: a receiver cannot park a delivery for longer than the last wait of the default
 * schedule, 10 h (docs/webhooks.md, "Retries").
 */
export const MAX_RETRY_AFTER_SECONDS = 36_000;
/** An outbound call, body included, by default (docs/contract.md, "Outbound safety": 30 s). */
export const OUTBOUND_TIMEOUT_MS = 30_000;
/** Resolving and connecting an outbound call, by default (docs/contract.md, "Outbound safety": 5 s). */
export const OUTBOUND_CONNECT_TIMEOUT_MS = 5_000;
/**
 * A remote HTTP tool's call: generous for a remote function, short of a run's whole budget (docs/contract.md, "Outbound
 * safety": 30 s).
 */
export const HTTP_TOOL_TIMEOUT_MS = 30_000;
/**
 * Connecting, initializing and listing the tools of one MCP server, together: a server slower than that fails alone.
 */
export const MCP_CONNECT_TIMEOUT_MS = 10_000;
/**
 * One call of an MCP server's tool, its answer read in full: the same 30 s as a remote HTTP tool's call
 * (docs/prompt.md, "Limits on tools"), so a tool takes as long wherever it runs.
 */
export const MCP_TOOL_TIMEOUT_MS = HTTP_TOOL_TIMEOUT_MS;
/** How long closing an MCP client waits for its server to end the session before it just drops the connection. */
export const MCP_TERMINATE_TIMEOUT_MS = 1_000;

// ——— Tokens, caches, retries the clients are told ———

/** Clock leeway on a token's `exp`, `nbf` and `iat` (docs/contract.md, "Tokens"; docs/api.md: 60 s). */
export const TOKEN_CLOCK_TOLERANCE_SECONDS = 60;
/**
 * A /ws connection opened without a token (a browser's) must send its `auth` frame within this long of the connect,
 * else it is told `unauthorized` and closed (docs/ws.md, "The auth frame": 10 s): ample for a page to fetch a token,
 * short enough that an anonymous connection holds nothing for long.
 */
export const AUTH_DEADLINE_SECONDS = 10;
/**
 * A cached project that is about to cause a refusal is read again, but at most this often per project: a flood of bad
 * tokens stays one registry read a second (docs/contract.md, "Project records and when changes take effect").
 */
export const PROJECT_REFRESH_INTERVAL_MS = 1_000;
/**
 * The `retry-after` of a 429 for capacity (every slot taken) or a budget held by runs in flight: a slot or a budget is
 * freed when a run ends, any moment (docs/api.md, docs/contract.md: `retry-after: 1`).
 */
export const BUSY_RETRY_AFTER_SECONDS = 1;

// ——— Retention (DynamoDB's TTL) ———

/**
 * How long the parts of a message are kept after its latest part arrived: a message whose parts stop coming is
 * dropped after this (the table's TTL deletes the items; a part finding its message expired starts it anew). Five
 * minutes, SESSION_IDLE_SECONDS's default: a client that sends nothing for that long is closed anyway (docs/ws.md,
 * "Large messages").
 */
export const PARTS_TTL_SECONDS = 300;

/** Idempotency keys, and ended vessels, are kept this long (docs/incubate.md, "Retention": 30 days). */
export const VESSEL_RETENTION_SECONDS = 30 * DAY_SECONDS;
/**
 * A developer's leases item outlives its last lease by a day, then the TTL removes it (a new acquisition recreates it).
 */
export const LEASES_RETAIN_SECONDS = DAY_SECONDS;
/** A developer's month of compute is kept this long after it was first written, for reporting: over a year. */
export const DEVELOPER_MONTH_RETAIN_SECONDS = 400 * DAY_SECONDS;
/** Past usage windows are kept this long after they end, for reporting: a quarter. */
export const USAGE_WINDOW_RETAIN_SECONDS = 90 * DAY_SECONDS;
/** Activity records (lambdas/activity/record.ts) are kept 400 days: a year of hours, compared month by month. */
export const ACTIVITY_RETAIN_SECONDS = 400 * DAY_SECONDS;
/**
 * How long a /ws connection item outlives its connect: API Gateway closes every connection after 2 hours, so one left
 * behind by a lost $disconnect is gone an hour later (docs/ws.md, "Sessions: persistence and retention": 3 hours).
 */
export const CONNECTION_TTL_SECONDS = 3 * HOUR_SECONDS;
