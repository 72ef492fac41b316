/**
 * Which alert thresholds a charge crossed (docs/webhooks.md, "Budget alerts"), from the counter as the charge's own
 * write left it: the charge moved it from `after − charged` to `after`, and a threshold of T % is crossed when
 * before < T % of the budget ≤ after. In integers (before·100 < T·budget ≤ after·100), so exact to the microdollar
 * and the second. The writes of one counter are serialised by DynamoDB, so of the charges that add to it exactly one
 * moves it across each threshold; the alert item's conditional write (fire.ts) holds "once" even where two charges
 * saw different budgets (two tokens of one user with different claims).
 */
export function crossedThresholds(thresholds: readonly number[], budget: number, after: number, charged: number): number[] {
  const before = after - charged;
  if (budget <= 0 || charged <= 0) return [];
  return thresholds.filter((t) => before * 100 < t * budget && t * budget <= after * 100);
}
