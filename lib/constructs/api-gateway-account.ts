import { type CfnResource, RemovalPolicy, Validations } from 'aws-cdk-lib';
import * as apigw from 'aws-cdk-lib/aws-apigateway';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct, type IConstruct } from 'constructs';

/**
 * API Gateway's CloudWatch role for the account and region: a role with the AWS managed policy made for it
 * (AmazonAPIGatewayPushToCloudWatchLogs) and the `AWS::ApiGateway::Account` setting that names it. API Gateway writes
 * no access or execution log of any API, REST or WebSocket, until the account names such a role, and a stage with
 * logging configured fails to create without it — so every logging stage of the stack is ordered after it
 * (`attach`). One per stack: the setting is one per account and region, shared with every other API there, so
 * both are RETAINed when the stack goes (docs/deploy.md, "First deploy").
 */
export class ApiGatewayAccount extends Construct {
  readonly role: iam.Role;
  readonly account: apigw.CfnAccount;

  constructor(scope: Construct, id: string) {
    super(scope, id);
    this.role = new iam.Role(this, 'CloudWatchRole', {
      assumedBy: new iam.ServicePrincipal('apigateway.amazonaws.com'),
      description: 'API Gateway writes access and execution logs with this role (account-level setting)',
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AmazonAPIGatewayPushToCloudWatchLogs')],
    });
    this.role.applyRemovalPolicy(RemovalPolicy.RETAIN);
    this.account = new apigw.CfnAccount(this, 'Account', { cloudWatchRoleArn: this.role.roleArn });
    this.account.applyRemovalPolicy(RemovalPolicy.RETAIN);

    Validations.of(this.role).acknowledge({
      id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]',
      reason:
        'The account-level role API Gateway needs to write any access or execution logs. The AWS managed policy is the ' +
        'one AWS documents for exactly this role; it is not attached to any function.',
    });
  }

  /**
   * Orders a logging API's stage after the account setting (`DependsOn`), and the setting after the API itself, as
   * CDK does for the REST API it configures (`cloudWatchRole: true`): the stage is created only once API Gateway can
   * log. `api` is the API's own resource (`AWS::ApiGateway::RestApi`, `AWS::ApiGatewayV2::Api`), not its L2
   * construct, whose stages are its children.
   */
  attach(api: CfnResource, stage: IConstruct): void {
    this.account.node.addDependency(api);
    stage.node.addDependency(this.account);
  }
}
