import * as z from 'zod';

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

/**
 * Project and user ids (docs/contract.md, "Identifiers"). They become DynamoDB keys joined by '#' and are shown to
 * people, so an id is 1–128 characters (code points) in Unicode NFC and none of them is:
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

export const GatewayClaims = z.object({
  iss: Identifier,
  sub: Identifier,
  exp: z.number().int(),
  iat: z.number().int().optional(),
  nbf: z.number().int().optional(),
  budget: BudgetClaim,
});
export type GatewayClaims = z.infer<typeof GatewayClaims>;

/** Who is calling and what they may spend: the verified content of a token. */
export interface Caller {
  projectId: string;
  userId: string;
  budget: BudgetClaim;
  expiresAt: number;
}
