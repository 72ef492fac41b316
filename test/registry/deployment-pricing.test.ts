import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { pricingFor } from '../../lambdas/metering/model-access.ts';
import { priceFor } from '../../lambdas/pricing/prices.ts';
import type { CustomPrice, Project } from '../../lambdas/registry/model.ts';
import {
  createProject,
  getDeploymentPricing,
  RegistryError,
  removeDeploymentPrice,
  setDeploymentPrice,
  setModelPricing,
  setProviderKey,
} from '../../lambdas/registry/registry.ts';
import { setClock } from '../support/clock.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { countRegistryReads } from '../support/registry-reads.ts';

/**
 * Deployment-wide prices (DESIGN §14; `gateway pricing set|unset|list`): one registry item that prices a model for
 * every project, below a project's own price and above the bundled catalog. Measured on a gateway that keeps
 * registry records 60 s (as a deployed stack does): a price just set serves a model that was refused at once (the
 * refusal reads the prices again), a changed or removed price takes effect once the cache time has passed (the clock
 * moved), and while cached the prices cost no registry read per request.
 */

/** Claude Code's `haiku` alias (2.1.330), newer than the bundled catalog. */
const HAIKU = 'claude-haiku-5-5';
/** A GPT-routed name only a deployment price makes known: listed only for projects with an OpenAI key. */
const GPT = 'gpt-9.9-deployment';
const DEPLOYMENT: CustomPrice = { inputUsdPerMtok: 1, outputUsdPerMtok: 5 };
const OWN: CustomPrice = { inputUsdPerMtok: 2, outputUsdPerMtok: 10 };
const BUDGET: BudgetClaim = { ai: 10_000_000, compute: 600, window: 'lifetime' };

let gw: TestGateway;
let registryReads: { count: number };
beforeAll(async () => {
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '60' } });
  registryReads = countRegistryReads(gw);
  // Set before any request: the gateway's first read of the deployment's prices sees them.
  await setDeploymentPrice(HAIKU, DEPLOYMENT);
  await setDeploymentPrice(GPT, DEPLOYMENT);
});
afterAll(async () => {
  await gw?.stop();
});

const tokenFor = (project: Project, user: string) =>
  mintToken({ projectId: project.projectId, userId: user, secret: project.secret, budget: BUDGET, expiresInSeconds: 3600 });
const newProject = () => createProject({ developerId: gw.developerId });

