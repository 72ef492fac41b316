import { join } from 'node:path';
import { CfnOutput, Duration, Fn, Stack, Validations, type StackProps } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import type { RestRoute } from '../lambdas/conjure/routes.ts';
import { FUNCTIONS, type FunctionAccess, type FunctionId, type FunctionSpec } from '../lambdas/handlers/manifest.ts';
import { TABLES } from '../lambdas/store/tables.ts';
import { PROJECT_ROOT } from './bundling.ts';
import { ApiGatewayAccount } from './constructs/api-gateway-account.ts';
import { ConjureApi } from './constructs/api.ts';
import { GatewayData } from './constructs/data.ts';
import { GatewayFunction } from './constructs/functions.ts';
import { GatewayObservability } from './constructs/observability.ts';
import { GatewayQueues } from './constructs/queues.ts';
import { GatewayScheduling } from './constructs/scheduling.ts';
import { GatewaySecrets } from './constructs/secrets.ts';
import { GatewayWebSocket } from './constructs/websocket.ts';
import { requireStreamingRegion } from './regions.ts';

export interface GatewayStackProps extends StackProps {
  /** Stage name (`dev`, `prod`, …): part of resource names, the API stage, the schedule group. */
  readonly stage: string;
  /** Deletion protection on tables, and RETAIN on everything holding data or keys. */
  readonly production: boolean;
  /** Upstream base URLs; unset means the providers' public APIs (lambdas/config/env.ts defaults). */
  readonly upstreams?: { readonly anthropic?: string; readonly openai?: string; readonly openrouter?: string };
  /** An existing SNS topic for alarm notifications. */
  readonly alarmTopicArn?: string;
  /** CORS_ORIGINS of every function (canonical origin patterns, comma-separated); unset: any origin (lib/app.ts). */
  readonly corsOrigins?: string;
  /** The functions to deploy: the manifest (lambdas/handlers/manifest.ts) unless a test passes a variant. */
  readonly functions?: readonly FunctionSpec[];
}

/**
 * The whole gateway in one stack:
 * - data: the DynamoDB tables of TABLES, the provider-keys KMS key, the Anthropic key secret
 * - functions: one per entry of the function manifest, each with its trigger and its grants —
 *   channeling behind a streaming function URL (the Anthropic-compatible proxy), conjure behind the REST API (/usage,
 *   /incubate…), the vessel executor on the run queue, the vessel reconciler on an EventBridge rule, the /ws sessions
 *   behind a WebSocket API with their turn worker on the turn queue and their sweeper on a rule
 * - async: run, webhook and turn queues with DLQs, the Scheduler group and delivery role
 * - observability: dashboard and alarms
 */
export class GatewayStack extends Stack {
  readonly data: GatewayData;
  readonly secrets: GatewaySecrets;
  readonly queues: GatewayQueues;
  readonly scheduling: GatewayScheduling;
  /** Every deployed function, by manifest id. */
  readonly functions: Readonly<Record<string, GatewayFunction>>;
  /** The REST API of the `rest` functions (absent only when no function has a `rest` trigger). */
  readonly conjureApi?: ConjureApi;
  /** The WebSocket API of each `websocket` function, by manifest id. */
  readonly webSockets: Readonly<Record<string, GatewayWebSocket>>;
  /** API Gateway's account-level CloudWatch role setting (absent only when the stack has no API Gateway API). */
  readonly apiGatewayAccount?: ApiGatewayAccount;

