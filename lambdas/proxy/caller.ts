import type { Caller } from '../auth/claims.ts';
import { authenticate } from '../auth/authenticate.ts';
import { bearerToken } from '../http/router.ts';
import { Refused } from '../refusals/refusal.ts';

/**
 * The proxy takes the token where an Anthropic key goes: `x-api-key`, or `Authorization: Bearer` (Claude Code, SDK).
 * Both at once must carry the same token: a client sending two different credentials has a configuration mistake
 * that silently picking one would hide (docs/contract.md, "Where it goes").
 */
export async function proxyCaller(req: Request): Promise<Caller> {
  const apiKey = req.headers.get('x-api-key')?.trim() || undefined;
  const bearer = bearerToken(req);
  if (apiKey && req.headers.get('authorization') !== null && bearer !== apiKey) {
    throw new Refused({
      kind: 'token',
      code: 'token_invalid',
      message: 'x-api-key and Authorization carry different credentials; send the token in one of them',
    });
  }
  return authenticate(apiKey ?? bearer, {
    origin: req.headers.get('origin'),
    missingHint: ': send it as x-api-key or "Authorization: Bearer <token>"',
  });
}
