/** Concurrency tiers from the interface's Limits table, chosen by plan seconds (docs/contract.md, "Developers and plans"). */
export const TIERS = [
  { name: 'pro', minPlanSeconds: 15_000_000, maxConcurrency: 10 },
  { name: 'starter', minPlanSeconds: 3_500_000, maxConcurrency: 5 },
  { name: 'hobby', minPlanSeconds: 0, maxConcurrency: 2 },
] as const;
export type Tier = (typeof TIERS)[number];

export function tierFor(planSeconds: number): Tier {
  return TIERS.find((t) => planSeconds >= t.minPlanSeconds) ?? TIERS[TIERS.length - 1]!;
}
