import { z } from 'zod';
import { Identifier } from '../auth/claims.ts';

export const PROVIDERS_WITH_PROJECT_KEYS = ['openai', 'openrouter'] as const;
export const ProjectProvider = z.enum(PROVIDERS_WITH_PROJECT_KEYS);
export type ProjectProvider = z.infer<typeof ProjectProvider>;

/** Prices in USD per million tokens, as providers publish them. */
export const CustomPrice = z.object({
  inputUsdPerMtok: z.number().nonnegative().finite(),
  outputUsdPerMtok: z.number().nonnegative().finite(),
  cacheReadUsdPerMtok: z.number().nonnegative().finite().optional(),
  cacheWriteUsdPerMtok: z.number().nonnegative().finite().optional(),
});
export type CustomPrice = z.infer<typeof CustomPrice>;

export const Developer = z.object({
  developerId: Identifier,
  planSeconds: z.number().int().nonnegative(),
  poolSeconds: z.number().int().nonnegative(),
  createdAt: z.string(),
});
export type Developer = z.infer<typeof Developer>;

export const Project = z.object({
  projectId: Identifier,
  developerId: Identifier,
  /** HMAC secret the project's tokens are signed with. */
  secret: z.string().min(32),
  /** Provider API keys, encrypted by the KeyCipher; never returned by any read path in clear. */
  providerKeys: z.partialRecord(ProjectProvider, z.string()).default({}),
  pricing: z.record(z.string(), CustomPrice).default({}),
  createdAt: z.string(),
  secretRotatedAt: z.string().optional(),
});
export type Project = z.infer<typeof Project>;

/** Concurrency tiers from the interface's Limits table, chosen by plan seconds. */
export const TIERS = [
  { name: 'pro', minPlanSeconds: 15_000_000, maxConcurrency: 10 },
  { name: 'starter', minPlanSeconds: 3_500_000, maxConcurrency: 5 },
  { name: 'hobby', minPlanSeconds: 0, maxConcurrency: 2 },
] as const;
export type Tier = (typeof TIERS)[number];

export function tierFor(planSeconds: number): Tier {
  return TIERS.find((t) => planSeconds >= t.minPlanSeconds) ?? TIERS[TIERS.length - 1]!;
}
