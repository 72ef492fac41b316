import * as z from 'zod';
import { MAX_TOKEN_ORIGINS, originList } from '../origins/pattern.ts';
import { Identifier } from '../registry/model.ts';

export const WINDOWS = ['hour', 'day', 'week', 'month', 'lifetime'] as const;
export const WindowKind = z.enum(WINDOWS);
export type WindowKind = z.infer<typeof WindowKind>;

/** The budget a project owner grants a user, carried inside the token (docs/contract.md, "Tokens"). */
export const BudgetClaim = z.object({
  ai: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  compute: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER),
  window: WindowKind,
});
export type BudgetClaim = z.infer<typeof BudgetClaim>;

export const GatewayClaims = z.object({
  iss: Identifier,
  sub: Identifier,
  exp: z.number().int(),
  iat: z.number().int().optional(),
  nbf: z.number().int().optional(),
  /** The token's id, by which one token can be revoked (`gateway token revoke`; auth/revocations.ts). */
  jti: z.string().min(1).max(128).optional(),
  budget: BudgetClaim,
  /** The origins a page may use this token from, within its project's (DESIGN §10; lambdas/origins/pattern.ts). */
  origins: originList(MAX_TOKEN_ORIGINS).optional(),
});
export type GatewayClaims = z.infer<typeof GatewayClaims>;

/** Who is calling and what they may spend: the verified content of a token. */
export interface Caller {
  projectId: string;
  userId: string;
  budget: BudgetClaim;
  expiresAt: number;
  /** `jti` and `iat` (unix seconds), for revocation (auth/revocations.ts). */
  tokenId?: string;
  issuedAt?: number;
  /** The token's own `origins` claim, canonical: narrows the project's origins (lambdas/auth/origins.ts). */
  origins?: readonly string[];
}
