import { type CfnResource, Validations } from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigateway';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import type { RestRoute } from '../../lambdas/conjure/routes.ts';
import type { ApiGatewayAccount } from './api-gateway-account.ts';
import { logRetentionFor, removalPolicyFor } from './lifecycle.ts';

/** Per-stage throttling: the steady rate (requests/s) and the burst above it. */
export const CONJURE_THROTTLING = { rateLimit: 50, burstLimit: 100 } as const;

export interface ConjureApiProps {
  readonly stage: string;
  readonly production: boolean;
  /**
   * The functions behind the API and the routes each one serves: the manifest's `rest` triggers
   * (lambdas/handlers/manifest.ts; conjure's routes are CONJURE_ROUTES in lambdas/conjure/routes.ts).
   */
  readonly integrations: ReadonlyArray<{ readonly handler: lambda.IFunction; readonly routes: readonly RestRoute[] }>;
  /** The stack's API Gateway CloudWatch role setting: the stage, which logs, is created after it. */
  readonly account: ApiGatewayAccount;
}

/**
 * API Gateway REST API in front of the conjure function, one method per route of its manifest entry: a regional
 * endpoint, a stage named after the gateway stage with throttling, JSON access logs and error-level execution logs
 * (both with a retention), a request validator on every method. Authorization is the gateway's own JWT check inside the function.
 */
export class ConjureApi extends Construct {
  readonly api: apigw.RestApi;
  readonly accessLogs: logs.LogGroup;
  /** The stage's base URL, without a trailing slash: `${url}/usage`. */
  readonly url: string;

  constructor(scope: Construct, id: string, props: ConjureApiProps) {
    super(scope, id);
    const removalPolicy = removalPolicyFor(props.production);
    const retention = logRetentionFor(props.production);

    this.accessLogs = new logs.LogGroup(this, 'AccessLogs', { retention, removalPolicy });

    this.api = new apigw.RestApi(this, 'Api', {
      restApiName: `prompt-gateway-${props.stage}-conjure`,
      description: `Prompt gateway (${props.stage}): /usage and the incubate endpoints`,
      endpointTypes: [apigw.EndpointType.REGIONAL],
      // API Gateway can log (access or execution logs) only once the account names a CloudWatch role: the stack's one
      // ApiGatewayAccount, shared with the WebSocket API (attached below), not one of the REST API's own.
      cloudWatchRole: false,
      deployOptions: {
        stageName: props.stage,
        throttlingRateLimit: CONJURE_THROTTLING.rateLimit,
        throttlingBurstLimit: CONJURE_THROTTLING.burstLimit,
        accessLogDestination: new apigw.LogGroupLogDestination(this.accessLogs),
        accessLogFormat: apigw.AccessLogFormat.jsonWithStandardFields({
          caller: false,
          httpMethod: true,
          ip: true,
          protocol: true,
          requestTime: true,
          resourcePath: true,
          responseLength: true,
          status: true,
          user: false,
        }),
        loggingLevel: apigw.MethodLoggingLevel.ERROR,
        // Never log bodies: they carry tokens.
        dataTraceEnabled: false,
        metricsEnabled: false,
        tracingEnabled: false,
      },
    });

    // Execution logs go to a group API Gateway names itself; created here so it has a retention and goes with
    // the stack instead of living forever.
    const executionLogs = new logs.LogGroup(this, 'ExecutionLogs', {
      logGroupName: `API-Gateway-Execution-Logs_${this.api.restApiId}/${props.stage}`,
      retention,
      removalPolicy,
    });
    this.api.deploymentStage.node.addDependency(executionLogs);
    props.account.attach(this.api.node.defaultChild as CfnResource, this.api.deploymentStage);

    const validator = this.api.addRequestValidator('Validator', {
      requestValidatorName: 'body-and-parameters',
      validateRequestBody: true,
      validateRequestParameters: true,
    });
    const routed = new Set<string>();
    for (const { handler, routes } of props.integrations) {
      const integration = new apigw.LambdaIntegration(handler, { proxy: true, allowTestInvoke: false });
      for (const route of routes) {
        const key = `${route.method} ${route.path}`;
        if (routed.has(key)) throw new Error(`Two functions serve ${key} on the conjure API`);
        routed.add(key);
        this.api.root.resourceForPath(route.path).addMethod(route.method, integration, { requestValidator: validator });
      }
    }

    // The stack outputs ConjureUrl (without a trailing slash) instead of RestApi's own "Endpoint" output.
    this.api.node.tryRemoveChild('Endpoint');
    this.url = `https://${this.api.restApiId}.execute-api.${this.api.env.region}.${this.api.stack.urlSuffix}/${props.stage}`;

    Validations.of(this.api).acknowledge(
      {
        id: 'AwsSolutions-APIG4',
        reason:
          'Every conjure endpoint authenticates its caller itself: a project-signed HS256 JWT (Authorization: Bearer or ' +
          'options.token in the body) verified against the registry by the function. An API Gateway authorizer cannot ' +
          'check it without the project secret lookup, and the spec prescribes the 401 bodies the function returns.',
      },
      {
        id: 'AwsSolutions-COG4',
        reason: "Callers are end users of developers' projects holding project-signed JWTs, not Cognito users; see AwsSolutions-APIG4.",
      },
      {
        id: 'AwsSolutions-APIG3',
        reason:
          'No WAF web ACL by default: it costs a fixed monthly fee even when idle, and abuse is bounded by stage ' +
          'throttling plus per-user budgets enforced on every request. Attach a web ACL to the stage where needed.',
      },
    );
  }
}
