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
 * CORS too is the function's: every resource with a route also routes OPTIONS (the preflight) to its function, and
 * API Gateway's own error answers give the request's Origin back (docs/deploy.md, "CORS").
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
    // Each resource with a route, and the one function serving it: its OPTIONS goes there too.
    const resources = new Map<string, { resource: apigw.Resource; integration: apigw.LambdaIntegration; handler: lambda.IFunction }>();
    for (const { handler, routes } of props.integrations) {
      const integration = new apigw.LambdaIntegration(handler, { proxy: true, allowTestInvoke: false });
      for (const route of routes) {
        const key = `${route.method} ${route.path}`;
        if (routed.has(key)) throw new Error(`Two functions serve ${key} on the conjure API`);
        routed.add(key);
        const resource = this.api.root.resourceForPath(route.path);
        const served = resources.get(resource.path);
        if (served && served.handler !== handler) {
          throw new Error(
            `Two functions serve ${resource.path} on the conjure API (${served.handler.node.path}, ${handler.node.path}): its CORS preflight (OPTIONS) ` +
              'can reach only one, and that one must know every method of the path; serve a path from one function',
          );
        }
        resources.set(resource.path, { resource, integration, handler });
        resource.addMethod(route.method, integration, { requestValidator: validator });
      }
    }
    // CORS is the function's: a preflight (OPTIONS with Origin and Access-Control-Request-Method) goes to the function
    // that serves the path, which answers it from the path's methods and the deployment's and the project's origins
    // (docs/deploy.md, "CORS"). So every resource with a route gets an OPTIONS method to the same proxy integration,
    // without authorization: a browser sends a preflight without the page's credentials, so no token. No
    // `defaultCorsPreflightOptions` anywhere: API Gateway would answer the preflight itself (a mock integration),
    // without the function's per-project origins.
    for (const { resource, integration } of resources.values()) {
      const preflight = resource.addMethod('OPTIONS', integration, {
        authorizationType: apigw.AuthorizationType.NONE,
        apiKeyRequired: false,
        requestValidator: validator,
      });
      Validations.of(preflight).acknowledge(
        {
          id: 'AwsSolutions-APIG4',
          reason:
            'A CORS preflight carries no credentials: the browser sends OPTIONS with Origin and Access-Control-Request-Method ' +
            'only, never the Authorization header or body holding the token. The function answers it (204 with the ' +
            "Access-Control-Allow-* headers, or a refusal) without doing any work or reading any user's data.",
        },
        {
          id: 'AwsSolutions-COG4',
          reason: 'A CORS preflight carries no credentials of any kind, so no Cognito authorizer could accept it; see AwsSolutions-APIG4.',
        },
      );
    }

    // API Gateway's own answers (429 throttled, 403 for a path or method it does not route, 413 over 10 MB, 504 at
    // the integration time-out…) are not the function's, so the function cannot add its CORS headers to them. Without
    // Access-Control-Allow-Origin a page sees only an opaque network error; with it, it can read the status and the
    // message (and back off on a 429). A gateway response may map a header from the request's
    // (`method.request.header.<name>`, API Gateway's developer guide, "Gateway responses"): the request's Origin is given
    // back, with `Vary: Origin` for caches. A request without Origin is no page's, and no browser reads the header. These answers
    // carry no data of anyone's, and no credentials are involved (no Access-Control-Allow-Credentials), so every origin
    // may read them, whatever CORS_ORIGINS or the project allows.
    for (const [id, type] of [
      ['Default4xx', apigw.ResponseType.DEFAULT_4XX],
      ['Default5xx', apigw.ResponseType.DEFAULT_5XX],
    ] as const) {
      this.api.addGatewayResponse(id, {
        type,
        responseHeaders: { 'Access-Control-Allow-Origin': 'method.request.header.Origin', Vary: "'Origin'" },
      });
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
          'check it without the project secret lookup, and the spec prescribes the 401 bodies the function returns. ' +
          'GET /openapi.json alone takes no token: it answers the public description of the API, bundled into the ' +
          'function, without reading any store or any user data.',
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
