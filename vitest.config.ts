import { defineConfig } from 'vitest/config';
import { OWN_PROCESS_FILES, SOAK_FILES, SYSTEM_FILES } from './test/tiers.ts';

/**
 * Powertools Metrics warns "No application metrics to publish…" after every invocation that recorded no metric, even
 * with POWERTOOLS_METRICS_DISABLED=true (the flag stops the EMF output, not the warning). Through its own Console on
 * process.stderr that is dozens of raw lines per run; POWERTOOLS_DEV=true makes it use the global console, which
 * vitest intercepts, and onConsoleLog drops exactly that sentence. (With logs SILENT, dev mode changes nothing else.)
 */
export const EMPTY_METRICS_WARNING = 'No application metrics to publish.';

/**
 * Most of the suite's wall time is waiting (on a queue, a lease, a simulated upstream's latency), not CPU: more
 * workers than cores keep both cores busy. Measured on 2 cores: see the README's "Tests".
 */
const WORKERS = 4;

export default defineConfig({
  test: {
    // One DynamoDB Local for the whole run; each test file gets its own tables (see test/support/gateway.ts).
    globalSetup: ['test/support/global-setup.ts'],
    pool: 'forks',
    // The in-process gateways run with the request context the deployed functions and `npm start` use
    // (LAMBDA_NODE_OPTIONS in lib/bundling.ts): AsyncLocalStorage on the async context frame, not async_hooks.
    execArgv: ['--experimental-async-context-frame'],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    maxWorkers: WORKERS,
    env: { POWERTOOLS_LOG_LEVEL: 'SILENT', POWERTOOLS_METRICS_DISABLED: 'true', POWERTOOLS_DEV: 'true' },
    onConsoleLog: (log) => !log.startsWith(EMPTY_METRICS_WARNING),
    // The tiers (test/tiers.ts, README "Tests"): `npm test` is the two unit projects.
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/**/*.test.ts'],
          exclude: [...SYSTEM_FILES, ...OWN_PROCESS_FILES],
          // A worker keeps its loaded modules from one file to the next: the handlers' module graph (the AWS SDK,
          // the MCP SDK…) is loaded once per worker, not once per file. Safe because every per-instance value is
          // declared in lambdas/instance/state.ts and startGateway resets them (docs/architecture.md).
          isolate: false,
          // One more try for a test that fails once: seen once in eight full runs on 2 cores, a /ws turn whose first
          // delta did not come within 15 s (test/sessions/resume.test.ts, "moves there"), not reproduced alone. A
          // failure that repeats still fails; vitest's report names every test that needed its retry.
          retry: 1,
        },
      },
      // The `npm test` files that need a fresh process (test/tiers.ts).
      { extends: true, test: { name: 'unit-own-process', include: [...OWN_PROCESS_FILES] } },
      // Two at a time: the crash tests judge a run dead by its lapsed heartbeat, and must not starve it of CPU.
      { extends: true, test: { name: 'system', include: [...SYSTEM_FILES], maxWorkers: 2 } },
      { extends: true, test: { name: 'soak', include: [...SOAK_FILES], env: { TEST_SCALE: 'full', FUZZ_RUNS: '3' } } },
    ],
  },
});
