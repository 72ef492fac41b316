/**
 * The gateway's fixed timings: how long a concurrency lease lives and how often it is renewed, how often a running job
 * looks at its record, how early a far delivery is scheduled, how close to its time an early message is waited out. Declared here, beside the environment (env.ts), so a cadence shared by several modules is one figure;
 * what an operator or a test may change is in env.ts instead.
 */

/** A concurrency lease lapses this long after its last renewal (docs/contract.md, "Concurrency leases"). */
export const LEASE_TTL_MS = 60_000;
/** How often a holder renews its lease: three renewals fit in one expiry, so one lost renewal does not lose it. */
export const LEASE_RENEW_INTERVAL_MS = 20_000;

/** How often an executing vessel looks for a cancel request: the longest a cancel waits to be seen. */
export const CANCEL_POLL_MS = 1_000;
/** How often a running /ws turn looks for an interrupt: the longest an interrupt waits to be seen. */
export const STOP_POLL_MS = 250;

/**
 * A far delivery's schedule fires this long before the message is due; the last stretch is a queue delay, precise to
 * the second, where EventBridge's `at()` is precise to about a minute (docs/incubate.md, "Scheduling").
 */
export const SCHEDULE_LEAD_SECONDS = 60;

/**
 * An early run message closer than this to its time is waited out by the executor instead of being put back: a queue
 * delay is whole seconds, rounded down, so a message may come up to a second early (docs/incubate.md, "Scheduling").
 */
export const WAIT_OUT_MS = 1_500;
