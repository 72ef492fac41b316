import { priceFor, type ModelPricing } from '../pricing/prices.ts';
import { PROVIDERS } from '../providers/index.ts';
import type { CustomPrice, ModelPrices, Project } from '../registry/model.ts';
import { routeModel, type Route } from '../routing/route.ts';

/**
 * Whether a project can be served a model name, decided in one place for both `POST /v1/messages` and
 * `GET /v1/models` (so every listed id is one a request is accepted for): the project holds the key of the provider
 * the name routes to, where one is needed, and the model has a price.
 */

/** A custom price for a name, only when set for that very name (never an inherited property such as `constructor`). */
const own = (prices: ModelPrices, name: string): CustomPrice | undefined => (Object.hasOwn(prices, name) ? prices[name] : undefined);

/**
 * The price of a model for a project, first found of: the project's custom price for the name the client used, then
 * for the upstream name it routes to; the deployment-wide price (`gateway pricing set`; `deployment`, as read through
 * registry/deployment-pricing.ts) for the name used, then for the upstream name; the bundled catalog.
 */
export function pricingFor(project: Project, deployment: ModelPrices, model: string, route: Route = routeModel(model)): ModelPricing | undefined {
  const upstream = route.upstreamModel;
  // Every custom price the project can use, its own winning: an advisor's or a fallback's model named in a request is
  // priced from it too (ModelPricing.other).
  const custom = customPrices(project.pricing, deployment);
  // The name priced: the first of these found — the merged map holds that very price under it (the project's wins).
  for (const prices of [project.pricing, deployment]) {
    for (const name of [model, upstream]) if (own(prices, name)) return priceFor(name, route.provider, custom);
  }
  return priceFor(upstream, route.provider, custom);
}

/**
 * The project's and the deployment's custom prices as one map without a prototype (the project's win), merged once
 * per pair of cached records rather than per request: both are kept by their caches for the cache time.
 */
const merged = new WeakMap<ModelPrices, { deployment: ModelPrices; custom: ModelPrices }>();
function customPrices(project: ModelPrices, deployment: ModelPrices): ModelPrices {
  const hit = merged.get(project);
  if (hit?.deployment === deployment) return hit.custom;
  const none = Object.keys(project).length === 0 && Object.keys(deployment).length === 0;
  const custom = none ? NO_CUSTOM : Object.assign(Object.create(null) as ModelPrices, deployment, project);
  merged.set(project, { deployment, custom });
  return custom;
}

/** No custom prices, without a prototype: priceFor's own lookup in it then never finds `constructor` and the like. */
const NO_CUSTOM: ModelPrices = Object.freeze(Object.create(null) as ModelPrices);

/** Whether the project holds the key the route's provider is called with (the service's own key needs none). */
export function hasProviderKey(project: Project, route: Route): boolean {
  return !PROVIDERS[route.provider].usesProjectKey || Boolean(project.providerKeys[route.provider as keyof Project['providerKeys']]);
}

export function servable(project: Project, deployment: ModelPrices, model: string): boolean {
  const route = routeModel(model);
  return hasProviderKey(project, route) && pricingFor(project, deployment, model, route) !== undefined;
}
