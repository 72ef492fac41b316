import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { PROJECT_ROOT } from '../lib/bundling.ts';

export const BENCHMARKS_DOC = join(PROJECT_ROOT, 'docs/benchmarks.md');

/**
 * Writes `text` (which starts with `heading`, a level-2 heading) into docs/benchmarks.md: it replaces that section
 * up to the next level-2 heading, or is appended. Each benchmark owns its section; the others are left alone.
 */
export function writeBenchmarkSection(heading: string, text: string): void {
  const current = existsSync(BENCHMARKS_DOC) ? readFileSync(BENCHMARKS_DOC, 'utf8') : '# Benchmarks\n';
  const start = current.indexOf(`${heading}\n`);
  let next: string;
  if (start < 0) {
    next = `${current.trimEnd()}\n\n${text}`;
  } else {
    const after = current.indexOf('\n## ', start + heading.length);
    next = `${current.slice(0, start)}${text.trimEnd()}\n${after < 0 ? '' : `\n${current.slice(after + 1)}`}`;
  }
  writeFileSync(BENCHMARKS_DOC, next.endsWith('\n') ? next : `${next}\n`);
}
