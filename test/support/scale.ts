/**
 * The scale a test runs at: `npm test` proves each property at a small scale, `npm run test:soak` (TEST_SCALE=full,
 * set by vitest.config.ts's soak project) at the full one. Tiers: test/tiers.ts and the README.
 */
export const FULL_SCALE = process.env.TEST_SCALE === 'full';

/** `small` in `npm test`, `full` in the soak tier. */
export const scaled = (small: number, full: number): number => (FULL_SCALE ? full : small);
