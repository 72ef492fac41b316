import { priceFor, type ModelPricing } from '../pricing/prices.ts';
import { PROVIDERS } from '../providers/index.ts';
import type { Project } from '../registry/model.ts';
import { routeModel, type Route } from '../routing/route.ts';

/**
 * Whether a project can be served a model name, decided in one place for both `POST /v1/messages` and
 * `GET /v1/models` (so every listed id is one a request is accepted for): the project holds the key of the provider
 * the name routes to, where one is needed, and the model has a price.
 */
export function pricingFor(project: Project, model: string, route: Route = routeModel(model)): ModelPricing | undefined {
  // The project's custom price for the name the client used wins, then for the upstream name, then the catalog.
  const custom = project.pricing[model];
  if (custom) return priceFor(model, route.provider, { [model]: custom });
  return priceFor(route.upstreamModel, route.provider, project.pricing);
}

/** Whether the project holds the key the route's provider is called with (the service's own key needs none). */
export function hasProviderKey(project: Project, route: Route): boolean {
  return !PROVIDERS[route.provider].usesProjectKey || Boolean(project.providerKeys[route.provider as keyof Project['providerKeys']]);
}

export function servable(project: Project, model: string): boolean {
  const route = routeModel(model);
  return hasProviderKey(project, route) && pricingFor(project, model, route) !== undefined;
}
