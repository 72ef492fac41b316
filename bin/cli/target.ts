import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import { TABLES } from '../../lambdas/store/tables.ts';

/**
 * How long a running gateway may go on using a project record it has cached (secret, provider keys, pricing): the
 * handlers' SECRET_CACHE_SECONDS. Deployed stacks keep the handlers' default (lambdas/config/env.ts, 60 s; the stack
 * does not override it). The local runtime re-reads within 1 s; a runtime.json that records its own value wins.
 */
export const DEPLOYED_SECRET_CACHE_SECONDS = 60;
export const LOCAL_SECRET_CACHE_SECONDS = 1;

export interface Target {
  kind: 'local' | 'stack';
  /** Within this many seconds every running gateway instance sees a registry change. */
  secretCacheSeconds: number;
  /** The environment the registry code reads (tables, endpoint, key). */
  env: Record<string, string>;
}

/**
 * Where the CLI's store is: the running local runtime (it writes DATA_DIR/runtime.json) or a deployed stack (its
 * CloudFormation outputs name the tables, the provider-key KMS key and the webhook queue).
 */
export async function resolveTarget(opts: { stack?: string; region?: string; dataDir?: string }): Promise<Target> {
  if (opts.stack) return { kind: 'stack', secretCacheSeconds: DEPLOYED_SECRET_CACHE_SECONDS, env: await stackEnvironment(opts.stack, opts.region) };
  const dataDir = resolve(opts.dataDir ?? process.env.DATA_DIR ?? '.data');
  const file = join(dataDir, 'runtime.json');
  if (!existsSync(file)) {
    throw new Error(`No running local gateway found (${file} is missing): start it with "npm start", or pass --stack <name> for a deployed one`);
  }
  const runtime = JSON.parse(readFileSync(file, 'utf8')) as {
    dynamoEndpoint: string;
    tables: Record<string, string>;
    keyFile: string;
    secretCacheSeconds?: unknown;
    /** fauxqs and its queues (runtimes before webhooks did not record them). */
    sqsEndpoint?: string;
    queues?: Record<string, string>;
    /** Whether the runtime lets outbound calls reach loopback (runtimes before alerts did not record it). */
    allowLoopbackUrls?: boolean;
  };
  const recorded = runtime.secretCacheSeconds;
  return {
    kind: 'local',
    secretCacheSeconds: typeof recorded === 'number' && Number.isFinite(recorded) && recorded >= 0 ? recorded : LOCAL_SECRET_CACHE_SECONDS,
    env: {
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: 'local',
      AWS_SECRET_ACCESS_KEY: 'local',
      DYNAMODB_ENDPOINT: runtime.dynamoEndpoint,
      PROVIDER_KEYS_LOCAL_KEY_FILE: runtime.keyFile,
      ...runtime.tables,
      ...(runtime.sqsEndpoint ? { SQS_ENDPOINT: runtime.sqsEndpoint } : {}),
      ...runtime.queues,
      // URLs the CLI stores (alert targets) are checked by the policy the local gateway calls them with.
      ...(runtime.allowLoopbackUrls ? { ALLOW_LOOPBACK_URLS: '1' } : {}),
    },
  };
}

async function stackEnvironment(stack: string, regionFlag: string | undefined): Promise<Record<string, string>> {
  const region = regionFlag ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
  const cfn = new CloudFormationClient(region ? { region } : {});
  const out = await cfn.send(new DescribeStacksCommand({ StackName: stack }));
  const outputs = Object.fromEntries((out.Stacks?.[0]?.Outputs ?? []).map((o) => [o.OutputKey!, o.OutputValue!]));
  const need = ['RegistryTableName', 'UsageTableName', 'ProviderKeysKmsKeyId'];
  const missing = need.filter((k) => !outputs[k]);
  if (missing.length) throw new Error(`Stack ${stack} has no output ${missing.join(', ')}; is it a prompt-gateway stack?`);
  // Every table the stack outputs (`<id>TableName`, one per entry of TABLES), under the variable the code reads.
  const tables = Object.fromEntries(TABLES.flatMap((spec) => (outputs[`${spec.id}TableName`] ? [[spec.envVar, outputs[`${spec.id}TableName`]!]] : [])));
  return {
    AWS_REGION: outputs.Region ?? region ?? 'us-east-1',
    ...tables,
    PROVIDER_KEYS_KMS_KEY_ID: outputs.ProviderKeysKmsKeyId!,
    // `webhook redeliver` puts a delivery on the webhook queue (stacks before webhooks have no such output).
    ...(outputs.WebhookQueueUrl ? { WEBHOOK_QUEUE_URL: outputs.WebhookQueueUrl } : {}),
  };
}
