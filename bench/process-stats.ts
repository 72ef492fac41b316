import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';

/**
 * What the OS says about a process (Linux /proc): CPU time and memory. The benchmark measures processes from the
 * outside so the figures include everything the process does (event loop, GC, the AWS SDK, logging), not only what
 * the code under test chose to time.
 */

/** Clock ticks per second of /proc/<pid>/stat's utime and stime (usually 100, so 10 ms resolution). */
export const CLOCK_TICKS: number = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

export function procAvailable(): boolean {
  return existsSync('/proc/self/stat');
}

/** user + system CPU time the process (all its threads, not its children) has used so far, in milliseconds. */
export function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  // The command name (field 2) is in parentheses and may contain spaces: count fields from after its ')'.
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  // Fields 14 (utime) and 15 (stime) of proc(5); after the name, field 3 is index 0.
  const ticks = Number(fields[11]) + Number(fields[12]);
  return (ticks * 1000) / CLOCK_TICKS;
}

/** The process's command name (/proc/<pid>/comm), e.g. "node" or "java". */
export function commandName(pid: number): string {
  return readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
}

/** Direct children of `pid`, from /proc/<pid>/task/<tid>/children (each thread lists the children it started). */
export function childPids(pid: number): number[] {
  const tasks = readdirSync(`/proc/${pid}/task`);
  const children = new Set<number>();
  for (const tid of tasks) {
    try {
      for (const id of readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(/\s+/)) if (id) children.add(Number(id));
    } catch {
      // A thread that ended between the listing and the read.
    }
  }
  return [...children];
}

/** The first direct child of `pid` whose command name is `name` (DynamoDB Local is the gateway's `java` child). */
export function findChild(pid: number, name: string): number | undefined {
  return childPids(pid).find((child) => {
    try {
      return commandName(child) === name;
    } catch {
      return false;
    }
  });
}

export interface Memory {
  /** Resident set size now, MB. */
  rssMb: number;
  /** Peak resident set size since the process started ("high water mark"), MB. */
  hwmMb: number;
}

export function memory(pid: number): Memory {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMb: kb('VmRSS') / 1024, hwmMb: kb('VmHWM') / 1024 };
}

/**
 * CPU used by a set of processes between `start()` and the returned function's call, in milliseconds per process
 * label. With 10 ms ticks a run needs thousands of milliseconds of CPU for a per-request figure to be exact to a
 * few percent: the load runs are sized for that.
 */
export function startCpuMeter(pids: Record<string, number>): () => Record<string, number> {
  const before = Object.fromEntries(Object.entries(pids).map(([label, pid]) => [label, cpuMs(pid)]));
  return () => Object.fromEntries(Object.entries(pids).map(([label, pid]) => [label, cpuMs(pid) - before[label]!]));
}
