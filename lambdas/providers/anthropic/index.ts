import type Anthropic from '@anthropic-ai/sdk';
import { env } from '../../config/env.ts';
import { accessRecord, timePhase } from '../../observability/access-log.ts';
import { withIdleTimeout } from '../../streaming/idle-timeout.ts';
import { upstreamUnreachable } from '../errors.ts';
import type { CountResult, Provider, ProviderRequest, ProviderResult } from '../types.ts';
import { endpoint, upstreamHeaders } from './api.ts';
import { anthropicApiKey } from './credentials.ts';
import { errorResult } from './errors.ts';

/**
 * Anthropic is the gateway's own format, so nothing is translated: the client's bytes go up unchanged and the
 * upstream's bytes (JSON or SSE, event lines included) come back unchanged, chunk by chunk.
 */
type ErrorResult = Extract<ProviderResult, { kind: 'error' }>;

/** POSTs the client's bytes to `path`: the upstream's answer when it is a 2xx, else the error it maps to. */
async function call(req: ProviderRequest, path: string): Promise<Response | ErrorResult> {
  let res: Response;
  const started = performance.now();
  try {
    res = await fetch(endpoint(req, path), {
      method: 'POST',
      headers: upstreamHeaders(req),
      body: req.rawBody,
      signal: AbortSignal.any([req.signal, AbortSignal.timeout(req.timeoutMs)]),
    });
  } catch (err) {
    return { kind: 'error', ...upstreamUnreachable('anthropic', err, req.timeoutMs) };
  }
  timePhase(accessRecord(), 'connect', started);
  return res.ok ? res : errorResult(res);
}

export const anthropicProvider: Provider = {
  id: 'anthropic',
  baseUrl: () => env().ANTHROPIC_BASE_URL,
  // The gateway's own service key, whatever the project: Anthropic usage is billed to the service.
  credential: () => anthropicApiKey(),
  usesProjectKey: false,

  async send(req): Promise<ProviderResult> {
    const res = await call(req, '/v1/messages');
    if (!(res instanceof Response)) return res;
    if (req.body.stream === true && res.body && (res.headers.get('content-type') ?? '').includes('text/event-stream')) {
      return { kind: 'stream', body: withIdleTimeout(res.body, req.timeoutMs) };
    }
    try {
      const started = performance.now();
      const message = (await res.json()) as Anthropic.Message;
      // For a JSON answer the whole body: it is what the gateway waits for before answering.
      timePhase(accessRecord(), 'firstByte', started);
      return { kind: 'message', message };
    } catch (err) {
      return { kind: 'error', ...upstreamUnreachable('anthropic', err, req.timeoutMs) };
    }
  },

  async countTokens(req): Promise<CountResult> {
    const res = await call(req, '/v1/messages/count_tokens');
    if (!(res instanceof Response)) return res;
    const body = (await res.json()) as { input_tokens: number };
    return { kind: 'count', input_tokens: body.input_tokens, estimated: false };
  },
};
