import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import pLimit from 'p-limit';

/** Shared pieces of the benchmark: child processes and their output, load generation, percentiles. */

/**
 * A child process's stdout as lines. Its output is always consumed (a full pipe would stall the child), every line
 * goes to the current listeners, and the last few kilobytes are kept for error messages.
 */
export class OutputLines {
  private partial = '';
  private tail = '';
  private readonly listeners = new Set<(line: string) => void>();

  constructor(readonly child: ChildProcess) {
    child.stdout?.setEncoding('utf8');
    child.stdout?.on('data', (text: string) => {
      this.tail = (this.tail + text).slice(-4000);
      const lines = (this.partial + text).split('\n');
      this.partial = lines.pop() ?? '';
      for (const line of lines) for (const listener of this.listeners) listener(line);
    });
  }

  /** Calls `listener` with each line until the returned function is called. */
  subscribe(listener: (line: string) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** The first line matching `pattern` from now on; rejects on timeout or when the process exits first. */
  waitFor(pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const done = (fn: () => void) => {
        clearTimeout(timer);
        unsubscribe();
        this.child.off('exit', onExit);
        fn();
      };
      const onExit = (code: number | null) => done(() => reject(new Error(`process exited (${code}) before printing ${pattern}\n${this.tail}`)));
      const timer = setTimeout(() => done(() => reject(new Error(`timed out waiting for ${pattern}\n${this.tail}`))), timeoutMs);
      const unsubscribe = this.subscribe((line) => {
        const m = line.match(pattern);
        if (m) done(() => resolve(m));
      });
      this.child.once('exit', onExit);
    });
  }
}

/**
 * Spawns a process whose stdout the benchmark reads and registers it for clean-up. Its stderr goes to ours, except
 * lines matching `quiet` (e.g. the inspector's announcements).
 */
export function spawnChild(command: string, args: string[], options: SpawnOptions, children: ChildProcess[], quiet?: RegExp): OutputLines {
  const child = spawn(command, args, { ...options, stdio: ['ignore', 'pipe', quiet ? 'pipe' : 'inherit'] });
  children.push(child);
  if (quiet) {
    child.stderr?.setEncoding('utf8');
    child.stderr?.on('data', (text: string) => {
      const kept = text.split(/(?<=\n)/).filter((line) => !quiet.test(line));
      if (kept.length) process.stderr.write(kept.join(''));
    });
  }
  return new OutputLines(child);
}

/** SIGTERM, then waits for the exit (SIGKILL after `graceMs`). */
export async function stopChild(child: ChildProcess, graceMs = 5000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(timer);
}

/**
 * Runs `task` `count` times, `concurrency` at a time; returns each run's result and the wall time in seconds. The task
 * gets the run's index and its client's (0 … concurrency − 1: one client's runs follow each other).
 */
export async function concurrently<T>(
  count: number,
  concurrency: number,
  task: (i: number, client: number) => Promise<T>,
): Promise<{ results: T[]; seconds: number }> {
  // p-limit keeps `concurrency` runs going; each run takes a free client for its duration, so a client (a user of the
  // bench, in the CPU runs) never has two requests in flight.
  const free = Array.from({ length: concurrency }, (_, client) => concurrency - 1 - client);
  const started = performance.now();
  const results = await pLimit(concurrency).map(
    Array.from({ length: count }, (_, i) => i),
    async (i) => {
      const client = free.pop()!;
      try {
        return await task(i, client);
      } finally {
        free.push(client);
      }
    },
  );
  return { results, seconds: (performance.now() - started) / 1000 };
}

export function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/** A figure for the console and the tables: 2 decimals, "-" when it was not measured. */
export function ms(x: number | undefined, digits = 2): string {
  return x === undefined || !Number.isFinite(x) ? '-' : x.toFixed(digits);
}

export const sleep = (millis: number) => new Promise<void>((resolve) => setTimeout(resolve, millis));
