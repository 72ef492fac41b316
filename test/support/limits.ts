/**
 * The request limits the gateway documents (docs/contract.md, "Limits"), read from the constants the code exports
 * when they exist, so the boundary tests follow the documented numbers instead of a copy of them. A fallback is the
 * figure the robustness brief assumed; `source` says which one a run used, and the fuzz files print it.
 */
export interface GatewayLimits {
  maxBodyBytes: number;
  maxJsonDepth: number;
  maxTokensCeiling: number | undefined;
  /**
   * The hard cap's floor (docs/contract.md, "Budgets and money"): a request whose max_tokens must be lowered below this to fit the budget is
   * refused. Undefined when the gateway has no hard cap (then a request is admitted while used < budget).
   */
  minOutputTokens: number | undefined;
  source: Record<'maxBodyBytes' | 'maxJsonDepth' | 'maxTokensCeiling' | 'minOutputTokens', string>;
}

async function exportsOf(load: () => Promise<Record<string, unknown>>): Promise<Record<string, unknown>> {
  try {
    return await load();
  } catch {
    return {};
  }
}

function pick(mods: Record<string, unknown>[], names: RegExp): [string, number] | undefined {
  for (const mod of mods) {
    for (const [name, value] of Object.entries(mod)) if (names.test(name) && typeof value === 'number') return [name, value];
  }
  return undefined;
}

export async function gatewayLimits(): Promise<GatewayLimits> {
  const mods = [
    await exportsOf(() => import('../../lambdas/http/limits.ts') as Promise<Record<string, unknown>>),
    await exportsOf(() => import('../../lambdas/proxy/schema.ts') as Promise<Record<string, unknown>>),
  ];
  const reservation = [await exportsOf(() => import('../../lambdas/metering/reservation.ts') as Promise<Record<string, unknown>>)];
  const floor = pick(reservation, /^MIN_OUTPUT_TOKENS$/);
  const body = pick(mods, /^MAX_BODY_BYTES$|BODY.*BYTES/i);
  const depth = pick(mods, /^MAX_JSON_DEPTH$|DEPTH/i);
  const ceiling = pick(mods, /^MAX_TOKENS_CEILING$|MAX_TOKENS/i);
  return {
    maxBodyBytes: body?.[1] ?? 6_291_456,
    maxJsonDepth: depth?.[1] ?? 64,
    maxTokensCeiling: ceiling?.[1],
    minOutputTokens: floor?.[1],
    source: {
      minOutputTokens: floor ? `export ${floor[0]}` : 'no hard cap found',
      maxBodyBytes: body ? `export ${body[0]}` : 'assumed 6 MB',
      maxJsonDepth: depth ? `export ${depth[0]}` : 'assumed 64',
      maxTokensCeiling: ceiling ? `export ${ceiling[0]}` : 'NOT FOUND',
    },
  };
}
