/**
 * The gateway's fixed timings: how early a far delivery is scheduled, how close to its time an early message is
 * waited out. Declared here, beside the environment (env.ts), so a cadence shared by several modules is one figure;
 * what an operator or a test may change is in env.ts instead.
 */

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
