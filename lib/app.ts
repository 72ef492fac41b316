import { type App, Validations } from 'aws-cdk-lib';
import { originList } from '../lambdas/origins/pattern.ts';
import { GatewayStack } from './gateway-stack.ts';
import { gatewayNagPacks } from './nag.ts';

/** What a deployment is configured with, read from CDK context (`-c key=value` or cdk.json). */
export interface GatewayAppOptions {
  readonly stage: string;
  readonly production: boolean;
  readonly upstreams: { anthropic?: string; openai?: string; openrouter?: string };
  readonly alarmTopicArn?: string;
  /**
   * The region to deploy to, when known at synth: `-c region=…`, else the CLI's (CDK_DEFAULT_REGION, from the
   * profile). It becomes the stack's env region and must be one of STREAMING_REGIONS (lib/regions.ts); unknown, the
   * stack is environment-agnostic and a CloudFormation rule refuses an unsupported region at deploy.
   */
  readonly region?: string;
  /**
   * The origins whose pages may call the deployment at all: `-c corsOrigins=https://app.example.com,https://*.example.com`
   * (origin patterns, lambdas/origins/pattern.ts), the functions' CORS_ORIGINS; unset, any origin (projects narrow
   * it with `gateway project set-origins`; docs/browser.md).
   */
  readonly corsOrigins?: string;
}

const STAGE = /^[a-z][a-z0-9-]{0,19}$/;
const REGION = /^[a-z]{2}(-[a-z]+)+-\d+$/;

/**
 * Context keys: `stage` (default `dev`), `production` (default: true only for stage `prod`), `anthropicBaseUrl`,
 * `openaiBaseUrl`, `openrouterBaseUrl`, `alarmTopicArn`, `region` (default: the CLI's CDK_DEFAULT_REGION, if any),
 * `corsOrigins` (default: any origin).
 */
export function gatewayOptions(app: App, environment: NodeJS.ProcessEnv = process.env): GatewayAppOptions {
  const ctx = (key: string): unknown => app.node.tryGetContext(key);
  const stage = String(ctx('stage') ?? 'dev');
  if (!STAGE.test(stage)) throw new Error(`Context "stage" must match ${STAGE} (it names resources), got "${stage}"`);
  const production = parseBoolean('production', ctx('production')) ?? stage === 'prod';
  const text = (key: string): string | undefined => {
    const value = ctx(key);
    return value === undefined || value === '' ? undefined : String(value);
  };
  const upstreams: GatewayAppOptions['upstreams'] = {};
  for (const provider of ['anthropic', 'openai', 'openrouter'] as const) {
    const url = text(`${provider}BaseUrl`);
    if (url === undefined) continue;
    new URL(url); // a malformed URL fails the synth, not the first request
    upstreams[provider] = url;
  }
  const alarmTopicArn = text('alarmTopicArn');
  const region = text('region') ?? (environment.CDK_DEFAULT_REGION || undefined);
  if (region !== undefined && !REGION.test(region)) throw new Error(`Context "region" must be an AWS region name such as eu-west-1, got "${region}"`);
  const corsText = text('corsOrigins');
  let corsOrigins: string | undefined;
  if (corsText !== undefined && corsText.trim() !== '*') {
    // Checked at synth with the functions' own grammar: a typo fails the synth, not every page's first request.
    const parsed = originList(Number.MAX_SAFE_INTEGER).safeParse(corsText.split(',').filter((o) => o.trim() !== ''));
    if (!parsed.success) throw new Error(`Context "corsOrigins": ${parsed.error.issues[0]?.message ?? 'not a list of origins'}`);
    corsOrigins = parsed.data.join(',');
  }
  return {
    stage,
    production,
    upstreams,
    ...(alarmTopicArn ? { alarmTopicArn } : {}),
    ...(region ? { region } : {}),
    ...(corsOrigins ? { corsOrigins } : {}),
  };
}

function parseBoolean(key: string, value: unknown): boolean | undefined {
  if (value === undefined || value === '') return undefined;
  if (value === true || value === 'true') return true;
  if (value === false || value === 'false') return false;
  throw new Error(`Context "${key}" must be true or false, got "${String(value)}"`);
}

export function stackName(stage: string): string {
  return `PromptGateway-${stage}`;
}

/** The gateway app: one stack per stage, checked by cdk-nag (AwsSolutions + the gateway's own pack) on synth. */
export function buildGatewayApp(app: App): GatewayStack {
  const options = gatewayOptions(app);
  const stack = new GatewayStack(app, stackName(options.stage), {
    description: `Prompt gateway (${options.stage})`,
    stage: options.stage,
    production: options.production,
    upstreams: options.upstreams,
    ...(options.alarmTopicArn ? { alarmTopicArn: options.alarmTopicArn } : {}),
    ...(options.corsOrigins ? { corsOrigins: options.corsOrigins } : {}),
    terminationProtection: options.production,
    // Known at synth, the region is checked there (lib/regions.ts); unknown, the template checks it at deploy.
    ...(options.region ? { env: { region: options.region } } : {}),
  });
  Validations.of(app).addPlugins(...gatewayNagPacks(app));
  return stack;
}
