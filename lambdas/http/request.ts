import { Refused } from '../refusals/refusal.ts';

/**
 * Builds the web Request both AWS adapters hand to the core. The URL's origin is fixed: routing must depend on the
 * path alone, and a client's Host header (`a b`, `[::1`, `x@y`, `evil/x`) must neither break the URL nor leak into
 * the path. The Host header itself is kept among the headers. Methods the Fetch standard cannot carry (CONNECT, TRACE,
 * TRACK) are refused as 405 here, in the app's envelope.
 */
const ORIGIN = 'https://gateway.invalid';
const FORBIDDEN_METHODS = new Set(['CONNECT', 'TRACE', 'TRACK']);

export interface RawRequest {
  method: string;
  path: string;
  /** Without the leading `?`. */
  query?: string;
  headers: Headers;
  body?: string | Buffer;
}

export function buildRequest(raw: RawRequest): Request {
  const method = raw.method.toUpperCase();
  if (FORBIDDEN_METHODS.has(method) || !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(raw.method)) {
    throw new Refused({ kind: 'method_not_allowed', message: `The ${raw.method.slice(0, 32)} method is not supported`, allow: [] });
  }
  const path = raw.path.startsWith('/') ? raw.path : `/${raw.path}`;
  let url: URL;
  try {
    url = new URL(`${ORIGIN}${path.replace(/[?#]/g, encodeURIComponent)}${raw.query ? `?${raw.query}` : ''}`);
  } catch {
    throw new Refused({ kind: 'invalid_request', message: 'The request path is not a valid URL path' });
  }
  const hasBody = raw.body !== undefined && raw.body !== null && method !== 'GET' && method !== 'HEAD';
  // A string body goes in as bytes: given a string, Request would invent `content-type: text/plain;charset=UTF-8`
  // when the client sent none, and the routes that require JSON (DESIGN §10) must see what the client really sent.
  const body = typeof raw.body === 'string' ? new TextEncoder().encode(raw.body) : raw.body;
  return new Request(url, { method: raw.method, headers: raw.headers, body: hasBody ? (body as BodyInit) : undefined });
}

/** Copies event headers into a Headers object, skipping values the Fetch standard cannot hold instead of failing. */
export function headersFrom(entries: Record<string, string | undefined>): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(entries)) {
    if (value === undefined) continue;
    try {
      headers.set(name, value);
    } catch {
      // A header name or value Fetch refuses (control characters): not one the gateway reads, so it is dropped.
    }
  }
  return headers;
}
