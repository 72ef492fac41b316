import { developerComputeUsed } from '../budgets/developer-month.ts';
import type { Developer } from '../registry/model.ts';
import { getDeveloper } from '../registry/registry.ts';
import { developerAllowance, type DeveloperAllowance } from './compute.ts';
import { liveLeases, type LiveLease } from './leases.ts';
import { tierFor, type Tier } from './tiers.ts';

/** Where a developer's plan stands now: what the operator sees (`gateway developer show`, the console's live runs). */
export interface DeveloperStatus {
  developer: Developer;
  tier: Tier;
  /** This month's compute against the plan and pool. */
  allowance: DeveloperAllowance;
  /** The runs holding a slot of the tier now. */
  leases: LiveLease[];
}

/** The developer's status, or undefined when there is no such developer. */
export async function developerStatus(developerId: string): Promise<DeveloperStatus | undefined> {
  const developer = await getDeveloper(developerId);
  if (!developer) return undefined;
  const [used, leases] = await Promise.all([developerComputeUsed(developerId), liveLeases(developerId)]);
  return { developer, tier: tierFor(developer.planSeconds), allowance: developerAllowance(developer, used), leases };
}