interface Asked {
  status: number;
  usage?: { input_tokens: number; output_tokens: number };
  error?: string;
}
async function ask(token: string, model: string): Promise<Asked> {
  const res = await fetch(`${gw.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': token, 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: 'Hello' }] }),
  });
  const body = (await res.json()) as { usage?: Asked['usage']; error?: { message: string } };
  return { status: res.status, usage: body.usage, error: body.error?.message };
}

async function aiUsed(token: string): Promise<number> {
  await gw.invocationsDone(); // a JSON answer is settled after it is delivered
  const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  const { ai } = (await res.json()) as { ai: { used: number; reserved: number } };
  expect(ai.reserved).toBe(0);
  return ai.used;
}

/** USD per Mtok is µ$ per token: with whole-dollar prices the charge is exactly tokens × price. */
const micros = (usage: { input_tokens: number; output_tokens: number }, price: CustomPrice) =>
  usage.input_tokens * price.inputUsdPerMtok + usage.output_tokens * price.outputUsdPerMtok;

const unpriced = (model: string) =>
  `Model "${model}" has no known price, so it cannot be metered; the project owner can set one with "gateway project set-pricing --model ${model}", the operator one for every project with "gateway pricing set --model ${model}"`;

describe('deployment-wide prices in the registry', () => {
  it('set, list and unset; a price is checked as a project price is, with the reason in the refusal', async () => {
    const full: CustomPrice = { inputUsdPerMtok: 0.8, outputUsdPerMtok: 4, cacheReadUsdPerMtok: 0.08, cacheWriteUsdPerMtok: 1 };
    expect(await setDeploymentPrice('reg-a', DEPLOYMENT)).toEqual({ [HAIKU]: DEPLOYMENT, [GPT]: DEPLOYMENT, 'reg-a': DEPLOYMENT });
    await setDeploymentPrice('reg-b', full);
    await setDeploymentPrice('reg-a', OWN); // replaces
    expect(await getDeploymentPricing()).toEqual({ [HAIKU]: DEPLOYMENT, [GPT]: DEPLOYMENT, 'reg-a': OWN, 'reg-b': full });
    expect(await removeDeploymentPrice('reg-a')).toEqual({ [HAIKU]: DEPLOYMENT, [GPT]: DEPLOYMENT, 'reg-b': full });
    await removeDeploymentPrice('reg-b');
    expect(await getDeploymentPricing()).toEqual({ [HAIKU]: DEPLOYMENT, [GPT]: DEPLOYMENT });

    await expect(removeDeploymentPrice('reg-a')).rejects.toThrow(
      new RegistryError('Model reg-a has no deployment-wide price ("gateway pricing list" shows those set)'),
    );
    await expect(setDeploymentPrice('reg-c', { inputUsdPerMtok: -1, outputUsdPerMtok: 1 })).rejects.toThrow(
      new RegistryError('The price of reg-c is invalid: inputUsdPerMtok: Too small: expected number to be >=0'),
    );
    await expect(setDeploymentPrice('reg-c', { inputUsdPerMtok: 1, outputUsdPerMtok: Number.NaN })).rejects.toThrow(
      /^The price of reg-c is invalid: outputUsdPerMtok: /,
    );
    await expect(setDeploymentPrice('reg-c', { inputUsdPerMtok: 1, outputUsdPerMtok: 1, cacheReadUsdPerMtok: Number.POSITIVE_INFINITY })).rejects.toThrow(
      /^The price of reg-c is invalid: cacheReadUsdPerMtok: /,
    );
    await expect(setDeploymentPrice('', DEPLOYMENT)).rejects.toThrow(new RegistryError('The model name must not be empty'));
    // The same schema checks a project's own price.
    await expect(setModelPricing(gw.projectId, 'reg-c', { inputUsdPerMtok: -1, outputUsdPerMtok: 1 })).rejects.toThrow(
      new RegistryError('The price of reg-c is invalid: inputUsdPerMtok: Too small: expected number to be >=0'),
    );
    expect(await getDeploymentPricing()).toEqual({ [HAIKU]: DEPLOYMENT, [GPT]: DEPLOYMENT });
  });
});

describe('pricingFor: the lookup order', () => {
  const project = (pricing: Record<string, CustomPrice>) => ({ pricing }) as unknown as Project;
  it("an advisor's or a fallback's model (ModelPricing.other) is priced from the project's prices, then the deployment's", () => {
    const deployment = { [HAIKU]: DEPLOYMENT };
    const asked = pricingFor(project({}), deployment, 'claude-sonnet-4-6')!;
    expect(asked.source).toBe('catalog');
    expect(asked.other(HAIKU)?.rates(0).input).toBe(DEPLOYMENT.inputUsdPerMtok * 1_000_000);
    // The project's own price for the other model wins over the deployment's.
    const withOwn = pricingFor(project({ [HAIKU]: OWN }), deployment, 'claude-sonnet-4-6')!;
    expect(withOwn.other(HAIKU)?.rates(0).input).toBe(OWN.inputUsdPerMtok * 1_000_000);
    // A deployment-priced model asked for itself: its price, and the others' through the same lookup.
    const own = pricingFor(project({}), deployment, HAIKU)!;
    expect(own.source).toBe('custom');
    expect(own.other('claude-sonnet-4-6')?.source).toBe('catalog');
    // No inherited property is ever a price.
    expect(pricingFor(project({}), {}, 'constructor')).toBeUndefined();
  });
});

describe('deployment-wide prices on the proxy', () => {
  it('GET /v1/models lists a deployment-priced model for every project that can route it, after its own custom models', async () => {
    expect(priceFor(HAIKU, 'anthropic')).toBeUndefined(); // the bundled catalog does not know it
    const [keyless, withOpenAi, withOwn] = await Promise.all([newProject(), newProject(), newProject()]);
    await setProviderKey(withOpenAi.projectId, 'openai', 'sk-test-openai');
    await setModelPricing(withOwn.projectId, 'claude-own-1', OWN);

    const list = async (project: Project) => {
      const ids: string[] = [];
      for await (const m of gw.client(await tokenFor(project, 'lister')).models.list({ limit: 1000 })) ids.push(m.id);
      return ids;
    };
    const [keylessIds, openAiIds, ownIds] = await Promise.all([list(keyless), list(withOpenAi), list(withOwn)]);
    expect(keylessIds).toContain(HAIKU);
    expect(keylessIds).not.toContain(GPT); // routes to OpenAI, and the project has no OpenAI key
    expect(openAiIds).toEqual(expect.arrayContaining([HAIKU, GPT]));
    expect(ownIds[0]).toBe('claude-own-1');
    expect(ownIds[1]).toBe(HAIKU);
    expect(ownIds.indexOf(HAIKU)).toBeLessThan(ownIds.indexOf('claude-sonnet-4-6'));

    const one = await fetch(`${gw.url}/v1/models/${HAIKU}`, { headers: { 'x-api-key': await tokenFor(keyless, 'lister') } });
    expect(one.status).toBe(200);
    expect(await one.json()).toEqual({
      type: 'model',
      object: 'model',
      id: HAIKU,
      display_name: HAIKU,
      created_at: '1970-01-01T00:00:00Z',
      created: 0,
      owned_by: 'anthropic',
    });
    // …and every project can call it.
    expect((await ask(await tokenFor(keyless, 'caller'), HAIKU)).status).toBe(200);
    expect((await ask(await tokenFor(withOpenAi, 'caller'), GPT)).status).toBe(200);
  });

  it('every project is charged the deployment price, exactly, except one with its own price, which wins', async () => {
    const [plain, own] = await Promise.all([newProject(), newProject()]);
    await setModelPricing(own.projectId, HAIKU, OWN);
    const [plainToken, ownToken] = await Promise.all([tokenFor(plain, 'charged'), tokenFor(own, 'charged')]);
    const [atDeployment, atOwn] = await Promise.all([ask(plainToken, HAIKU), ask(ownToken, HAIKU)]);
    expect([atDeployment.status, atOwn.status]).toEqual([200, 200]);
    expect(await aiUsed(plainToken)).toBe(micros(atDeployment.usage!, DEPLOYMENT));
    expect(await aiUsed(ownToken)).toBe(micros(atOwn.usage!, OWN));
    expect(micros(atOwn.usage!, OWN)).toBeGreaterThan(0);
  });
});

/**
 * Past SECRET_CACHE_SECONDS: every instance has read the prices again. Last in the file: the clock is put back when
 * the test ends, and records cached at the moved time would look fresh to later tests.
 */
describe('when a change takes effect (last: it moves the clock)', () => {
  it('a price just set serves a refused model at once; a new price or its removal within the cache time; no registry read per request', async () => {
    const model = 'claude-later-9-9';
    const realNow = () => Math.round(performance.timeOrigin + performance.now());
    let shift = 0;
    const pastTheCache = () => {
      shift += 61_000;
      setClock(realNow() + shift);
    };
    const project = await newProject();
    const token = (user: string) => tokenFor(project, user);

    expect(await ask(await token('before'), model)).toEqual({ status: 400, usage: undefined, error: unpriced(model) });
    await new Promise((r) => setTimeout(r, 1_100)); // past the re-read rate limit (once a second)
    await setDeploymentPrice(model, DEPLOYMENT);
    const first = await token('first');
    const served = await ask(first, model);
    expect(served.status).toBe(200);
    expect(await aiUsed(first)).toBe(micros(served.usage!, DEPLOYMENT));

    // While cached, the prices (and the project) are read from no store.
    registryReads.count = 0;
    for (let i = 0; i < 5; i++) expect((await ask(first, model)).status).toBe(200);
    expect(registryReads.count).toBe(0);

    // A new price: the cached one until the cache time has passed, then the new one.
    const raised: CustomPrice = { inputUsdPerMtok: 3, outputUsdPerMtok: 7 };
    await setDeploymentPrice(model, raised);
    const within = await token('within');
    const old = await ask(within, model);
    expect(await aiUsed(within)).toBe(micros(old.usage!, DEPLOYMENT));
    pastTheCache();
    const after = await token('after');
    const renewed = await ask(after, model);
    expect(await aiUsed(after)).toBe(micros(renewed.usage!, raised));

    // Removed: still served (at the cached price) within the cache time, then refused again.
    await removeDeploymentPrice(model);
    expect((await ask(await token('removed'), model)).status).toBe(200);
    pastTheCache();
    expect(await ask(await token('gone'), model)).toEqual({ status: 400, usage: undefined, error: unpriced(model) });
  });
});
