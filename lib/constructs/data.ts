import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import { Construct } from 'constructs';
import { TABLES, type TableSpec } from '../../lambdas/store/tables.ts';
import { removalPolicyFor } from './lifecycle.ts';

export type TableId = TableSpec['id'];

export interface GatewayDataProps {
  /** Deletion protection on, and tables kept when the stack is deleted. */
  readonly production: boolean;
}

/**
 * Every DynamoDB table in TABLES (the description the local runtime uses too): on demand, point-in-time recovery,
 * encrypted with the AWS managed key, TTL on the spec's attribute.
 */
export class GatewayData extends Construct {
  readonly tables: Record<TableId, dynamodb.Table>;

  constructor(scope: Construct, id: string, props: GatewayDataProps) {
    super(scope, id);
    const entries = TABLES.map((spec) => {
      const table = new dynamodb.Table(this, spec.id, {
        partitionKey: { name: spec.partitionKey, type: dynamodb.AttributeType.STRING },
        ...(spec.sortKey ? { sortKey: { name: spec.sortKey, type: dynamodb.AttributeType.STRING } } : {}),
        ...(spec.ttlAttribute ? { timeToLiveAttribute: spec.ttlAttribute } : {}),
        billingMode: dynamodb.BillingMode.PAY_PER_REQUEST,
        pointInTimeRecoverySpecification: { pointInTimeRecoveryEnabled: true },
        encryption: dynamodb.TableEncryption.AWS_MANAGED,
        deletionProtection: props.production,
        removalPolicy: removalPolicyFor(props.production),
      });
      return [spec.id, table] as const;
    });
    this.tables = Object.fromEntries(entries) as Record<TableId, dynamodb.Table>;
  }

  /** The variables every function reads the physical table names from (each table's `envVar`). */
  environment(): Record<string, string> {
    return Object.fromEntries(TABLES.map((spec) => [spec.envVar, this.tables[spec.id].tableName]));
  }
}
