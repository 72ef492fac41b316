/** The catalog providers the gateway routes to and prices (lambdas/routing/route.ts), in GET /v1/models order. */
export const CATALOG_PROVIDERS = ['anthropic', 'openai', 'openrouter'] as const;

export type PriceProvider = (typeof CATALOG_PROVIDERS)[number];
