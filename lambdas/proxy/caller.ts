import type { Caller } from '../auth/claims.ts';
import { TokenError, verifyToken } from '../auth/tokens.ts';
import { bearerToken } from '../http/router.ts';
import { projectSecret } from '../registry/project-cache.ts';
import { errorResponse } from './errors.ts';

/** The proxy takes the token where an Anthropic key goes: `x-api-key`, or `Authorization: Bearer` (Claude Code, SDK). */
export async function authenticate(req: Request): Promise<{ caller: Caller } | { response: Response }> {
  const token = req.headers.get('x-api-key')?.trim() || bearerToken(req);
  try {
    return { caller: await verifyToken(token, projectSecret) };
  } catch (err) {
    if (err instanceof TokenError) return { response: errorResponse(401, 'authentication_error', err.message) };
    throw err;
  }
}
