/**
 * The providers' ids, the one list every other spelling derives from: the `ProviderId` type a route names, the label
 * map, the registry of providers (providers/index.ts, a Record over these ids, so a new id without a provider does not
 * compile) and the project record's provider-key enum (registry/model.ts). It lives with routing, the lowest folder
 * that names providers, so that the registry's schema can read it without the providers' code (SDKs, the translation,
 * the project key they decrypt through the registry): no imports.
 */
export const PROVIDER_IDS = ['anthropic', 'openai', 'openrouter'] as const;

export type ProviderId = (typeof PROVIDER_IDS)[number];

/** How messages name each provider: the one spelling of each label, which every message reads. */
export const PROVIDER_LABELS: Record<ProviderId, string> = { anthropic: 'Anthropic', openai: 'OpenAI', openrouter: 'OpenRouter' };

/**
 * The providers whose key each project holds (set with "gateway project set-provider-key"); the gateway calls the
 * others with its own service key.
 */
export const PROJECT_KEY_PROVIDERS = ['openai', 'openrouter'] as const satisfies readonly ProviderId[];

export type ProjectKeyProviderId = (typeof PROJECT_KEY_PROVIDERS)[number];
