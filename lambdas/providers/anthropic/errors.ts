import { upstreamFailure } from '../errors.ts';
import type { ProviderResult } from '../types.ts';

/** An Anthropic error response, mapped by the gateway's pass-through policy (docs/api.md, "Upstream errors"). */
export async function errorResult(res: Response): Promise<Extract<ProviderResult, { kind: 'error' }>> {
  const text = await res.text().catch(() => '');
  let message: string | undefined;
  try {
    message = (JSON.parse(text) as { error?: { message?: string } }).error?.message;
  } catch {
    message = text.slice(0, 200) || undefined;
  }
  return { kind: 'error', ...upstreamFailure('anthropic', res.status, message) };
}