  constructor(scope: Construct, id: string, props: GatewayStackProps) {
    super(scope, id, props);
    const { stage, production } = props;
    const specs: readonly FunctionSpec[] = props.functions ?? FUNCTIONS;
    const connectionUsers = specs.filter((s) => s.access.connections);
    const webSocketHandlers = specs.filter((s) => s.trigger.kind === 'websocket');
    if (connectionUsers.length && webSocketHandlers.length !== 1) {
      throw new Error(
        `${connectionUsers.map((s) => s.id).join(', ')} ${connectionUsers.length === 1 ? 'asks' : 'ask'} for \`connections\` ` +
          "(the connections of the gateway's WebSocket API), so the manifest needs exactly one function with a websocket " +
          `trigger; it has ${webSocketHandlers.length ? `${webSocketHandlers.length} (${webSocketHandlers.map((s) => s.id).join(', ')})` : 'none'}`,
      );
    }

    // Function URLs in RESPONSE_STREAM mode exist in some regions only: refused at synth, or at deploy by a rule.
    if (specs.some((s) => s.trigger.kind === 'streaming-url')) requireStreamingRegion(this);

    this.data = new GatewayData(this, 'Data', { production });
    this.secrets = new GatewaySecrets(this, 'Secrets', { stage, production });
    this.queues = new GatewayQueues(this, 'Queues', { production });
    // Schedules deliver to the queues the functions that schedule may send to (run, webhook), and to no other.
    const scheduledQueues = [...new Set(specs.filter((s) => s.access.scheduler).flatMap((s) => s.access.queues))];
    this.scheduling = new GatewayScheduling(this, 'Scheduling', { stage, targetQueues: scheduledQueues.map((name) => this.queues.byName[name].queue) });
    const { tables } = this.data;
    // API Gateway's CloudWatch role setting, once for the stack's APIs (REST and WebSocket): their stages log.
    const apiAccount = specs.some((s) => s.trigger.kind === 'rest' || s.trigger.kind === 'websocket')
      ? new ApiGatewayAccount(this, 'ApiGatewayAccount')
      : undefined;
    this.apiGatewayAccount = apiAccount;
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

    // --- Outputs: the operator CLI (npm run gateway -- <command> --stack <name>) reads these names ---
    const output = (name: string, value: string, description: string) => new CfnOutput(this, name, { value, description });

    // --- The functions of the manifest, each with its grants and its trigger ---
    const functions: Record<string, GatewayFunction> = {};
    const restIntegrations: Array<{ handler: lambda.IFunction; routes: readonly RestRoute[] }> = [];
    const webSockets: Record<string, GatewayWebSocket> = {};
    for (const spec of specs) {
      if (functions[spec.id]) throw new Error(`Two functions of the manifest are called ${spec.id}`);
      const target = new GatewayFunction(this, spec.id, {
        stage,
        production,
        entry: join(PROJECT_ROOT, spec.entry),
        description: spec.description,
        timeout: Duration.seconds(spec.timeoutSeconds),
        memorySize: spec.memoryMb,
        // A loop through its own queue is stopped by Lambda unless the manifest declares it (docs/deploy.md).
        recursiveLoop: spec.recursion?.allowed ? lambda.RecursiveLoop.ALLOW : lambda.RecursiveLoop.TERMINATE,
        environment: { ...tableEnv, ...(spec.access.providers ? providerEnv : {}), ...(props.corsOrigins ? { CORS_ORIGINS: props.corsOrigins } : {}) },
      });
      functions[spec.id] = target;
      this.grantAccess(target, spec.access);

      const trigger = spec.trigger;
      switch (trigger.kind) {
        case 'streaming-url': {
          const url = this.publicStreamingUrl(target);
          output(
            `${spec.id}Url`,
            withoutTrailingSlash(url.url),
            `Base URL of the ${spec.id} function URL, no trailing slash: clients append ${trigger.paths.map((p) => `${p}/…`).join(' or ')}`,
          );
          break;
        }
        case 'rest':
          restIntegrations.push({ handler: target.fn, routes: trigger.routes });
          break;
        case 'sqs':
          this.queues.attachConsumer(trigger.queue, target.fn, {
            ...(trigger.batchSize ? { batchSize: trigger.batchSize } : {}),
            ...(trigger.maxConcurrency ? { maxConcurrency: trigger.maxConcurrency } : {}),
          });
          break;
        case 'websocket': {
          const ws = new GatewayWebSocket(this, `${spec.id}WebSocket`, {
            stage,
            production,
            handler: target.fn,
            description: spec.description,
            account: apiAccount!,
          });
          webSockets[spec.id] = ws;
          output(`${spec.id}WebSocketUrl`, ws.url, `${spec.description}: the wss:// URL clients connect to`);
          break;
        }
        case 'schedule':
          new events.Rule(this, `${spec.id}Schedule`, {
            description: `${spec.description} (${stage}): ${trigger.expression}`,
            schedule: events.Schedule.expression(trigger.expression),
            targets: [new targets.LambdaFunction(target.fn)],
          });
          break;
        default:
          throw new Error(`${spec.id}: unknown trigger ${JSON.stringify(trigger satisfies never)}`);
      }
    }
    this.functions = functions;
    this.webSockets = webSockets;
    // Functions that post to (or close) the WebSocket API's connections without being its handler: the API, built
    // with its handler in the loop above, exists now. It depends on its handler only; these depend on it.
    for (const spec of connectionUsers) {
      const ws = webSockets[webSocketHandlers[0]!.id]!;
      ws.grantConnections(functions[spec.id]!.fn);
    }
    if (restIntegrations.length) {
      this.conjureApi = new ConjureApi(this, 'Conjure', { stage, production, integrations: restIntegrations, account: apiAccount! });
      output('ConjureUrl', this.conjureApi.url, 'Base URL of /usage and the incubate endpoints');
    }

    const observability = new GatewayObservability(this, 'Observability', {
      stage,
      functions: Object.entries(functions).map(([fnId, f]) => ({ id: fnId, fn: f.fn })),
      ...(this.conjureApi ? { api: this.conjureApi.api } : {}),
      deadLetterQueues: this.queues.all.map((q) => ({ id: `${q.label}DeadLetterQueue`, queue: q.deadLetterQueue })),
      ...(props.alarmTopicArn ? { alarmTopicArn: props.alarmTopicArn } : {}),
    });

    for (const spec of TABLES) output(`${spec.id}TableName`, tables[spec.id].tableName, `DynamoDB table: ${spec.purpose}`);
    output('ProviderKeysKmsKeyId', this.secrets.providerKeysKey.keyArn, "KMS key (ARN) that encrypts projects' provider keys");
    output('AnthropicKeySecretArn', this.secrets.anthropicKey.secretArn, "Secrets Manager secret holding the service's Anthropic key");
    output('Region', this.region, 'Region of the deployed gateway');
    // The CLI's `webhook redeliver` puts a delivery back on the webhook queue.
    output('WebhookQueueUrl', this.queues.byName.webhook.queue.queueUrl, 'SQS queue of webhook deliveries (gateway webhook redeliver sends to it)');
    output(
      'WebhookDeadLetterQueueUrl',
      this.queues.byName.webhook.deadLetterQueue.queueUrl,
      'Webhook deliveries whose retries are exhausted (docs/webhooks.md)',
    );
    output('DashboardName', observability.dashboard.dashboardName, 'CloudWatch dashboard');
    for (const [fnId, f] of Object.entries(functions)) output(`${fnId}FunctionName`, f.fn.functionName, `Lambda function of ${fnId}`);
  }

