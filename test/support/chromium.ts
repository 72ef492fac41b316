import { existsSync } from 'node:fs';

/**
 * The real Chromium the browser tests drive (test/clients/browser.test.ts, test/console/console.test.ts): Debian's
 * (`apt-get install chromium`, which .ci/run does), through playwright-core; no browser is downloaded. Without one a
 * browser test file is skipped, with the reason in its name — except under CI, where it fails.
 */

/** CHROMIUM_PATH, when set, is the only candidate (so a run without Chromium can be tried on a machine with one). */
export const CHROMIUM_CANDIDATES = process.env.CHROMIUM_PATH
  ? [process.env.CHROMIUM_PATH]
  : ['/usr/bin/chromium', '/usr/bin/chromium-browser', '/usr/bin/google-chrome-stable', '/usr/bin/google-chrome'];
export const CHROMIUM = CHROMIUM_CANDIDATES.find((p) => existsSync(p));
export const IN_CI = Boolean(process.env.CI);
/**
 * The flags that work here (root, no network): no sandbox (root), no GPU, and nothing Chromium would fetch by itself.
 * playwright-core adds `--headless` and a fresh temporary `--user-data-dir` of its own.
 */
export const CHROMIUM_FLAGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** Appended to a browser test's describe name when it is skipped: why, and how to run it. */
export const SKIP_REASON = CHROMIUM ? '' : ` (skipped: no Chromium found at ${CHROMIUM_CANDIDATES.join(', ')}: apt-get install chromium, or set CHROMIUM_PATH)`;
