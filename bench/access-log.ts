import { percentile } from './common.ts';
import type { OutputLines } from './common.ts';

/**
 * The gateway's own account of each request: with LOCAL_ACCESS_LOG=json the local runtime prints every access
 * record as one line `{"access": {...}}` on stdout, written once the request is settled, with `phases` (durations in
 * ms of each step of the request) and `totalMs`. The benchmark collects them to report where the time goes.
 */
export const PHASES = ['parse', 'token', 'project', 'pricing', 'reservation', 'connect', 'firstByte', 'settle'] as const;
export type Phase = (typeof PHASES)[number];

export interface AccessLine {
  path?: string;
  status?: number;
  totalMs?: number;
  phases?: Partial<Record<Phase, number>>;
}

/** p50 and p99 of one phase (NaN: no record carried it). */
export type PhaseFigures = Record<Phase | 'total', { p50: number; p99: number; count: number }>;

export class AccessLog {
  private records: AccessLine[] = [];

  constructor(output: OutputLines) {
    output.subscribe((line) => {
      if (!line.startsWith('{"access":')) return;
      try {
        this.records.push((JSON.parse(line) as { access: AccessLine }).access);
      } catch {
        // A line cut by something else writing to stdout at the same time: one record fewer.
      }
    });
  }

  /**
   * The records of the Messages requests made by `run`. A record is written after its request's settlement, which
   * may follow the answer's delivery, so this waits a little for the last ones to arrive.
   */
  async during(run: () => Promise<unknown>, expected: number): Promise<AccessLine[]> {
    this.records = [];
    await run();
    const deadline = Date.now() + 2000;
    while (this.messages().length < expected && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    return this.messages();
  }

  private messages(): AccessLine[] {
    return this.records.filter((r) => r.path === '/v1/messages' && r.status === 200);
  }
}

export function phaseFigures(records: AccessLine[]): PhaseFigures {
  const figures = (values: (number | undefined)[]) => {
    const present = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
    return { p50: percentile(present, 50), p99: percentile(present, 99), count: present.length };
  };
  const out = { total: figures(records.map((r) => r.totalMs)) } as PhaseFigures;
  for (const phase of PHASES) out[phase] = figures(records.map((r) => r.phases?.[phase]));
  return out;
}
