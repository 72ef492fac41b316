import { HTTP_TOOL_TIMEOUT_MS } from '../../config/timing.ts';
import { outboundFetch, readCapped } from '../../outbound/fetch.ts';
import { toolHeaders } from './headers.ts';
import { DEFAULT_MAX_RESULT_BYTES, describeFailure, withTruncation } from './outcome.ts';
import type { AgentTool, ToolOutcome } from './types.ts';

/**
 * A tool the caller runs behind its own HTTPS endpoint: the gateway POSTs the model's input there as JSON and hands
 * the response text back as the tool result. The endpoint is an arbitrary URL chosen by the caller, so every call goes
 * through the outbound guard (no private addresses, no redirects followed), and every failure becomes an `is_error`
 * result the model can react to, never an exception that ends the run.
 */

export interface HttpToolSpec {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
  url: string;
  /** Sent with every call (typically the endpoint's credentials); never echoed in a failure text. */
  headers?: Record<string, string>;
}

/** So the endpoint's operator can tell the gateway's calls apart (and allow-list them). */
export const TOOL_USER_AGENT = 'prompt-gateway-agent/1 (server-side tool call)';

export function httpTool(spec: HttpToolSpec, opts: { timeoutMs?: number; maxResultBytes?: number } = {}): AgentTool {
  const timeoutMs = opts.timeoutMs ?? HTTP_TOOL_TIMEOUT_MS;
  const maxBytes = opts.maxResultBytes ?? DEFAULT_MAX_RESULT_BYTES;
  const secrets = Object.values(spec.headers ?? {});
  return {
    name: spec.name,
    ...(spec.description !== undefined && { description: spec.description }),
    input_schema: spec.input_schema,
    async run(input: unknown, signal: AbortSignal): Promise<ToolOutcome> {
      // Our own deadline, so a time-out is told apart from the caller's abort whatever error the fetch raises.
      const deadline = AbortSignal.timeout(timeoutMs);
      const callSignal = AbortSignal.any([signal, deadline]);
      try {
        const headers = toolHeaders(spec.headers);
        headers.set('content-type', 'application/json');
        if (!headers.has('user-agent')) headers.set('user-agent', TOOL_USER_AGENT);
        const res = await outboundFetch(
          spec.url,
          { method: 'POST', headers, body: JSON.stringify(input ?? {}), redirect: 'manual' },
          { timeoutMs, signal: callSignal },
        );
        // The same signal ends the body read: the time-out covers the whole exchange, not just the headers.
        const body = await readCapped(res, maxBytes);
        const text = withTruncation(body.text, body.truncated);
        // 3xx counts as a failure: redirects are not followed (the target would escape the guard's check of the URL).
        if (!res.ok) return { content: `HTTP ${res.status}: ${text}`, isError: true };
        return { content: text, isError: false };
      } catch (err) {
        return {
          content: describeFailure(err, { timeoutMs, timedOut: deadline.aborted, aborted: signal.aborted, secrets }),
          isError: true,
        };
      }
    },
  };
}
