import type { Project } from '../registry/model.ts';
import type { Refusal } from '../refusals/refusal.ts';
import type { Caller } from './claims.ts';

/**
 * Revocation without rotating the project's secret (DESIGN §10, "Revocation"; docs/contract.md): one token by its
 * `jti` (`gateway token revoke`), every token of a user issued up to a moment (`gateway user revoke-tokens`), or a
 * user altogether (`gateway user block`). The revocations live in the project record that every token verification
 * already reads from the per-instance cache, so checking them costs no store read; they take effect within
 * SECRET_CACHE_SECONDS, the same promise as a secret rotation. A revoked `jti` is kept only until its token's `exp`
 * (the CLI drops the expired ones), which bounds the record (MAX_REVOCATIONS, registry/model.ts).
 *
 * Checked wherever a caller acts: each request (auth/authenticate.ts), a vessel when it is due (vessels/execute.ts),
 * each /ws frame of an open connection (sessions/socket.ts).
 */

type Revocations = Pick<Project, 'revokedTokens' | 'blockedUsers' | 'revokedBefore'>;

/** Why this caller's token may no longer be used, or undefined. */
export function revocationRefusal(caller: Pick<Caller, 'userId' | 'tokenId' | 'issuedAt'>, project: Revocations | undefined): Refusal | undefined {
  if (!project) return undefined;
  if (project.blockedUsers && Object.hasOwn(project.blockedUsers, caller.userId)) {
    return revoked(`Token revoked: user ${caller.userId} is blocked by the project owner`);
  }
  if (caller.tokenId !== undefined && project.revokedTokens && Object.hasOwn(project.revokedTokens, caller.tokenId)) {
    return revoked('Token revoked');
  }
  const before = project.revokedBefore && Object.hasOwn(project.revokedBefore, caller.userId) ? project.revokedBefore[caller.userId] : undefined;
  // A token without `iat` cannot show it was issued after the cut-off: revoked with the others.
  if (before !== undefined && (caller.issuedAt === undefined || caller.issuedAt <= before)) {
    return revoked(`Token revoked: tokens of user ${caller.userId} issued before ${new Date((before + 1) * 1000).toISOString()} are revoked`);
  }
  return undefined;
}

function revoked(message: string): Refusal {
  return { kind: 'token', code: 'token_revoked', message };
}
