import { findProvider } from '@pydantic/genai-prices';
import { priceFor } from '../pricing/prices.ts';
import { cachedProject } from '../registry/project-cache.ts';
import { authenticate } from './caller.ts';
import { errorResponse } from './errors.ts';

/**
 * GET /v1/models in Anthropic's list shape: the models this gateway can price for the caller's project — the
 * catalog's Anthropic and OpenAI models plus the project's custom-priced ones — with Anthropic's cursor paging.
 */
interface ModelInfo {
  type: 'model';
  id: string;
  display_name: string;
  created_at: string;
}

const EPOCH = '1970-01-01T00:00:00Z';
let catalog: ModelInfo[] | undefined;

function catalogModels(): ModelInfo[] {
  catalog ??= (['anthropic', 'openai'] as const).flatMap((providerId) =>
    (findProvider({ providerId })?.models ?? [])
      // The same resolution the proxy charges with, so every listed model is one a request can be metered for.
      .filter((m) => priceFor(m.id, providerId) !== undefined)
      .map((m) => ({ type: 'model' as const, id: m.id, display_name: m.name ?? m.id, created_at: EPOCH })),
  );
  return catalog;
}

async function modelsFor(req: Request): Promise<ModelInfo[] | Response> {
  const auth = await authenticate(req);
  if ('response' in auth) return auth.response;
  const project = await cachedProject(auth.caller.projectId);
  const custom = Object.keys(project?.pricing ?? {}).map((id) => ({ type: 'model' as const, id, display_name: id, created_at: EPOCH }));
  const seen = new Set<string>();
  return [...custom, ...catalogModels()].filter((m) => !seen.has(m.id) && seen.add(m.id));
}

export async function listModels(req: Request): Promise<Response> {
  const models = await modelsFor(req);
  if (models instanceof Response) return models;
  const params = new URL(req.url).searchParams;
  const limit = Number(params.get('limit') ?? 20);
  if (!Number.isInteger(limit) || limit < 1 || limit > 1000) return errorResponse(400, 'invalid_request_error', 'limit must be an integer between 1 and 1000');
  const after = params.get('after_id');
  const before = params.get('before_id');
  let start = 0;
  let end = models.length;
  if (after) start = models.findIndex((m) => m.id === after) + 1;
  if (before) end = Math.max(0, models.findIndex((m) => m.id === before));
  let page = models.slice(start, end);
  const hasMore = page.length > limit;
  page = before ? page.slice(-limit) : page.slice(0, limit);
  return Response.json({ data: page, has_more: hasMore, first_id: page[0]?.id ?? null, last_id: page.at(-1)?.id ?? null });
}

export async function getModel(req: Request, id: string): Promise<Response> {
  const models = await modelsFor(req);
  if (models instanceof Response) return models;
  const found = models.find((m) => m.id === id);
  return found ? Response.json(found) : errorResponse(404, 'not_found_error', `model: ${id}`);
}
