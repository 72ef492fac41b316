import { randomBytes, randomUUID } from 'node:crypto';
import { GetCommand } from '@aws-sdk/lib-dynamodb';
import { clock } from '../config/clock.ts';
import { env } from '../config/env.ts';
import { conditionalPut, conditionalUpdate, updateOnce } from '../store/conditional.ts';
import { documentClient } from '../store/dynamo.ts';
import { TOKEN_CLOCK_TOLERANCE_SECONDS } from '../config/timing.ts';
import { checkUrl, OutboundRefused } from '../outbound/guard.ts';
import { keyCipher, type CipherOwner } from './key-cipher.ts';
import {
  AlertThresholds,
  CustomPrice,
  Developer,
  DeveloperAlerts,
  MAX_REVOCATIONS,
  ModelPrices,
  PricedModel,
  Project,
  ProjectAlerts,
  revocationCount,
  type ProjectProvider,
} from './model.ts';

/** Raised for an operator's mistake (unknown id, duplicate id): the CLI prints the message as it is. */
export class RegistryError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RegistryError';
  }
}

const developerKey = (id: string) => ({ pk: `developer#${id}` });
const projectKey = (id: string) => ({ pk: `project#${id}` });
/** The deployment's own prices: one item, apart from every developer and project (ids cannot hold '#'). */
const DEPLOYMENT_PRICING_KEY = { pk: 'deployment#pricing' };
const table = () => env().REGISTRY_TABLE;
const newSecret = () => randomBytes(32).toString('base64url');

/** Writes a record that must not exist yet; `what` names it in the refusal when it does. */
async function putNew(item: Record<string, unknown>, what: string): Promise<void> {
  const put = await conditionalPut({ TableName: table(), Item: item, ConditionExpression: 'attribute_not_exists(pk)' });
  if (!put.ok) throw new RegistryError(`${what} already exists`);
}

export async function createDeveloper(input: { developerId: string; planSeconds: number; poolSeconds?: number }): Promise<Developer> {
  const developer = Developer.parse({
    developerId: input.developerId,
    planSeconds: input.planSeconds,
    poolSeconds: input.poolSeconds ?? 0,
    createdAt: new Date(clock.now()).toISOString(),
  });
  await putNew({ ...developerKey(developer.developerId), kind: 'developer', ...developer }, `Developer ${developer.developerId}`);
  return developer;
}

export async function getDeveloper(developerId: string): Promise<Developer | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: developerKey(developerId), ConsistentRead: true }));
  return out.Item ? Developer.parse(out.Item) : undefined;
}

/**
 * Changes a developer's plan. It counts from the next run: tiers are decided when a run is admitted
 * (plans/admission.ts), and runs already holding a lease keep it.
 */
export async function setDeveloperPlan(developerId: string, plan: { planSeconds: number; poolSeconds?: number }): Promise<Developer> {
  const pool = plan.poolSeconds === undefined ? '' : ', poolSeconds = :pool';
  const out = await conditionalUpdate({
    TableName: table(),
    Key: developerKey(developerId),
    UpdateExpression: `SET planSeconds = :plan${pool}`,
    ConditionExpression: 'attribute_exists(pk)',
    ExpressionAttributeValues: { ':plan': plan.planSeconds, ...(plan.poolSeconds === undefined ? {} : { ':pool': plan.poolSeconds }) },
    ReturnValues: 'ALL_NEW',
  });
  if (!out.ok) throw new RegistryError(`Developer ${developerId} does not exist`);
  return Developer.parse(out.attributes);
}

export async function createProject(input: { developerId: string; projectId?: string }): Promise<Project> {
  if (!(await getDeveloper(input.developerId))) throw new RegistryError(`Developer ${input.developerId} does not exist`);
  const project = Project.parse({
    projectId: input.projectId ?? `prj_${randomUUID().replaceAll('-', '').slice(0, 20)}`,
    developerId: input.developerId,
    secret: newSecret(),
    providerKeys: {},
    pricing: {},
    createdAt: new Date(clock.now()).toISOString(),
  });
  await putNew({ ...projectKey(project.projectId), kind: 'project', ...project }, `Project ${project.projectId}`);
  return project;
}

export async function getProject(projectId: string): Promise<Project | undefined> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: projectKey(projectId), ConsistentRead: true }));
  return out.Item ? Project.parse(out.Item) : undefined;
}

