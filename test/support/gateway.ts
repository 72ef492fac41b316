import { randomBytes } from 'node:crypto';
import Anthropic from '@anthropic-ai/sdk';
import { inject } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import type { ProjectProvider } from '../../lambdas/registry/model.ts';
import { createDeveloper, createProject, setModelPricing, setProviderKey } from '../../lambdas/registry/registry.ts';
import type { CustomPrice } from '../../lambdas/registry/model.ts';
import { startGateway, type GatewayOptions, type RunningGateway } from '../../bin/local/runtime.ts';

export interface TestGateway extends RunningGateway {
  projectId: string;
  developerId: string;
  secret: string;
  /** A token for this project; budget defaults to $10 AI, 1 h compute, a day window, 1 h validity. */
  token(opts?: { user?: string; budget?: Partial<BudgetClaim>; expiresInSeconds?: number }): Promise<string>;
  /** The real Anthropic SDK pointed at the gateway with the given token. */
  client(token: string, opts?: Partial<ConstructorParameters<typeof Anthropic>[0]>): Anthropic;
  setProviderKey(provider: ProjectProvider, key: string): Promise<void>;
  /**
   * A fresh user (`<prefix>-<n>`) with a token for `budget` (default $10 AI, no compute, a day window), and its
   * ledger: the window's AI used and reserved and its open holds, read once every invocation under way has returned
   * (an answer is delivered before its settlement is written).
   */
  user(prefix: string, budget?: Partial<BudgetClaim>): Promise<LedgerUser>;
  setPricing(model: string, price: CustomPrice): Promise<void>;
}

export interface LedgerUser {
  id: string;
  token: string;
  ledger(): Promise<{ used: number; reserved: number; openHolds: number }>;
}

let userSeq = 0;

/** A whole local gateway on fresh tables of the run's shared DynamoDB Local, with simulated upstreams. */
export async function startTestGateway(opts: Omit<GatewayOptions, 'dynamoEndpoint'> = {}): Promise<TestGateway> {
  const gw = await startGateway({
    simulateUpstreams: true,
    tablePrefix: `t${randomBytes(5).toString('hex')}`,
    ...opts,
    // Registry changes (pricing, keys) made mid-test must be seen at once, not after the per-instance cache expires.
    env: { SECRET_CACHE_SECONDS: '0', ...opts.env },
    dynamoEndpoint: inject('dynamoEndpoint'),
  });
  const developerId = `dev-${randomBytes(4).toString('hex')}`;
  await createDeveloper({ developerId, planSeconds: 1_000_000 });
  const project = await createProject({ developerId });
  return {
    ...gw,
    projectId: project.projectId,
    developerId,
    secret: project.secret,
    token: ({ user = 'user-1', budget = {}, expiresInSeconds = 3600 } = {}) =>
      mintToken({
        projectId: project.projectId,
        userId: user,
        secret: project.secret,
        budget: { ai: 10_000_000, compute: 3600, window: 'day', ...budget },
        expiresInSeconds,
      }),
    client: (token, clientOpts = {}) => new Anthropic({ baseURL: gw.url, apiKey: token, maxRetries: 0, ...clientOpts }),
    setProviderKey: (provider, key) => setProviderKey(project.projectId, provider, key),
    user: async (prefix, partial = {}) => {
      const id = `${prefix}-${++userSeq}`;
      const budget: BudgetClaim = { ai: 10_000_000, compute: 0, window: 'day', ...partial };
      const token = await mintToken({ projectId: project.projectId, userId: id, secret: project.secret, budget, expiresInSeconds: 3600 });
      const ledger = async () => {
        await gw.invocationsDone();
        const usage = await readUsage({ projectId: project.projectId, userId: id, budget });
        return { used: usage.used.ai, reserved: usage.reserved.ai, openHolds: usage.openHolds };
      };
      return { id, token, ledger };
    },
    setPricing: async (model, price) => {
      await setModelPricing(project.projectId, model, price);
    },
  };
}
