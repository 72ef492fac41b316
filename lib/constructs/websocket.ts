import { type CfnResource, Stack, Validations } from 'aws-cdk-lib';
import * as apigwv2 from 'aws-cdk-lib/aws-apigatewayv2';
import { WebSocketLambdaIntegration } from 'aws-cdk-lib/aws-apigatewayv2-integrations';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import { nagEnvironment } from '../nag.ts';
import type { ApiGatewayAccount } from './api-gateway-account.ts';
import { logRetentionFor, removalPolicyFor } from './lifecycle.ts';

/** Per-stage throttling of a WebSocket API (messages and connects per second, and the burst above). */
export const WEBSOCKET_THROTTLING = { rateLimit: 50, burstLimit: 100 } as const;

export interface GatewayWebSocketProps {
  readonly stage: string;
  readonly production: boolean;
  /** The function of a manifest entry with a `websocket` trigger: it gets $connect, $disconnect and $default. */
  readonly handler: lambda.IFunction;
  readonly description: string;
  /** The stack's API Gateway CloudWatch role setting: the stage, which logs, is created after it. */
  readonly account: ApiGatewayAccount;
}

/**
 * An API Gateway WebSocket API whose three routes ($connect, $disconnect, $default) all invoke one function, a
 * stage named after the gateway stage with throttling and JSON access logs (with a retention), and the function's
 * right to answer its clients (`execute-api:ManageConnections` on this API's connections only); grantConnections()
 * gives other functions the same right. Authorization is the function's own token check on $connect, as on the
 * other URLs. No CORS here: a browser sends no preflight for a WebSocket; the function checks the upgrade's Origin
 * against the project's origins itself (docs/deploy.md, "CORS").
 */
export class GatewayWebSocket extends Construct {
  readonly api: apigwv2.WebSocketApi;
  readonly stage: apigwv2.WebSocketStage;
  readonly accessLogs: logs.LogGroup;

  constructor(scope: Construct, id: string, props: GatewayWebSocketProps) {
    super(scope, id);
    const integration = new WebSocketLambdaIntegration('Handler', props.handler);
    this.api = new apigwv2.WebSocketApi(this, 'Api', {
      apiName: `prompt-gateway-${props.stage}-${id.toLowerCase()}`,
      description: `${props.description} (${props.stage})`,
      connectRouteOptions: { integration },
      disconnectRouteOptions: { integration },
      defaultRouteOptions: { integration },
    });
    this.accessLogs = new logs.LogGroup(this, 'AccessLogs', {
      retention: logRetentionFor(props.production),
      removalPolicy: removalPolicyFor(props.production),
    });
    this.stage = new apigwv2.WebSocketStage(this, 'Stage', {
      webSocketApi: this.api,
      stageName: props.stage,
      autoDeploy: true,
      throttle: WEBSOCKET_THROTTLING,
      accessLogSettings: { destination: new apigwv2.LogGroupLogDestination(this.accessLogs) },
    });
    // Access logs need the account's CloudWatch role first, as the REST API's stage does.
    props.account.attach(this.api.node.defaultChild as CfnResource, this.stage);
    this.grantConnections(props.handler, { callbackUrl: false });

    Validations.of(this.api).acknowledge({
      id: 'AwsSolutions-APIG4',
      reason:
        'The WebSocket routes authenticate the caller in the function: $connect verifies the project-signed HS256 JWT ' +
        '(query string or header) against the registry and refuses the connection otherwise, as the other URLs do; an ' +
        'API Gateway authorizer could not check it without the project secret lookup.',
    });
  }

  /**
   * Lets `fn` post to, read and close this API's connections — `execute-api:ManageConnections` on this API's
   * `@connections/*` only — and, unless `callbackUrl: false`, tells it the stage's management endpoint
   * (WEBSOCKET_CALLBACK_URL). The handler itself reads that endpoint from each event; a function that is not the
   * handler (a worker streaming a turn's frames, a sweeper closing idle connections) has no event to read it from.
   */
  grantConnections(fn: lambda.IFunction, options: { callbackUrl?: boolean } = {}): void {
    this.api.grantManageConnections(fn);
    if (options.callbackUrl !== false) {
      if (!(fn instanceof lambda.Function)) throw new Error(`${fn.node.path}: only a function of this stack can be told WEBSOCKET_CALLBACK_URL`);
      fn.addEnvironment('WEBSOCKET_CALLBACK_URL', this.callbackUrl);
    }
    // The grant is a statement of the function's role policy, so the acknowledgement goes on the role.
    const { region, account } = nagEnvironment(this);
    Validations.of(fn.role ?? fn).acknowledge({
      id: `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:${region}:${account}:<${Stack.of(this).getLogicalId(this.api.node.defaultChild as never)}>/*/*/@connections/*]`,
      reason:
        'Connection ids are created by API Gateway at run time, so the grant names this WebSocket API and allows ' +
        "posting to (and closing) any of its connections — never another API's.",
    });
  }

  /** `wss://…/<stage>`: what clients connect to. */
  get url(): string {
    return this.stage.url;
  }

  /** `https://…/<stage>`: the management endpoint a ConnectionSender posts to. */
  get callbackUrl(): string {
    return this.stage.callbackUrl;
  }
}
