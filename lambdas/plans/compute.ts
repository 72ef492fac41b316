/**
 * A developer's plan compute (docs/contract.md, "Developers and plans"): the month's compute across all of the
 * developer's projects (stored by budgets/developer-month.ts) against the plan's planSeconds + poolSeconds.
 */

export interface DeveloperAllowance {
  allowed: boolean;
  used: number;
  available: number;
  planSeconds: number;
  poolSeconds: number;
}

/** The month's compute across all the developer's projects against planSeconds + poolSeconds. */
export function developerAllowance(plan: { planSeconds: number; poolSeconds: number }, used: number): DeveloperAllowance {
  const total = plan.planSeconds + plan.poolSeconds;
  return { allowed: used < total, used, available: Math.max(0, total - used), planSeconds: plan.planSeconds, poolSeconds: plan.poolSeconds };
}
