import type { MatchLogic, ModelInfo, ModelPrice, Provider } from '@pydantic/genai-prices';
import { CATALOG_JSON } from './catalog.generated.ts';

/**
 * The price catalog of @pydantic/genai-prices for the providers the gateway routes to, read from the table
 * generate-catalog.ts writes (catalog.generated.ts) instead of from the package: the package's whole catalog is
 * ~470 KB of code to parse on every cold start. Each provider's JSON is parsed the first time it is asked for.
 *
 * Model lookup and the choice among a model's dated or time-of-day prices are the package's own rules, step for step
 * (its `calcPrice` with `providerId`: `findProvider` by id, `matchModel` with the fallback providers and the dated-name
 * retry, `getActiveModelPrice` at the call's time), so a name is priced exactly as the package would price it; the
 * test beside the generator compares the two for every catalog model and variants of its name.
 */

type CatalogProvider = Pick<Provider, 'id' | 'models' | 'fallback_model_providers'>;

const parsed = new Map<string, CatalogProvider | null>();

/** The catalog's provider with that id (exact, as the gateway's provider ids are), parsed on first use. */
export function catalogProvider(id: string): CatalogProvider | undefined {
  let provider = parsed.get(id);
  if (provider === undefined) {
    const json = Object.hasOwn(CATALOG_JSON, id) ? CATALOG_JSON[id] : undefined;
    provider = json === undefined ? null : (JSON.parse(json) as CatalogProvider);
    parsed.set(id, provider);
  }
  return provider ?? undefined;
}

function matches(logic: MatchLogic, text: string): boolean {
  if ('or' in logic) return logic.or.some((l) => matches(l, text));
  if ('and' in logic) return logic.and.every((l) => matches(l, text));
  if ('equals' in logic) return text.toLowerCase() === logic.equals.toLowerCase();
  if ('starts_with' in logic) return text.toLowerCase().startsWith(logic.starts_with.toLowerCase());
  if ('ends_with' in logic) return text.toLowerCase().endsWith(logic.ends_with.toLowerCase());
  if ('contains' in logic) return text.toLowerCase().includes(logic.contains.toLowerCase());
  if ('regex' in logic) return new RegExp(logic.regex).test(text);
  return false;
}

function matchIn(provider: CatalogProvider, name: string, withFallbacks: boolean): ModelInfo | undefined {
  const found = provider.models.find((m) => matches(m.match, name));
  if (found) return found;
  if (provider.fallback_model_providers && withFallbacks) {
    for (const id of provider.fallback_model_providers) {
      const fallback = catalogProvider(id);
      if (fallback) {
        const model = matchIn(fallback, name, false);
        if (model) return model;
      }
    }
  }
  return undefined;
}

/** `-20250929` → `-2025-09-29` where it is a real date (the package retries a dated name that way). */
const COMPACT_DATE = /(-)(20\d{2})(0[1-9]|1[0-2])(0[1-9]|[12]\d|3[01])(?=-|:|$)/g;

function withDashedDates(name: string): string {
  return name.replace(COMPACT_DATE, (whole, dash: string, y: string, m: string, d: string) => {
    const date = new Date(Date.UTC(Number(y), Number(m) - 1, Number(d)));
    return date.getUTCFullYear() !== Number(y) || date.getUTCMonth() !== Number(m) - 1 || date.getUTCDate() !== Number(d) ? whole : `${dash}${y}-${m}-${d}`;
  });
}

/** The catalog model a requested name resolves to at that provider, as the package resolves it. */
export function findCatalogModel(providerId: string, modelName: string): ModelInfo | undefined {
  const provider = catalogProvider(providerId);
  if (!provider) return undefined;
  const name = modelName.toLowerCase().trim();
  const found = matchIn(provider, name, true);
  if (found) return found;
  const dashed = withDashedDates(name);
  return dashed === name ? undefined : matchIn(provider, dashed, true);
}

/** Whether a model's prices change with the date or the time of day (a list of constrained prices). */
export function hasConditionalPrices(model: ModelInfo): boolean {
  return Array.isArray(model.prices);
}

/** Seconds since UTC midnight of an `HH:MM:SS[.fff](Z|±HH:MM)` time of day. */
function secondsOfDay(time: string): number {
  const m = /^(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|([+-])(\d{2}):(\d{2}))$/.exec(time);
  if (!m) throw new Error(`Invalid time-of-day constraint: ${time}`);
  const [, hh, mm, ss, fraction = '', zone, sign, offH = '00', offM = '00'] = m;
  const h = Number(hh);
  const min = Number(mm);
  const s = Number(ss);
  const offset = (Number(offH) * 60 + Number(offM)) * 60;
  if (h > 23 || min > 59 || s > 59 || offH > '23' || offM > '59') throw new Error(`Invalid time-of-day constraint: ${time}`);
  const local = h * 3600 + min * 60 + s + +`0.${fraction}`;
  const shift = zone === 'Z' ? 0 : sign === '+' ? offset : -offset;
  return (local - shift + 86400) % 86400;
}

/** The prices in force at `at`: the last of a model's constrained prices whose constraint holds, else its first. */
export function activePrices(model: ModelInfo, at: Date): ModelPrice {
  if (!Array.isArray(model.prices)) return model.prices;
  if (Number.isNaN(at.getTime())) throw new RangeError('Invalid time value');
  for (let i = model.prices.length - 1; i >= 0; i--) {
    const { constraint, prices } = model.prices[i]!;
    if (constraint === undefined) return prices;
    if (constraint.type === 'start_date') {
      if (at >= new Date(constraint.start_date)) return prices;
    } else if (constraint.type === 'time_of_date') {
      const now = at.getUTCHours() * 3600 + at.getUTCMinutes() * 60 + at.getUTCSeconds() + at.getUTCMilliseconds() / 1000;
      const start = secondsOfDay(constraint.start_time);
      const end = secondsOfDay(constraint.end_time);
      if (end < start ? now >= start || now < end : now >= start && now < end) return prices;
    } else {
      throw new Error(`Unknown price constraint for model '${model.id}': ${JSON.stringify(constraint)}`);
    }
  }
  return model.prices[0]!.prices;
}

/** The models a provider's catalog lists, in catalog order (GET /v1/models). */
export function catalogModels(providerId: string): ReadonlyArray<Pick<ModelInfo, 'id' | 'name'>> {
  return catalogProvider(providerId)?.models ?? [];
}
