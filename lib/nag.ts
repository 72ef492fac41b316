import { type CfnResource, Stack, Token } from 'aws-cdk-lib';
import { AwsSolutionsChecks, NagMessageLevel, NagPack, rules, type NagPackProps } from 'cdk-nag';
import type { IConstruct } from 'constructs';

/**
 * Checks cdk-nag ships but the AwsSolutions pack does not apply, which matter for this gateway. Today: a Lambda
 * function URL without IAM auth is public, so each one must be acknowledged with the reason it may be.
 */
export class GatewayChecks extends NagPack {
  readonly name = 'PromptGateway';

  constructor(scope?: IConstruct, props?: NagPackProps) {
    super(scope, props);
    this.packName = 'PromptGateway';
  }

  protected checkResource(node: CfnResource): void {
    this.applyRule({
      info: 'The Lambda function URL does not use IAM authentication: anyone on the internet can invoke it.',
      explanation: 'A public function URL must authenticate callers itself; acknowledge it with how it does.',
      level: NagMessageLevel.ERROR,
      rule: rules.lambda.LambdaFunctionUrlAuth,
      node,
    });
  }
}

/** The rule packs every gateway app is checked against on synth (registered as CDK validation plugins). */
export function gatewayNagPacks(scope: IConstruct): NagPack[] {
  return [new AwsSolutionsChecks(scope, { verbose: true }), new GatewayChecks(scope, { verbose: true })];
}

/**
 * The region and account as cdk-nag spells them in a finding's resource (`arn:<AWS::Partition>:…:<AWS::Region>:…`):
 * the pseudo parameter in an environment-agnostic stack, the literal value when the stack's env names it (`-c region=…`
 * or the CLI's profile, lib/app.ts). Acknowledgements that name an ARN build it with these, so they match either way.
 */
export function nagEnvironment(scope: IConstruct): { region: string; account: string } {
  const { region, account } = Stack.of(scope);
  return {
    region: Token.isUnresolved(region) ? '<AWS::Region>' : region,
    account: Token.isUnresolved(account) ? '<AWS::AccountId>' : account,
  };
}
