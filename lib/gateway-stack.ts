import { CfnOutput, Duration, Fn, Stack, Validations, type StackProps } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { TABLES } from '../lambdas/store/tables.ts';
import { handlerEntry, type HandlerId } from './bundling.ts';
import { ConjureApi } from './constructs/api.ts';
import { GatewayData } from './constructs/data.ts';
import { GatewayFunction } from './constructs/functions.ts';
import { GatewayObservability } from './constructs/observability.ts';
import { GatewayQueues } from './constructs/queues.ts';
import { GatewayScheduling } from './constructs/scheduling.ts';
import { GatewaySecrets } from './constructs/secrets.ts';

export interface GatewayStackProps extends StackProps {
  /** Stage name (`dev`, `prod`, …): part of resource names, the API stage, the schedule group. */
  readonly stage: string;
  /** Deletion protection on tables, and RETAIN on everything holding data or keys. */
  readonly production: boolean;
  /** Upstream base URLs; unset means the providers' public APIs (lambdas/config/env.ts defaults). */
  readonly upstreams?: { readonly anthropic?: string; readonly openai?: string; readonly openrouter?: string };
  /** An existing SNS topic for alarm notifications. */
  readonly alarmTopicArn?: string;
  /**
   * Entry files by handler; defaults to lambdas/handlers/*. An optional handler (Prompt) whose file does not exist
   * is not deployed.
   */
  readonly entries?: Partial<Record<HandlerId, string>>;
}

/**
 * The whole gateway in one stack:
 * - data: the DynamoDB tables of TABLES, the provider-keys KMS key, the Anthropic key secret
 * - channeling: function URL (RESPONSE_STREAM) → channeling function (the Anthropic-compatible proxy)
 * - conjure: REST API (/usage, later /incubate…) → conjure function; /prompt function URL once its handler exists
 * - async: run and webhook queues with DLQs, the Scheduler group and delivery role (consumers arrive later)
 * - observability: dashboard and alarms
 */
export class GatewayStack extends Stack {
  readonly data: GatewayData;
  readonly secrets: GatewaySecrets;
  readonly queues: GatewayQueues;
  readonly scheduling: GatewayScheduling;
  readonly channeling: GatewayFunction;
  readonly conjure: GatewayFunction;
  readonly prompt?: GatewayFunction;
  readonly conjureApi: ConjureApi;

