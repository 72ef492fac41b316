import { defineConfig } from 'vitest/config';

/**
 * Powertools Metrics warns "No application metrics to publish…" after every invocation that recorded no metric, even
 * with POWERTOOLS_METRICS_DISABLED=true (the flag stops the EMF output, not the warning). Through its own Console on
 * process.stderr that is dozens of raw lines per run; POWERTOOLS_DEV=true makes it use the global console, which
 * vitest intercepts, and onConsoleLog drops exactly that sentence. (With logs SILENT, dev mode changes nothing else.)
 */
export const EMPTY_METRICS_WARNING = 'No application metrics to publish.';

export default defineConfig({
  test: {
    // One DynamoDB Local for the whole run; each test file gets its own tables (see test/support/gateway.ts).
    globalSetup: ['test/support/global-setup.ts'],
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    // The in-process gateways run with the request context the deployed functions and `npm start` use
    // (LAMBDA_NODE_OPTIONS in lib/bundling.ts): AsyncLocalStorage on the async context frame, not async_hooks.
    execArgv: ['--experimental-async-context-frame'],
    testTimeout: 30_000,
    hookTimeout: 120_000,
    env: { POWERTOOLS_LOG_LEVEL: 'SILENT', POWERTOOLS_METRICS_DISABLED: 'true', POWERTOOLS_DEV: 'true' },
    onConsoleLog: (log) => !log.startsWith(EMPTY_METRICS_WARNING),
  },
});