async function updateProject(
  projectId: string,
  update: { expression: string; names?: Record<string, string>; values?: Record<string, unknown> },
): Promise<Project> {
  const out = await conditionalUpdate({
    TableName: table(),
    Key: projectKey(projectId),
    UpdateExpression: update.expression,
    ConditionExpression: 'attribute_exists(pk)',
    ExpressionAttributeNames: update.names,
    ExpressionAttributeValues: update.values,
    ReturnValues: 'ALL_NEW',
  });
  if (!out.ok) throw new RegistryError(`Project ${projectId} does not exist`);
  return Project.parse(out.attributes);
}

/** Replaces the HMAC secret: tokens signed with the old one stop working once instances' caches expire. */
export async function rotateProjectSecret(projectId: string): Promise<Project> {
  return updateProject(projectId, {
    expression: 'SET secret = :s, secretRotatedAt = :t',
    values: { ':s': newSecret(), ':t': new Date(clock.now()).toISOString() },
  });
}

export async function setProviderKey(projectId: string, provider: ProjectProvider, apiKey: string): Promise<void> {
  const ciphertext = await keyCipher().encrypt(apiKey, { projectId });
  await updateProject(projectId, {
    expression: 'SET providerKeys.#p = :k',
    names: { '#p': provider },
    values: { ':k': ciphertext },
  });
}

export async function removeProviderKey(projectId: string, provider: ProjectProvider): Promise<void> {
  await updateProject(projectId, { expression: 'REMOVE providerKeys.#p', names: { '#p': provider } });
}

/** The provider key in clear, for the one call that needs it; undefined when the project has none. */
export async function providerKeyFor(project: Project, provider: ProjectProvider): Promise<string | undefined> {
  const ciphertext = project.providerKeys[provider];
  return ciphertext ? keyCipher().decrypt(ciphertext, { projectId: project.projectId }) : undefined;
}

/** A model name and its price as the registry stores them, checked by the one schema projects and the deployment share. */
function checkedPrice(model: string, price: CustomPrice): CustomPrice {
  const name = PricedModel.safeParse(model);
  if (!name.success) throw new RegistryError(`The model name ${name.error.issues[0]!.message}`);
  const checked = CustomPrice.safeParse(price);
  if (!checked.success) {
    const issue = checked.error.issues[0]!;
    throw new RegistryError(`The price of ${model} is invalid: ${issue.path.join('.') || 'price'}: ${issue.message}`);
  }
  return checked.data;
}

export async function setModelPricing(projectId: string, model: string, price: CustomPrice): Promise<Project> {
  return updateProject(projectId, {
    expression: 'SET pricing.#m = :p',
    names: { '#m': model },
    values: { ':p': checkedPrice(model, price) },
  });
}

/**
 * The deployment-wide prices (`gateway pricing set`): for every project, a model without a price of the project's
 * own is priced from here before the bundled catalog (metering/model-access.ts). Gateways read them through
 * registry/deployment-pricing.ts, cached like a project record.
 */
export async function getDeploymentPricing(): Promise<ModelPrices> {
  const out = await documentClient().send(new GetCommand({ TableName: table(), Key: DEPLOYMENT_PRICING_KEY, ConsistentRead: true }));
  return ModelPrices.parse(out.Item?.pricing ?? {});
}

/** Sets one model's deployment-wide price; returns every deployment-wide price after the change. */
export async function setDeploymentPrice(model: string, price: CustomPrice): Promise<ModelPrices> {
  const checked = checkedPrice(model, price);
  // A nested key can be set only inside an existing map, and one expression cannot create the map and set its key.
  await updateOnce({
    TableName: table(),
    Key: DEPLOYMENT_PRICING_KEY,
    UpdateExpression: 'SET #kind = :kind, pricing = if_not_exists(pricing, :empty)',
    ExpressionAttributeNames: { '#kind': 'kind' },
    ExpressionAttributeValues: { ':kind': 'deployment-pricing', ':empty': {} },
  });
  const item = await updateOnce({
    TableName: table(),
    Key: DEPLOYMENT_PRICING_KEY,
    UpdateExpression: 'SET pricing.#m = :p',
    ExpressionAttributeNames: { '#m': model },
    ExpressionAttributeValues: { ':p': checked },
    ReturnValues: 'ALL_NEW',
  });
  return ModelPrices.parse(item?.pricing ?? {});
}

/** Removes one model's deployment-wide price (refused when it has none); returns the deployment-wide prices left. */
export async function removeDeploymentPrice(model: string): Promise<ModelPrices> {
  const out = await conditionalUpdate({
    TableName: table(),
    Key: DEPLOYMENT_PRICING_KEY,
    UpdateExpression: 'REMOVE pricing.#m',
    ConditionExpression: 'attribute_exists(pricing.#m)',
    ExpressionAttributeNames: { '#m': model },
    ReturnValues: 'ALL_NEW',
  });
  if (!out.ok) throw new RegistryError(`Model ${model} has no deployment-wide price ("gateway pricing list" shows those set)`);
  return ModelPrices.parse(out.attributes?.pricing ?? {});
}

