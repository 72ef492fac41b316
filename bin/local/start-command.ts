import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

/**
 * `npm start`'s own command (package.json), as [executable in node_modules/.bin, ...arguments]. The tests and the
 * bench that run the local runtime as a process run exactly what a developer runs — its Node flags included —
 * without npm's wrapper process in between (its signal relay would stand between a Ctrl-C and the runtime).
 */
export function npmStartCommand(): [string, ...string[]] {
  const start = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } }).scripts.start;
  const [command, ...args] = start.split(/\s+/);
  return [join(ROOT, 'node_modules', '.bin', command!), ...args];
}
