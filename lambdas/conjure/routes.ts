/**
 * The conjure REST routes, declared once: API Gateway gets one method per entry (lib/constructs/api.ts, through the
 * function manifest), the local runtime routes the same list to the conjure handler, and the conjure router serves
 * them. Adding an endpoint is one line here.
 *
 * Paths are API Gateway resource paths: literal segments, or `{name}` for a path parameter. Plain data, no imports.
 */
export interface RestRoute {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  readonly path: string;
}

export const CONJURE_ROUTES = [
  { method: 'GET', path: '/usage' },
  { method: 'POST', path: '/incubate' },
  { method: 'POST', path: '/incubate/batch' },
  { method: 'GET', path: '/incubate/vessel/{vesselId}' },
  { method: 'POST', path: '/incubate/vessel/{vesselId}/cancel' },
  { method: 'GET', path: '/openapi.json' },
] as const satisfies readonly RestRoute[];

export type ConjureRoute = (typeof CONJURE_ROUTES)[number];
