import * as z from 'zod';
import { Identifier } from '../auth/claims.ts';
import { PROJECT_KEY_PROVIDERS } from '../providers/ids.ts';

/** The providers a project stores a key for: the list is the providers' own (providers/ids.ts). */
export const PROVIDERS_WITH_PROJECT_KEYS = PROJECT_KEY_PROVIDERS;
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
