import { clock } from '../config/clock.ts';
import type { Caller } from '../auth/claims.ts';
import { readUsage } from '../budgets/ledger.ts';

/** GET /usage body: the interface's fields, plus `reserved` (in-flight worst cases) under each meter. */
export interface UsageReport {
  user_id: string;
  issuer_id: string;
  window: Caller['budget']['window'];
  window_start: string;
  allowed: boolean;
  ai: AiMeterReport;
  compute: MeterReport;
}

interface MeterReport {
  used: number;
  remaining: number;
  budget: number;
  reserved: number;
}

/** The AI meter also reports `overrun`: spend settled above the reservations' bounds (docs/contract.md). */
interface AiMeterReport extends MeterReport {
  overrun: number;
}

export async function usageReport(caller: Caller, now = new Date(clock.now())): Promise<UsageReport> {
  const usage = await readUsage(caller, now);
  const meter = (m: 'ai' | 'compute'): MeterReport => ({
    used: usage.used[m],
    remaining: Math.max(0, caller.budget[m] - usage.used[m] - usage.reserved[m]),
    budget: caller.budget[m],
    reserved: usage.reserved[m],
  });
  const ai = { ...meter('ai'), overrun: usage.overrun };
  const compute = meter('compute');
  return {
    user_id: caller.userId,
    issuer_id: caller.projectId,
    window: caller.budget.window,
    window_start: usage.key.windowStart,
    allowed: ai.remaining > 0 && compute.remaining > 0,
    ai,
    compute,
  };
}
