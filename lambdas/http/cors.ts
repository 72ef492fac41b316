import { deploymentAllows } from '../auth/origins.ts';

/**
 * CORS, answered by the gateway itself on every route of both URLs (DESIGN §10; docs/browser.md). The function
 * decides every header — the function URLs and API Gateway carry no CORS configuration of their own (lib/constructs),
 * since AWS would otherwise answer preflights without the deployment's origins and overwrite these headers.
 *
 * - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is answered here, without a token: the
 *   methods of the route, the request headers it asks for, cached for two hours.
 * - Every other response to a request with an allowed `Origin` — refusals, 5xx and SSE streams included — names the
 *   origin and exposes the gateway's headers, so a page can read an error, its `request-id`, `retry-after` and what
 *   it cost. Tokens travel in headers or bodies, never cookies: no `Access-Control-Allow-Credentials`.
 *
 * Whether the token's project allows the origin is decided later, with the token (auth/origins.ts): that refusal
 * is a 403 a page can read, so it carries these headers too.
 */

/** Chromium caps a preflight's cache at 2 hours (Firefox at 24): the longest that every browser honours. */
const MAX_AGE_SECONDS = 7200;

/**
 * Headers a page's script may read beyond the CORS-safelisted ones. The gateway's own, named even when a response
 * lacks them (one list to read in docs/browser.md); every other header of the actual response is exposed too, so an
 * upstream's passthrough headers (`anthropic-ratelimit-*`…) reach the page as they reach a server.
 */
const EXPOSED = [
  'request-id',
  'retry-after',
  'x-should-retry',
  'idempotent-replayed',
  'x-session-id',
  'x-gateway-cost-microdollars',
  'x-gateway-budget-remaining-microdollars',
  'x-gateway-max-tokens',
  'x-gateway-token-count',
];
/** Readable without being exposed (Fetch standard, "CORS-safelisted response-header name"), or never to be exposed. */
const NOT_EXPOSED = new Set([
  'cache-control',
  'content-language',
  'content-length',
  'content-type',
  'expires',
  'last-modified',
  'pragma',
  'set-cookie',
  'vary',
]);

/** A header-name list as `Access-Control-Request-Headers` carries it: RFC 9110 tokens, comma-separated. */
const HEADER_LIST = /^[!#$%&'*+.^_`|~0-9a-z-]+(\s*,\s*[!#$%&'*+.^_`|~0-9a-z-]+)*$/i;
const MAX_REQUEST_HEADERS_LENGTH = 2048;

/** Whether the request is a CORS preflight (Fetch standard: OPTIONS with Origin and Access-Control-Request-Method). */
export function isPreflight(req: Request): boolean {
  return req.method === 'OPTIONS' && req.headers.has('origin') && req.headers.has('access-control-request-method');
}

/**
 * The 204 answer to a preflight for a route with these methods. The requested headers are allowed as asked (the
 * SDKs send `x-api-key`, `anthropic-*`, `x-stainless-*`, `idempotency-key`…, and the proxy passes unknown headers
 * through, so any list could be legitimate); an ill-formed list is not echoed.
 */
export function preflightResponse(req: Request, methods: readonly string[]): Response {
  const headers = new Headers({
    'access-control-allow-methods': [...methods, 'OPTIONS'].join(', '),
    'access-control-max-age': String(MAX_AGE_SECONDS),
  });
  const asked = req.headers.get('access-control-request-headers')?.trim();
  if (asked && asked.length <= MAX_REQUEST_HEADERS_LENGTH && HEADER_LIST.test(asked)) headers.set('access-control-allow-headers', asked);
  return new Response(null, { status: 204, headers });
}

/**
 * `headers` of a response to `req`, with the CORS headers a page needs to read it — only when the request has an
 * `Origin` the deployment serves (CORS_ORIGINS). `Vary: Origin` always, as the answer depends on it.
 */
export function addCorsHeaders(req: Request, headers: Headers): void {
  headers.append('vary', 'Origin');
  const origin = req.headers.get('origin');
  if (origin === null || !deploymentAllows(origin)) return;
  headers.set('access-control-allow-origin', origin);
  if (isPreflight(req)) return;
  const exposed = new Set(EXPOSED);
  for (const name of headers.keys()) if (!NOT_EXPOSED.has(name) && !name.startsWith('access-control-')) exposed.add(name);
  headers.set('access-control-expose-headers', [...exposed].join(', '));
}
