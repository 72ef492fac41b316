import fc from 'fast-check';
import { FULL_SCALE } from './scale.ts';

/**
 * Fuzz run settings shared by test/fuzz/*. A fixed seed by default, so CI is reproducible and a failure replays
 * bit for bit; FUZZ_SEED picks another, FUZZ_RUNS multiplies every property's run count, FUZZ_PATH (from a failure
 * report, with `-t` selecting the one test) replays just the shrunk counterexample.
 */
export const FUZZ_SEED = process.env.FUZZ_SEED ? Number.parseInt(process.env.FUZZ_SEED, 10) : 20_260_528;
export const FUZZ_SCALE = process.env.FUZZ_RUNS ? Number(process.env.FUZZ_RUNS) : 1;
const FUZZ_PATH = process.env.FUZZ_PATH || undefined;

if (!Number.isSafeInteger(FUZZ_SEED)) throw new Error(`FUZZ_SEED must be an integer, got ${process.env.FUZZ_SEED}`);
if (!(FUZZ_SCALE > 0)) throw new Error(`FUZZ_RUNS must be a positive number, got ${process.env.FUZZ_RUNS}`);

/** A property's run count, scaled by FUZZ_RUNS. */
export const runs = (base: number): number => Math.max(1, Math.round(base * FUZZ_SCALE));

/**
 * The run count of a property in a soak file (test/tiers.ts): half its runs in `npm test`, which only proves the
 * property holds, and all of them, times FUZZ_RUNS (3), in the soak tier.
 */
export const soakRuns = (base: number): number => runs(FULL_SCALE ? base : base / 2);

/** A test timeout that grows with FUZZ_RUNS (the base is for the default run count). */
export const fuzzTimeout = (baseMs: number): number => Math.round(baseMs * Math.max(1, FUZZ_SCALE)) + 60_000;

/**
 * Runs an async property with the shared seed. On failure the error starts with the exact command-line settings to
 * replay it, then fast-check's own report (seed, path, shrunk counterexample, the failing check's message).
 */
export async function checkProperty<T>(name: string, property: fc.IAsyncPropertyWithHooks<T>, numRuns: number): Promise<void> {
  try {
    await fc.assert(property, { seed: FUZZ_SEED, numRuns, ...(FUZZ_PATH ? { path: FUZZ_PATH } : {}) });
  } catch (err) {
    const message = (err as Error).message;
    const path = /path: "([^"]*)"/.exec(message)?.[1];
    (err as Error).message =
      `[fuzz] "${name}" failed — replay: FUZZ_SEED=${FUZZ_SEED}${path ? ` FUZZ_PATH=${path}` : ''} npx vitest run test/fuzz -t '${name}'\n${message}`;
    throw err;
  }
}
