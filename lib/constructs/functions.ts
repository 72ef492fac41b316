import { AssetHashType, type BundlingOptions, DockerImage, type Duration, type ILocalBundling, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { buildSync } from 'esbuild';
import { esbuildOptions, LAMBDA_HANDLER, LAMBDA_NODE_OPTIONS, PROJECT_ROOT } from '../bundling.ts';
import { logRetentionFor, removalPolicyFor } from './lifecycle.ts';

/** What the metrics the functions emit are filed under (see lambdas/observability/metrics.ts). */
export const METRICS_NAMESPACE = 'PromptGateway';
/** The `service` of logs and the metrics' dimension: one per stage, so stages can share an account and region. */
export const serviceName = (stage: string) => `prompt-gateway-${stage}`;

export interface GatewayFunctionProps {
  /** Absolute path of the handler's entry file. */
  readonly entry: string;
  readonly description: string;
  readonly timeout: Duration;
  readonly memorySize: number;
  /** Variables on top of the common ones (stage, Powertools, source maps). */
  readonly environment?: Record<string, string>;
  readonly stage: string;
  readonly production: boolean;
  /**
   * Lambda's recursive-loop detection: Terminate (the default) stops a chain of invocations through a queue after
   * about 16 hops; Allow lets it run — only for a function whose manifest entry declares `recursion` (docs/deploy.md,
   * "Recursive loops").
   */
  readonly recursiveLoop?: lambda.RecursiveLoop;
}

/**
 * Bundles one handler into the asset's folder with the esbuild in node_modules, in this process (lib/bundling.ts:
 * index.mjs and its chunks). NodejsFunction does the same, but cannot be used: it passes esbuild `--outfile`, one
 * file, so no code splitting.
 *
 * The asset cache of a synth (AssetStaging) keys each bundling by its options as JSON: `entry` is an own field so
 * that each function's key names its entry — a plain `{ tryBundle }`, which JSON shows as `{}`, would give every
 * function the first one's bundle.
 */
class LocalEsbuild implements ILocalBundling {
  constructor(readonly entry: string) {}

  tryBundle(outputDir: string): boolean {
    // Throws on a build error, which fails the synth with esbuild's message; never falls back to Docker.
    buildSync(esbuildOptions(this.entry, outputDir));
    return true;
  }
}

/** The asset of one handler: the repository as the source, esbuild's output folder as the code, hashed by its output. */
function handlerCode(entry: string): lambda.Code {
  const bundling: BundlingOptions = {
    // Required by the type, never used: the local bundling above always succeeds or throws (as NodejsFunction does).
    image: DockerImage.fromRegistry('dummy'),
    local: new LocalEsbuild(entry),
  };
  return lambda.Code.fromAsset(PROJECT_ROOT, { assetHashType: AssetHashType.OUTPUT, bundling });
}

/**
 * One gateway Lambda: an ESM bundle built locally with esbuild (never Docker), Node 22 on ARM, its own log group
 * with a retention, and its own role that starts with nothing but writing to that log group — every other
 * permission is granted explicitly by the stack, resource by resource.
 */
export class GatewayFunction extends Construct {
  readonly fn: lambda.Function;
  readonly role: iam.Role;
  readonly logGroup: logs.LogGroup;

  constructor(scope: Construct, id: string, props: GatewayFunctionProps) {
    super(scope, id);
    this.logGroup = new logs.LogGroup(this, 'Logs', {
      retention: logRetentionFor(props.production),
      removalPolicy: removalPolicyFor(props.production),
    });

    // A role of our own instead of the default one with the AWSLambdaBasicExecutionRole managed policy
    // (logs:CreateLogGroup/CreateLogStream/PutLogEvents on every log group): this one may write to its group only.
    this.role = new iam.Role(this, 'Role', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      description: `${props.description} (${props.stage})`,
    });
    this.logGroup.grantWrite(this.role);

    this.fn = new lambda.Function(this, 'Function', {
      code: handlerCode(props.entry),
      handler: LAMBDA_HANDLER,
      description: props.description,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      timeout: props.timeout,
      memorySize: props.memorySize,
      role: this.role,
      logGroup: this.logGroup,
      recursiveLoop: props.recursiveLoop ?? lambda.RecursiveLoop.TERMINATE,
      environment: {
        STAGE: props.stage,
        NODE_OPTIONS: LAMBDA_NODE_OPTIONS,
        POWERTOOLS_SERVICE_NAME: serviceName(props.stage),
        POWERTOOLS_METRICS_NAMESPACE: METRICS_NAMESPACE,
        POWERTOOLS_LOG_LEVEL: 'INFO',
        ...props.environment,
      },
    });
    // The role must exist with its log permission before the function does, or the first cold start cannot log.
    this.fn.node.addDependency(this.role);
    Validations.of(this.fn).acknowledge({
      id: 'AwsSolutions-L1',
      reason:
        "Pinned to nodejs22.x on purpose: the project's own toolchain (the `node` devDependency every npm script and " +
        'test runs on) is Node 22, so the deployed major is the tested one. Move both together to 24.',
    });
  }
}
