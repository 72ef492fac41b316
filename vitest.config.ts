import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    // One DynamoDB Local for the whole run; each test file gets its own tables (see test/support/gateway.ts).
    globalSetup: ['test/support/global-setup.ts'],
    include: ['test/**/*.test.ts'],
    pool: 'forks',
    testTimeout: 30_000,
    hookTimeout: 120_000,
    env: { POWERTOOLS_LOG_LEVEL: 'SILENT', POWERTOOLS_METRICS_DISABLED: 'true' },
  },
});
