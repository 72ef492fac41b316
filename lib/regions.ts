import { CfnRule, Fn, Stack, Token } from 'aws-cdk-lib';

/**
 * The regions the gateway deploys to: those with Lambda function URLs in RESPONSE_STREAM mode, which the channeling
 * and /prompt functions are served by (docs/deploy.md, "Regions"). An allow-list, not a deny-list: a region is added
 * once AWS lists both features there, so a new region is refused until someone has checked it.
 *
 * Left out on purpose (as of 2025/2026): ap-south-2, ap-southeast-4, ap-southeast-5, ap-southeast-6, ap-southeast-7,
 * ap-east-2, ca-west-1, eu-south-2, eu-central-2, il-central-1 and me-central-1, which have no function URLs (the
 * Lambda developer guide, "Creating and managing Lambda function URLs"); mx-central-1, whose Lambda has no response
 * streaming yet; the GovCloud (us-gov-*) and China (cn-*) partitions, whose Lambda has no response streaming.
 */
export const STREAMING_REGIONS = [
  'us-east-1',
  'us-east-2',
  'us-west-1',
  'us-west-2',
  'ca-central-1',
  'sa-east-1',
  'eu-west-1',
  'eu-west-2',
  'eu-west-3',
  'eu-central-1',
  'eu-north-1',
  'eu-south-1',
  'ap-northeast-1',
  'ap-northeast-2',
  'ap-northeast-3',
  'ap-southeast-1',
  'ap-southeast-2',
  'ap-southeast-3',
  'ap-south-1',
  'ap-east-1',
  'me-south-1',
  'af-south-1',
] as const;

export type StreamingRegion = (typeof STREAMING_REGIONS)[number];

/** Why a region is refused, naming it and the regions that are supported: the synth error and the deploy rule's. */
export function unsupportedRegionMessage(region: string): string {
  return (
    `The prompt gateway cannot be deployed to ${region}: its channeling and /prompt functions are Lambda function URLs ` +
    `in RESPONSE_STREAM mode, which ${region} does not offer (or has not been checked for). Supported regions: ` +
    `${STREAMING_REGIONS.join(', ')} (docs/deploy.md, "Regions").`
  );
}

/**
 * Refuses a stack whose region is not in STREAMING_REGIONS. A region known at synth (the stack's env: `-c region=…`
 * or the CLI's profile) is checked here and throws; an environment-agnostic stack gets a CloudFormation rule
 * instead, asserting `AWS::Region` is in the list, so the deploy is refused before any resource is created, with the
 * same message (saying "this region": an assertion's description is a plain string, and `cdk deploy` names the
 * region it deploys to).
 */
export function requireStreamingRegion(stack: Stack): void {
  const region = stack.region;
  if (!Token.isUnresolved(region)) {
    if (!(STREAMING_REGIONS as readonly string[]).includes(region)) throw new Error(unsupportedRegionMessage(region));
    return;
  }
  new CfnRule(stack, 'StreamingRegion', {
    assertions: [
      {
        assert: Fn.conditionContains([...STREAMING_REGIONS], Stack.of(stack).region),
        assertDescription: unsupportedRegionMessage('this region'),
      },
    ],
  });
}
