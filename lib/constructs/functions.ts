import { join } from 'node:path';
import { type Duration, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { LogLevel, NodejsFunction, OutputFormat } from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { HANDLER_BUNDLE, LAMBDA_NODE_OPTIONS, PROJECT_ROOT } from '../bundling.ts';
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
 * One gateway Lambda: an ESM bundle built locally with esbuild (never Docker), Node 22 on ARM, its own log group
 * with a retention, and its own role that starts with nothing but writing to that log group — every other
 * permission is granted explicitly by the stack, resource by resource.
 */
export class GatewayFunction extends Construct {
  readonly fn: NodejsFunction;
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

    this.fn = new NodejsFunction(this, 'Function', {
      entry: props.entry,
      handler: 'handler',
      description: props.description,
      runtime: lambda.Runtime.NODEJS_22_X,
      architecture: lambda.Architecture.ARM_64,
      timeout: props.timeout,
      memorySize: props.memorySize,
      role: this.role,
      logGroup: this.logGroup,
      recursiveLoop: props.recursiveLoop ?? lambda.RecursiveLoop.TERMINATE,
      projectRoot: PROJECT_ROOT,
      depsLockFilePath: join(PROJECT_ROOT, 'package-lock.json'),
      bundling: {
        format: OutputFormat.ESM,
        target: HANDLER_BUNDLE.target,
        minify: HANDLER_BUNDLE.minify,
        sourceMap: HANDLER_BUNDLE.sourcemap,
        sourcesContent: HANDLER_BUNDLE.sourcesContent,
        mainFields: [...HANDLER_BUNDLE.mainFields],
        banner: HANDLER_BUNDLE.banner,
        externalModules: [...HANDLER_BUNDLE.externalModules],
        forceDockerBundling: false,
        logLevel: LogLevel.ERROR,
      },
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