  constructor(scope: Construct, id: string, props: GatewayStackProps) {
    super(scope, id, props);
    const { stage, production } = props;
    const entry = (handler: HandlerId): string | undefined => props.entries?.[handler] ?? handlerEntry(handler);
    const required = (handler: HandlerId): string => {
      const path = entry(handler);
      if (!path) throw new Error(`The ${handler} handler's entry file is missing`);
      return path;
    };

    this.data = new GatewayData(this, 'Data', { production });
    this.secrets = new GatewaySecrets(this, 'Secrets', { stage, production });
    this.queues = new GatewayQueues(this, 'Queues', { production });
    this.scheduling = new GatewayScheduling(this, 'Scheduling', { stage, runQueue: this.queues.byName.run.queue });
    const { tables } = this.data;
    const tableEnv = this.data.environment();

    const upstreamEnv: Record<string, string> = {
      ...(props.upstreams?.anthropic ? { ANTHROPIC_BASE_URL: props.upstreams.anthropic } : {}),
      ...(props.upstreams?.openai ? { OPENAI_BASE_URL: props.upstreams.openai } : {}),
      ...(props.upstreams?.openrouter ? { OPENROUTER_BASE_URL: props.upstreams.openrouter } : {}),
    };
    const providerEnv = {
      ...upstreamEnv,
      PROVIDER_KEYS_KMS_KEY_ID: this.secrets.providerKeysKey.keyArn,
      ANTHROPIC_API_KEY_SECRET_ARN: this.secrets.anthropicKey.secretArn,
    };
    const common = { stage, production };

    // --- channeling: the proxy ---
    this.channeling = new GatewayFunction(this, 'Channeling', {
      ...common,
      entry: required('Channeling'),
      description: 'Prompt gateway channeling proxy (/v1/messages, /v1/models, /v1/messages/count_tokens)',
      timeout: Duration.minutes(15),
      memorySize: 1024,
      environment: { ...tableEnv, ...providerEnv },
    });
    this.grantProviderAccess(this.channeling);
    const channelingUrl = this.publicStreamingUrl(this.channeling);

    // --- conjure: REST endpoints ---
    this.conjure = new GatewayFunction(this, 'ConjureApi', {
      ...common,
      entry: required('ConjureApi'),
      description: 'Prompt gateway conjure REST API (/usage; /incubate later)',
      timeout: Duration.seconds(29),
      memorySize: 512,
      environment: tableEnv,
    });
    this.grantLedgerAccess(this.conjure);
    this.conjureApi = new ConjureApi(this, 'Conjure', { stage, production, handler: this.conjure.fn });

    // --- /prompt: deployed once lambdas/handlers/prompt.ts exists ---
    const promptEntry = entry('Prompt');
    let promptUrl: lambda.FunctionUrl | undefined;
    if (promptEntry) {
      this.prompt = new GatewayFunction(this, 'Prompt', {
        ...common,
        entry: promptEntry,
        description: 'Prompt gateway /prompt (one-shot agent runs, JSON or SSE)',
        timeout: Duration.minutes(15),
        memorySize: 1024,
        environment: { ...tableEnv, ...providerEnv },
      });
      this.grantProviderAccess(this.prompt);
      tables.Leases.grantReadWriteData(this.prompt.fn);
      promptUrl = this.publicStreamingUrl(this.prompt);
    }

    const functions = [
      { id: 'Channeling', fn: this.channeling.fn },
      { id: 'ConjureApi', fn: this.conjure.fn },
      ...(this.prompt ? [{ id: 'Prompt', fn: this.prompt.fn }] : []),
    ];
    const observability = new GatewayObservability(this, 'Observability', {
      stage,
      functions,
      api: this.conjureApi.api,
      deadLetterQueues: this.queues.all.map((q) => ({ id: `${q.label}DeadLetterQueue`, queue: q.deadLetterQueue })),
      ...(props.alarmTopicArn ? { alarmTopicArn: props.alarmTopicArn } : {}),
    });

    // --- Outputs: the operator CLI (npm run gateway -- <command> --stack <name>) reads these names ---
    const output = (name: string, value: string, description: string) => new CfnOutput(this, name, { value, description });
    output('ChannelingUrl', withoutTrailingSlash(channelingUrl.url), 'Anthropic-compatible base URL (clients append /v1/messages)');
    output('ConjureUrl', this.conjureApi.url, 'Base URL of /usage and the incubate endpoints');
    if (promptUrl) output('PromptUrl', withoutTrailingSlash(promptUrl.url), 'Base URL of the /prompt function URL');
    for (const spec of TABLES) output(`${spec.id}TableName`, tables[spec.id].tableName, `DynamoDB table: ${spec.purpose}`);
    output('ProviderKeysKmsKeyId', this.secrets.providerKeysKey.keyArn, "KMS key (ARN) that encrypts projects' provider keys");
    output('AnthropicKeySecretArn', this.secrets.anthropicKey.secretArn, "Secrets Manager secret holding the service's Anthropic key");
    output('Region', this.region, 'Region of the deployed gateway');
    output('DashboardName', observability.dashboard.dashboardName, 'CloudWatch dashboard');
    for (const { id: fnId, fn } of functions) output(`${fnId}FunctionName`, fn.functionName, `Lambda function of ${fnId}`);
  }

  /** What every gateway function needs: read projects (and their secrets), read and write usage windows. */
  private grantLedgerAccess(target: GatewayFunction): void {
    this.data.tables.Registry.grantReadData(target.fn);
    this.data.tables.Usage.grantReadWriteData(target.fn);
  }

  /**
   * What a function that calls providers needs on top: decrypt the projects' provider keys (Decrypt only —
   * encryption happens in the operator CLI) and read the service's Anthropic key.
   */
  private grantProviderAccess(target: GatewayFunction): void {
    this.grantLedgerAccess(target);
    this.secrets.providerKeysKey.grantDecrypt(target.fn);
    this.secrets.anthropicKey.grantRead(target.fn);
  }

  /** A public function URL streaming the response (SSE is piped as the provider produces it). */
  private publicStreamingUrl(target: GatewayFunction): lambda.FunctionUrl {
    const url = target.fn.addFunctionUrl({
      authType: lambda.FunctionUrlAuthType.NONE,
      invokeMode: lambda.InvokeMode.RESPONSE_STREAM,
    });
    Validations.of(url).acknowledge({
      id: 'PromptGateway-LambdaFunctionUrlAuth',
      reason:
        'Public by design: callers are Anthropic SDK clients (Claude Code, apps) that cannot sign SigV4 requests. ' +
        'The function authenticates every request itself — a project-signed HS256 JWT in x-api-key or ' +
        'Authorization: Bearer, verified before any provider call or budget reservation (401 otherwise).',
    });
    return url;
  }
}

/** `https://<id>.lambda-url.<region>.on.aws/` → `https://<id>.lambda-url.<region>.on.aws`. */
function withoutTrailingSlash(url: string): string {
  return Fn.join('', ['https://', Fn.select(2, Fn.split('/', url))]);
}
