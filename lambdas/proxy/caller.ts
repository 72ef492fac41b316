import type { Caller } from '../auth/claims.ts';
import { TokenError, verifyToken } from '../auth/tokens.ts';
import { ClientError } from '../http/errors.ts';
import { bearerToken } from '../http/router.ts';
import { accessRecord } from '../observability/access-log.ts';
import { projectSecret } from '../registry/project-cache.ts';

/**
 * The proxy takes the token where an Anthropic key goes: `x-api-key`, or `Authorization: Bearer` (Claude Code, SDK).
 * Both at once must carry the same token: a client sending two different credentials has a configuration mistake
 * that silently picking one would hide (docs/contract.md, "Where it goes"). Throws a ClientError (401) on refusal.
 */
export async function authenticate(req: Request): Promise<Caller> {
  const apiKey = req.headers.get('x-api-key')?.trim() || undefined;
  const authorization = req.headers.get('authorization');
  const bearer = bearerToken(req);
  if (apiKey && authorization !== null && bearer !== apiKey) {
    throw new ClientError(401, 'authentication', 'x-api-key and Authorization carry different credentials; send the token in one of them');
  }
  try {
    const caller = await verifyToken(apiKey ?? bearer, projectSecret);
    Object.assign(accessRecord(), { project: caller.projectId, user: caller.userId });
    return caller;
  } catch (err) {
    if (err instanceof TokenError) {
      const hint = err.code === 'token_missing' ? ': send it as x-api-key or "Authorization: Bearer <token>"' : '';
      throw new ClientError(401, 'authentication', `${err.message}${hint}`);
    }
    throw err;
  }
}