/**
 * The origins a page may use the project's tokens from (canonical patterns, lambdas/origins/pattern.ts), or undefined
 * for any origin. Gateways see the change within SECRET_CACHE_SECONDS (the cached project record).
 */
export async function setProjectOrigins(projectId: string, origins: string[] | undefined): Promise<Project> {
  return origins === undefined
    ? updateProject(projectId, { expression: 'REMOVE origins' })
    : updateProject(projectId, { expression: 'SET origins = :o', values: { ':o': origins } });
}

type RevocationMap = 'revokedTokens' | 'blockedUsers' | 'revokedBefore';

/**
 * Sets (or, with `undefined`, removes) one entry of a project's revocations (auth/revocations.ts), first dropping the
 * revoked token ids whose tokens have expired anyway, and refusing an entry past MAX_REVOCATIONS. Each write names
 * one key of one map, so two owners' changes never overwrite each other; the limit is checked on the record as read,
 * so two racing additions may pass it by one.
 */
async function setRevocation(projectId: string, map: RevocationMap, key: string, value: number | true | undefined): Promise<Project> {
  const project = await getProject(projectId);
  if (!project) throw new RegistryError(`Project ${projectId} does not exist`);
  const nowSeconds = Math.floor(clock.now() / 1000);
  // An expired token is refused for its `exp` already; 0 = its exp was not given, kept until removed.
  const expired = Object.entries(project.revokedTokens ?? {})
    .filter(([, exp]) => exp > 0 && exp + TOKEN_CLOCK_TOLERANCE_SECONDS < nowSeconds)
    .map(([jti]) => jti);
  const adding = value !== undefined && !Object.hasOwn(project[map] ?? {}, key);
  if (adding && revocationCount(project) - expired.length >= MAX_REVOCATIONS) {
    throw new RegistryError(
      `Project ${projectId} holds ${MAX_REVOCATIONS} revocations, the most a project record may carry: unblock users or remove revoked tokens first (revoked tokens leave by themselves once they expire)`,
    );
  }
  // In batches: one update expression names at most a few hundred attributes comfortably.
  for (let i = 0; i < expired.length; i += 100) {
    const names = Object.fromEntries(expired.slice(i, i + 100).map((jti, j) => [`#e${j}`, jti]));
    await updateProject(projectId, {
      expression: `REMOVE ${Object.keys(names)
        .map((n) => `revokedTokens.${n}`)
        .join(', ')}`,
      names,
    });
  }
  if (value === undefined) return updateProject(projectId, { expression: `REMOVE ${map}.#k`, names: { '#k': key } });
  // A nested key can be set only inside an existing map, and one expression cannot create the map and set its key.
  await updateProject(projectId, { expression: `SET ${map} = if_not_exists(${map}, :empty)`, values: { ':empty': {} } });
  return updateProject(projectId, { expression: `SET ${map}.#k = :v`, names: { '#k': key }, values: { ':v': value } });
}

/** Revokes one token by its `jti`, until its `exp` (unix seconds; 0 when unknown: kept until removed). */
export async function revokeToken(projectId: string, jti: string, expiresAt: number): Promise<Project> {
  return setRevocation(projectId, 'revokedTokens', jti, expiresAt);
}

/** Blocks (or unblocks) a user: every token of theirs is refused, and their queued vessels end FAILED. */
export async function setUserBlocked(projectId: string, userId: string, blocked: boolean): Promise<Project> {
  return setRevocation(projectId, 'blockedUsers', userId, blocked ? true : undefined);
}

/** Revokes every token of a user issued at or before `beforeSeconds` (unix seconds); tokens issued later work. */
export async function revokeUserTokens(projectId: string, userId: string, beforeSeconds: number): Promise<Project> {
  return setRevocation(projectId, 'revokedBefore', userId, beforeSeconds);
}

/** The alert settings an operator gives: percentages per meter, the URL, the secret in clear (stored encrypted). */
export interface AlertSettings {
  ai?: number[];
  compute?: number[];
  url: string;
  secret: string;
}

/** One meter's percentages, checked by the schema the record is read with (model.ts), named in the refusal. */
function checkedThresholds(meter: 'ai' | 'compute', list: number[] | undefined): number[] | undefined {
  if (list === undefined) return undefined;
  const checked = AlertThresholds.safeParse(list);
  if (!checked.success) throw new RegistryError(`The ${meter} alert thresholds ${checked.error.issues[0]!.message} (got ${list.join(',')})`);
  return checked.data;
}

