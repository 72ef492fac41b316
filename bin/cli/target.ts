import { existsSync, readFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';

/**
 * Where the CLI's store is: the running local runtime (it writes DATA_DIR/runtime.json) or a deployed stack (its
 * CloudFormation outputs name the tables and the provider-key KMS key). Returns the environment the registry reads.
 */
export async function targetEnvironment(opts: { stack?: string; region?: string; dataDir?: string }): Promise<Record<string, string>> {
  if (opts.stack) {
    const region = opts.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION;
    const cfn = new CloudFormationClient(region ? { region } : {});
    const out = await cfn.send(new DescribeStacksCommand({ StackName: opts.stack }));
    const outputs = Object.fromEntries((out.Stacks?.[0]?.Outputs ?? []).map((o) => [o.OutputKey!, o.OutputValue!]));
    const need = ['RegistryTableName', 'UsageTableName', 'ProviderKeysKmsKeyId'];
    const missing = need.filter((k) => !outputs[k]);
    if (missing.length) throw new Error(`Stack ${opts.stack} has no output ${missing.join(', ')}; is it a prompt-gateway stack?`);
    return {
      AWS_REGION: outputs.Region ?? region ?? 'us-east-1',
      REGISTRY_TABLE: outputs.RegistryTableName!,
      USAGE_TABLE: outputs.UsageTableName!,
      PROVIDER_KEYS_KMS_KEY_ID: outputs.ProviderKeysKmsKeyId!,
    };
  }
  const dataDir = resolve(opts.dataDir ?? process.env.DATA_DIR ?? '.data');
  const file = join(dataDir, 'runtime.json');
  if (!existsSync(file)) {
    throw new Error(`No running local gateway found (${file} is missing): start it with "npm start", or pass --stack <name> for a deployed one`);
  }
  const runtime = JSON.parse(readFileSync(file, 'utf8')) as { dynamoEndpoint: string; tables: Record<string, string>; keyFile: string };
  return {
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
    DYNAMODB_ENDPOINT: runtime.dynamoEndpoint,
    PROVIDER_KEYS_LOCAL_KEY_FILE: runtime.keyFile,
    ...runtime.tables,
  };
}
