import { RemovalPolicy } from 'aws-cdk-lib';
import * as logs from 'aws-cdk-lib/aws-logs';

/** Production stacks keep what holds data or keys when the stack goes; other stages take everything with them. */
export function removalPolicyFor(production: boolean): RemovalPolicy {
  return production ? RemovalPolicy.RETAIN : RemovalPolicy.DESTROY;
}

/** How long function and API logs are kept. */
export function logRetentionFor(production: boolean): logs.RetentionDays {
  return production ? logs.RetentionDays.THREE_MONTHS : logs.RetentionDays.TWO_WEEKS;
}