/**
 * Alert settings as stored: the URL through the outbound guard's check — as a vessel's callback URL is at /incubate:
 * a literal private, loopback or metadata address is refused now, a host name again at every delivery — and the
 * secret encrypted for its owner, as callback secrets are.
 */
async function storedAlerts(settings: AlertSettings, owner: CipherOwner) {
  let url: string;
  try {
    url = checkUrl(settings.url).toString();
  } catch (err) {
    throw new RegistryError(`The alert URL is refused: ${err instanceof OutboundRefused ? err.message : 'not a valid absolute URL'}`);
  }
  if (settings.secret === '') throw new RegistryError('The alert secret must not be empty: every alert is signed with it');
  return { url, secretCiphertext: await keyCipher().encrypt(settings.secret, owner) };
}

/**
 * Sets a project's budget alerts (`gateway project set-alerts`), replacing any it had: thresholds on each user's AI
 * and compute budget, and where the signed events go. Gateways see the change within SECRET_CACHE_SECONDS.
 */
export async function setProjectAlerts(projectId: string, settings: AlertSettings): Promise<Project> {
  const ai = checkedThresholds('ai', settings.ai);
  const compute = checkedThresholds('compute', settings.compute);
  if (!ai && !compute) throw new RegistryError('Give alert thresholds for the AI budget, the compute budget, or both');
  const alerts = ProjectAlerts.parse({ ...(ai ? { ai } : {}), ...(compute ? { compute } : {}), ...(await storedAlerts(settings, { projectId })) });
  return updateProject(projectId, { expression: 'SET alerts = :a', values: { ':a': alerts } });
}

/** Removes a project's budget alerts; alerts already fired are still delivered. */
export async function clearProjectAlerts(projectId: string): Promise<Project> {
  return updateProject(projectId, { expression: 'REMOVE alerts' });
}

/** Sets a developer's plan alerts (`gateway developer set-alerts`): thresholds on the month's compute. */
export async function setDeveloperAlerts(developerId: string, settings: Omit<AlertSettings, 'ai'> & { compute: number[] }): Promise<Developer> {
  const compute = checkedThresholds('compute', settings.compute)!;
  const alerts = DeveloperAlerts.parse({ compute, ...(await storedAlerts(settings, { developerId })) });
  return updateDeveloper(developerId, { expression: 'SET alerts = :a', values: { ':a': alerts } });
}

/** Removes a developer's plan alerts. */
export async function clearDeveloperAlerts(developerId: string): Promise<Developer> {
  return updateDeveloper(developerId, { expression: 'REMOVE alerts' });
}

async function updateDeveloper(developerId: string, update: { expression: string; values?: Record<string, unknown> }): Promise<Developer> {
  const out = await conditionalUpdate({
    TableName: table(),
    Key: developerKey(developerId),
    UpdateExpression: update.expression,
    ConditionExpression: 'attribute_exists(pk)',
    ExpressionAttributeValues: update.values,
    ReturnValues: 'ALL_NEW',
  });
  if (!out.ok) throw new RegistryError(`Developer ${developerId} does not exist`);
  return Developer.parse(out.attributes);
}

/** What an operator may see of alert settings: never the secret, only that there is one. */
export function describeAlerts(alerts: ProjectAlerts | DeveloperAlerts | undefined) {
  if (!alerts) return 'none' as const;
  return {
    ...('ai' in alerts && alerts.ai ? { ai: alerts.ai } : {}),
    ...(alerts.compute ? { compute: alerts.compute } : {}),
    url: alerts.url,
    signed: true as const,
  };
}

/** What an operator may see of a developer: the record, with its alerts (when it has some) but never their secret. */
export function describeDeveloper(developer: Developer) {
  const { alerts, ...rest } = developer;
  return { ...rest, ...(alerts ? { alerts: describeAlerts(alerts) } : {}) };
}

/** What an operator may see of a project: everything but the secret's value and the provider keys' values. */
export function describeProject(project: Project) {
  return {
    projectId: project.projectId,
    developerId: project.developerId,
    providerKeys: Object.keys(project.providerKeys),
    pricing: project.pricing,
    origins: project.origins ?? 'any',
    revokedTokens: Object.keys(project.revokedTokens ?? {}).length,
    blockedUsers: Object.keys(project.blockedUsers ?? {}),
    tokensRevokedBefore: project.revokedBefore ?? {},
    alerts: describeAlerts(project.alerts),
    createdAt: project.createdAt,
    secretRotatedAt: project.secretRotatedAt,
  };
}
