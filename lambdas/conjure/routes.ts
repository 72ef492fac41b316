/**
 * The conjure REST routes, declared once: API Gateway gets one method per entry (lib/constructs/api.ts, through the
 * function manifest), the local runtime routes the same list to the conjure handler, and the conjure router serves
 * them. Adding an endpoint is one line here; the later ones are: POST /incubate, POST /incubate/batch,
 * GET /incubate/vessel/{id}, POST /incubate/vessel/{id}/cancel.
 *
 * Paths are API Gateway resource paths: literal segments, or `{name}` for a path parameter. Plain data, no imports.
 */
export interface RestRoute {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
  readonly path: string;
}

export const CONJURE_ROUTES = [{ method: 'GET', path: '/usage' }] as const satisfies readonly RestRoute[];

export type ConjureRoute = (typeof CONJURE_ROUTES)[number];
