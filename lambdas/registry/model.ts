import * as z from 'zod';
import { PROJECT_KEY_PROVIDERS } from '../routing/provider-ids.ts';

/** The providers a project stores a key for: the list is the providers' own (routing/provider-ids.ts). */
export const PROVIDERS_WITH_PROJECT_KEYS = PROJECT_KEY_PROVIDERS;
export const ProjectProvider = z.enum(PROVIDERS_WITH_PROJECT_KEYS);
export type ProjectProvider = z.infer<typeof ProjectProvider>;

/**
 * Developer, project and user ids (docs/contract.md, "Identifiers"), here with the records they key; a token's claims
 * (auth/claims.ts) name a project and a user by the same rule. They become DynamoDB keys joined by '#' and are shown
 * to people, so an id is 1–128 characters (code points) in Unicode NFC and none of them is:
 *   - '#' (the key separator) or white space (Unicode White_Space, which includes U+0085 and U+00A0);
 *   - a control character, C0 or C1 (U+0000–U+001F, U+007F–U+009F);
 *   - a format character (Unicode Cf: zero-width spaces and joiners, bidi controls, U+FEFF, soft hyphen…), which
 *     would let two ids that look identical name different ledgers;
 *   - a lone surrogate, which DynamoDB would store as U+FFFD and so merge distinct ids into one ledger.
 * NFC is required for the same reason as Cf: "é" composed and "e"+U+0301 must not be two users.
 */
const IDENTIFIER = /^[^#\p{White_Space}\p{Cc}\p{Cf}\p{Cs}]{1,128}$/u;

export const Identifier = z
  .string()
  .refine((id) => IDENTIFIER.test(id), {
    message: 'must be 1–128 characters without "#", white space, control, format characters or lone surrogates',
  })
  .refine((id) => id.normalize('NFC') === id, { message: 'must be in Unicode normal form NFC' });

/** Prices in USD per million tokens, as providers publish them. */
export const CustomPrice = z.object({
  inputUsdPerMtok: z.number().nonnegative().finite(),
  outputUsdPerMtok: z.number().nonnegative().finite(),
  cacheReadUsdPerMtok: z.number().nonnegative().finite().optional(),
  cacheWriteUsdPerMtok: z.number().nonnegative().finite().optional(),
});
export type CustomPrice = z.infer<typeof CustomPrice>;

/** A model name a price is set for: the name a client sends (or the upstream name it routes to). */
export const PricedModel = z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters');

/**
 * Custom prices by model name: a project's own (Project.pricing) and the deployment's (`gateway pricing set`, one
 * registry item read through registry/deployment-pricing.ts), the same shape and checks for both.
 */
export const ModelPrices = z.record(z.string(), CustomPrice);
export type ModelPrices = z.infer<typeof ModelPrices>;

/**
 * Budget alerts (DESIGN §12; docs/webhooks.md, "Budget alerts"): percentages of a budget at which a signed event is
 * POSTed to `url`, once per window (or month) and threshold. Whole percentages 1–100, ascending, each once, at most
 * MAX_ALERT_THRESHOLDS per meter. The secret is stored as a vessel callback's is: encrypted with the provider-keys
 * cipher, bound to its owner (the project, or the developer), and never shown; the URL passed the outbound guard's
 * check when it was set (lambdas/outbound/guard.ts) and passes it again at every delivery.
 */
export const MAX_ALERT_THRESHOLDS = 10;
export const AlertThresholds = z
  .array(z.number().int('must be whole percentages').min(1, 'must be percentages from 1 to 100').max(100, 'must be percentages from 1 to 100'))
  .min(1, 'must name at least one percentage')
  .max(MAX_ALERT_THRESHOLDS, `may name at most ${MAX_ALERT_THRESHOLDS} percentages`)
  .refine((list) => list.every((p, i) => i === 0 || p > list[i - 1]!), { message: 'must be ascending, each percentage once' });
export type AlertThresholds = z.infer<typeof AlertThresholds>;

const AlertTarget = {
  url: z.string().min(1),
  /** Encrypted with the provider-keys cipher for the record's owner (registry.ts); never shown. */
  secretCiphertext: z.string().min(1),
};

/** A project's alerts on each user's window: percentages of the user's AI budget and of their compute budget. */
export const ProjectAlerts = z.object({ ai: AlertThresholds.optional(), compute: AlertThresholds.optional(), ...AlertTarget });
export type ProjectAlerts = z.infer<typeof ProjectAlerts>;

/** A developer's alerts on their month of compute: percentages of the plan (planSeconds + poolSeconds). */
export const DeveloperAlerts = z.object({ compute: AlertThresholds, ...AlertTarget });
export type DeveloperAlerts = z.infer<typeof DeveloperAlerts>;

export const Developer = z.object({
  developerId: Identifier,
  planSeconds: z.number().int().nonnegative(),
  poolSeconds: z.number().int().nonnegative(),
  createdAt: z.string(),
  /** `gateway developer set-alerts`: thresholds on the month's compute (DeveloperAlerts). */
  alerts: DeveloperAlerts.optional(),
});
export type Developer = z.infer<typeof Developer>;

export const Project = z.object({
  projectId: Identifier,
  developerId: Identifier,
  /** HMAC secret the project's tokens are signed with. */
  secret: z.string().min(32),
  /** Provider API keys, encrypted by the KeyCipher; never returned by any read path in clear. */
  providerKeys: z.partialRecord(ProjectProvider, z.string()).default({}),
  pricing: ModelPrices.default({}),
  createdAt: z.string(),
  secretRotatedAt: z.string().optional(),
  /**
   * The origins a page may call the gateway from with this project's tokens (`gateway project set-origins`; canonical
   * patterns of lambdas/origins/pattern.ts); absent: any origin (DESIGN §10).
   */
  origins: z.array(z.string()).optional(),
  /** `gateway project set-alerts`: thresholds on each user's budget window (ProjectAlerts). */
  alerts: ProjectAlerts.optional(),
  /**
   * Revocations (DESIGN §10, "Revocation"; lambdas/auth/revocations.ts), kept in the record every token verification
   * already reads from the cache, so checking them costs no store read: revoked token ids (`jti`) with their token's
   * `exp` (unix seconds; 0 when not given, kept until removed), blocked users, and per user the time (unix seconds)
   * before which (inclusive) every token issued is revoked. Bounded by MAX_REVOCATIONS.
   */
  revokedTokens: z.record(z.string(), z.number()).optional(),
  blockedUsers: z.record(z.string(), z.literal(true)).optional(),
  revokedBefore: z.record(z.string(), z.number()).optional(),
});
export type Project = z.infer<typeof Project>;

/**
 * Revoked tokens, blocked users and per-user cut-offs together, at most (the registry refuses more; docs/contract.md):
 * the record is read on every token verification (cached), so it must stay small.
 */
export const MAX_REVOCATIONS = 1_000;

/** How many entries a project's revocations hold (what MAX_REVOCATIONS bounds). */
export function revocationCount(project: Pick<Project, 'revokedTokens' | 'blockedUsers' | 'revokedBefore'>): number {
  return Object.keys(project.revokedTokens ?? {}).length + Object.keys(project.blockedUsers ?? {}).length + Object.keys(project.revokedBefore ?? {}).length;
}
