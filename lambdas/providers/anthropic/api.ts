import type { ProviderRequest } from '../types.ts';

export const DEFAULT_ANTHROPIC_VERSION = '2023-06-01';

/** Headers for the upstream call: the service key, and the client's version and beta flags as they were sent. */
export function upstreamHeaders(req: ProviderRequest): Record<string, string> {
  return {
    'content-type': 'application/json',
    'x-api-key': req.apiKey,
    'anthropic-version': req.headers.anthropicVersion ?? DEFAULT_ANTHROPIC_VERSION,
    ...(req.headers.anthropicBeta ? { 'anthropic-beta': req.headers.anthropicBeta } : {}),
  };
}

export function endpoint(req: ProviderRequest, path: string): string {
  return `${req.baseUrl.replace(/\/+$/, '')}${path}`;
}