  /** The channeling function (the proxy). */
  get channeling(): GatewayFunction {
    return this.functionOf('Channeling');
  }

  /** The conjure function (the REST API's). */
  get conjure(): GatewayFunction {
    return this.functionOf('ConjureApi');
  }

  functionOf(id: FunctionId | (string & {})): GatewayFunction {
    const found = this.functions[id];
    if (!found) throw new Error(`No function ${id} in this stack`);
    return found;
  }

  /**
   * Exactly what the manifest says a function may do, resource by resource: read or read/write its tables (and query
   * their indexes); for a function that calls providers, decrypt the projects' provider keys (Decrypt only) and read
   * the service's Anthropic key; for one that `encrypts` (or `decrypts`), Encrypt (or Decrypt) only with the same
   * key; send to its queues (and dead-letter queues); for one that schedules, create and delete schedules in the
   * gateway's group. (`connections` is granted once every function exists: it names the WebSocket API.)
   */
  private grantAccess(target: GatewayFunction, access: FunctionAccess): void {
    for (const spec of TABLES) {
      const mode = access.tables[spec.id];
      if (mode) this.data.grantData(spec.id, target.fn, mode);
    }
    if (access.providers) {
      this.secrets.providerKeysKey.grantDecrypt(target.fn);
      this.secrets.anthropicKey.grantRead(target.fn);
    }
    if (access.encrypts) this.secrets.grantEncrypt(target.fn);
    if (access.decrypts && !access.providers) this.secrets.grantDecryptOnly(target.fn);
    for (const queue of access.queues) this.queues.grantSend(queue, target.fn);
    for (const queue of access.deadLetters ?? []) this.queues.grantSendToDeadLetter(queue, target.fn);
    if (access.scheduler) this.scheduling.grantScheduling(target.fn);
  }

  /** A public function URL streaming the response (SSE is piped as the provider produces it). */
  private publicStreamingUrl(target: GatewayFunction): lambda.FunctionUrl {
    const url = target.fn.addFunctionUrl({
      authType: lambda.FunctionUrlAuthType.NONE,
      invokeMode: lambda.InvokeMode.RESPONSE_STREAM,
      // No `cors` here, on purpose: the function decides every CORS header and answers every preflight (per route,
      // per project's origins; docs/deploy.md, "CORS"). A function URL with a CORS configuration answers preflights
      // itself and overwrites the Access-Control-* headers of the function's responses with its own.
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
