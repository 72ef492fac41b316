import { catalogModels as providerCatalog } from '../pricing/catalog.ts';
import { CATALOG_PROVIDERS } from '../pricing/catalog-providers.ts';
import { cachedDeploymentPricing } from '../registry/deployment-pricing.ts';
import { cachedProject } from '../registry/project-cache.ts';
import { routeModel, type Route } from '../routing/route.ts';
import { unknownIssuer } from '../auth/authenticate.ts';
import { servable } from '../metering/model-access.ts';
import { Refused } from '../refusals/refusal.ts';
import { proxyCaller } from './caller.ts';

/**
 * GET /v1/models for both SDKs (DESIGN §11): exactly the models `POST /v1/messages` would serve and price for the
 * caller's project (model-access.ts decides both) — the project's custom-priced models, then the deployment-wide
 * priced ones (`gateway pricing set`), then the catalog's Anthropic, OpenAI and OpenRouter models. Each entry and the
 * list carry both vocabularies: Anthropic's (`type`, `display_name`, `created_at`; `has_more`, `first_id`, `last_id`,
 * with its cursor paging) and OpenAI's (`object`, `created`, `owned_by`; `object: "list"`). OpenAI's list has no
 * paging — its SDK reads one page — so a request without Anthropic's `anthropic-version` header (which every Anthropic
 * SDK sends, and Anthropic's own API requires) and without paging parameters gets every model at once.
 */
export interface ModelInfo {
  type: 'model';
  object: 'model';
  id: string;
  display_name: string;
  created_at: string;
  /** Unix seconds (OpenAI's `created`): the gateway knows no release dates, so 0, as `created_at` is the epoch. */
  created: number;
  /** The provider that serves the model (OpenAI's `owned_by`): anthropic, openai or openrouter. */
  owned_by: Route['provider'];
}

const EPOCH = '1970-01-01T00:00:00Z';
let catalog: ModelInfo[] | undefined;

function modelInfo(id: string, name: string): ModelInfo {
  return { type: 'model', object: 'model', id, display_name: name, created_at: EPOCH, created: 0, owned_by: routeModel(id).provider };
}

/** Catalog entries under the name a client must send: an OpenRouter id that would route elsewhere gets `or:`. */
function catalogModels(): ModelInfo[] {
  catalog ??= CATALOG_PROVIDERS.flatMap((providerId) =>
    providerCatalog(providerId).map((m) => {
      const id = providerId === 'openrouter' && routeModel(m.id).provider !== 'openrouter' ? `or:${m.id}` : m.id;
      return modelInfo(id, m.name ?? m.id);
    }),
  );
  return catalog;
}

async function modelsFor(req: Request): Promise<ModelInfo[]> {
  const caller = await proxyCaller(req);
  const [project, deployment] = await Promise.all([cachedProject(caller.projectId), cachedDeploymentPricing()]);
  if (!project) throw new Refused(unknownIssuer());
  const custom = [...Object.keys(project.pricing), ...Object.keys(deployment)].map((id) => modelInfo(id, id));
  const seen = new Set<string>();
  return [...custom, ...catalogModels()].filter((m) => !seen.has(m.id) && seen.add(m.id) && servable(project, deployment, m.id));
}

export async function listModels(req: Request): Promise<Response> {
  const models = await modelsFor(req);
  const params = new URL(req.url).searchParams;
  const paged = req.headers.has('anthropic-version') || params.has('limit') || params.has('after_id') || params.has('before_id');
  if (!paged) return Response.json(modelList(models, false));
  const limit = Number(params.get('limit') ?? 20);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000)
    throw new Refused({ kind: 'invalid_request', message: 'limit must be an integer between 1 and 1000' });
  const after = params.get('after_id');
  const before = params.get('before_id');
  let start = 0;
  let end = models.length;
  if (after) start = models.findIndex((m) => m.id === after) + 1;
  if (before)
    end = Math.max(
      0,
      models.findIndex((m) => m.id === before),
    );
  let page = models.slice(start, end);
  const hasMore = page.length > limit;
  page = before ? page.slice(-limit) : page.slice(0, limit);
  return Response.json(modelList(page, hasMore));
}

function modelList(page: ModelInfo[], hasMore: boolean) {
  return { object: 'list' as const, data: page, has_more: hasMore, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null };
}

export async function getModel(req: Request, id: string): Promise<Response> {
  const found = (await modelsFor(req)).find((m) => m.id === id);
  if (!found) throw new Refused({ kind: 'not_found', message: `model: ${id}` });
  return Response.json(found);
}
