import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../lib/bundling.ts';
import type { LayerShare } from './cpu-layers.ts';

/**
 * The split of the gateway's CPU per request by layer at each commit it was measured on, so docs/benchmarks.md shows
 * each change's effect layer by layer ("before and after", issue 32). Every `npm run bench` that runs the CPU part
 * adds its figures here (a second run at the same commit replaces the first); BENCH_LABEL names the change.
 */
export const HISTORY_FILE = join(PROJECT_ROOT, 'docs', 'benchmarks-cpu-layers.json');

export interface LayerEntry {
  /** The short commit the gateway ran at, `+` when the tree had uncommitted changes. */
  commit: string;
  date: string;
  label?: string;
  /** The gateway's net CPU per request, ms, and Portkey's on the same run when it ran. */
  cpuMsPerRequest: number;
  portkeyMsPerRequest?: number;
  /** ms per request, by layer name. */
  layers: Record<string, number>;
}

function currentCommit(): string {
  const git = (...args: string[]) => execFileSync('git', args, { cwd: PROJECT_ROOT, encoding: 'utf8' }).trim();
  try {
    return git('rev-parse', '--short', 'HEAD') + (git('status', '--porcelain', '--untracked-files=no', '--', 'lambdas', 'bin', 'lib') ? '+' : '');
  } catch {
    return 'unknown';
  }
}

export function readLayerHistory(): LayerEntry[] {
  return existsSync(HISTORY_FILE) ? (JSON.parse(readFileSync(HISTORY_FILE, 'utf8')) as LayerEntry[]) : [];
}

/** Adds this run's figures (replacing an earlier run at the same commit) and returns the whole history. */
export function recordLayers(run: { cpuMsPerRequest: number; portkeyMsPerRequest?: number; layers: LayerShare[] }): LayerEntry[] {
  const entry: LayerEntry = {
    commit: currentCommit(),
    date: new Date().toISOString().slice(0, 10),
    ...(process.env.BENCH_LABEL ? { label: process.env.BENCH_LABEL } : {}),
    cpuMsPerRequest: run.cpuMsPerRequest,
    ...(run.portkeyMsPerRequest !== undefined ? { portkeyMsPerRequest: run.portkeyMsPerRequest } : {}),
    layers: Object.fromEntries(run.layers.map((l) => [l.name, Number(l.msPerRequest.toFixed(3))])),
  };
  const history = [...readLayerHistory().filter((e) => e.commit !== entry.commit), entry];
  writeFileSync(HISTORY_FILE, `${JSON.stringify(history, null, 2)}\n`);
  return history;
}
