import { readFileSync } from 'node:fs';
import { calcPrice, findProvider, type ModelInfo, type MatchLogic } from '@pydantic/genai-prices';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { activePrices, catalogModels, findCatalogModel } from '../../lambdas/pricing/catalog.ts';
import { CATALOG_PROVIDERS } from '../../lambdas/pricing/catalog-providers.ts';
import { CATALOG_FILE, catalogSource } from '../../lambdas/pricing/generate-catalog.ts';
import { priceFor } from '../../lambdas/pricing/prices.ts';

/**
 * The gateway prices from a table generated out of @pydantic/genai-prices (lambdas/pricing/catalog.generated.ts) with
 * the package's own lookup rules re-stated (lambdas/pricing/catalog.ts), so the handlers do not load the package's
 * whole catalog. These tests hold the two to the package: the table is what the generator writes for the installed
 * version, and every name resolves to the same model and prices as the package's calcPrice.
 */

const ZERO = { input_tokens: 0, output_tokens: 0 };

function matchStrings(logic: MatchLogic): string[] {
  if ('or' in logic) return logic.or.flatMap(matchStrings);
  if ('and' in logic) return logic.and.flatMap(matchStrings);
  return Object.values(logic).filter((v): v is string => typeof v === 'string');
}

/** Names to try at a provider: every model's id and match strings, altered the ways clients alter them. */
function namesFor(models: readonly ModelInfo[]): string[] {
  const base = models.flatMap((m) => [m.id, ...matchStrings(m.match)]);
  const variants = base.flatMap((n) => [n, n.toUpperCase(), ` ${n} `, `${n}-20250929`, `${n}-20250231`, `x-${n}`]);
  return [...new Set([...variants, '', 'no-such-model-xyz', 'claude', 'gpt', 'openai/gpt-4o', 'anthropic/claude-sonnet-4.5'])];
}

/** Every date a model's prices change on, a day either side, and now. */
function instants(models: readonly ModelInfo[]): Date[] {
  const dates = new Set<string>();
  for (const m of models) {
    if (!Array.isArray(m.prices)) continue;
    for (const p of m.prices) {
      if (p.constraint?.type === 'start_date') dates.add(p.constraint.start_date);
    }
  }
  const day = 86_400_000;
  return [new Date(), ...[...dates].flatMap((d) => [new Date(Date.parse(d) - day), new Date(d), new Date(Date.parse(d) + day)])];
}

describe('the generated price catalog', () => {
  afterEach(() => vi.useRealTimers());

  it('is what generate-catalog.ts writes for the installed @pydantic/genai-prices (run it after upgrading)', () => {
    expect(readFileSync(CATALOG_FILE, 'utf8')).toBe(catalogSource());
  });

  it.each(CATALOG_PROVIDERS)(
    '%s: every name resolves to the model the package resolves it to, with the same prices at every price change',
    (provider) => {
      const models = findProvider({ providerId: provider })!.models;
      expect(catalogModels(provider).map((m) => [m.id, m.name])).toEqual(models.map((m) => [m.id, m.name]));
      const resolved = new Map<string, { model: ModelInfo; name: string }>();
      for (const name of namesFor(CATALOG_PROVIDERS.flatMap((p) => findProvider({ providerId: p })!.models))) {
        const expected = calcPrice(ZERO, name, { providerId: provider });
        const model = findCatalogModel(provider, name);
        expect(model?.id, `${provider} ${JSON.stringify(name)}`).toBe(expected?.model.id);
        if (model) resolved.set(model.id, { model, name });
      }
      for (const { model, name } of resolved.values()) {
        for (const at of instants([model])) {
          expect(activePrices(model, at), `${provider} ${name} at ${at.toISOString()}`).toEqual(
            calcPrice(ZERO, name, { providerId: provider, timestamp: at })!.model_price,
          );
        }
      }
    },
    120_000,
  );

  it('priceFor serves a model whose price changes on a date from its cache with the price of the moment', () => {
    const o3 = findProvider({ providerId: 'openai' })!.models.find((m) => m.id === 'o3')!;
    const changes = (o3.prices as Array<{ constraint?: { type: string; start_date?: string } }>).filter((p) => p.constraint?.type === 'start_date');
    expect(changes.length).toBeGreaterThan(0);
    const change = Date.parse(changes[0]!.constraint!.start_date!);
    vi.useFakeTimers();
    for (const at of [change - 86_400_000, change + 86_400_000, change - 86_400_000]) {
      vi.setSystemTime(at);
      const expected = calcPrice(ZERO, 'o3', { providerId: 'openai' })!.model_price;
      expect(priceFor('o3', 'openai')!.rates(0).input).toBe(Math.round((expected.input_mtok as number) * 1e6));
    }
  });

  it('priceFor answers the same pricing object for a name it has looked up before, and none for an unknown name', () => {
    expect(priceFor('claude-sonnet-4-5', 'anthropic')).toBe(priceFor('claude-sonnet-4-5', 'anthropic'));
    expect(priceFor('no-such-model-xyz', 'openrouter')).toBeUndefined();
    expect(priceFor('no-such-model-xyz', 'openrouter')).toBeUndefined();
  });
});
