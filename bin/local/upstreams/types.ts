/**
 * Shared types for the deterministic simulated upstream servers
 * (see ./anthropic.ts, ./openai.ts and the directive language in ./script.ts).
 */

/** One request as received by a simulated upstream (recorded before any reply is sent). */
export interface RecordedRequest {
  method: string;
  /** URL pathname without the query string, e.g. `/v1/messages`. */
  path: string;
  /** The raw request target including any query string, e.g. `/v1/messages?beta=true`. */
  url: string;
  /** Request headers with lowercased names (repeated headers are joined with `, `). */
  headers: Record<string, string>;
  /** The parsed JSON body, or `undefined` when the body was empty or not valid JSON. */
  body: unknown;
  /** Set when the exchange ends: `completed` if the reply was sent whole, `client_closed` if the caller went away first. */
  outcome?: 'completed' | 'client_closed';
}

export interface SimulatedUpstream {
  /** Base URL without a trailing slash, e.g. `http://127.0.0.1:41234`. */
  url: string;
  port: number;
  /**
   * The most recent requests, in arrival order: at most REQUEST_HISTORY_LIMIT (./script.ts), the oldest dropped
   * first. Tests may clear it with `requests.length = 0`.
   */
  requests: RecordedRequest[];
  /** How many requests were received since the server started, all of them (not reset by clearing `requests`). */
  readonly received: number;
  /** Stops listening and destroys every open socket (including hung / streaming requests). */
  close(): Promise<void>;
}

export interface StartUpstreamOptions {
  /** Port to listen on; default 0 (an ephemeral port). */
  port?: number;
  /** Interface to bind; default `127.0.0.1`. */
  host?: string;
}
