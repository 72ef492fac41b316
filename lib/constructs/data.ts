import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as iam from 'aws-cdk-lib/aws-iam';
import { Construct } from 'constructs';
import { TABLES, type KeyAttribute, type TableSpec } from '../../lambdas/store/tables.ts';
import { removalPolicyFor } from './lifecycle.ts';

export type TableId = TableSpec['id'];

export interface GatewayDataProps {
  /** Deletion protection on, and tables kept when the stack is deleted. */
  readonly production: boolean;
}

const attribute = (key: KeyAttribute): dynamodb.Attribute => ({
  name: key.name,
  type: key.type === 'N' ? dynamodb.AttributeType.NUMBER : dynamodb.AttributeType.STRING,
});

/**
 * Every DynamoDB table in TABLES (the description the local runtime uses too): on demand, point-in-time recovery,
 * encrypted with the AWS managed key, TTL on the spec's attribute, the spec's global secondary indexes.
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
      for (const index of spec.indexes ?? []) {
        table.addGlobalSecondaryIndex({
          indexName: index.name,
          partitionKey: attribute(index.partitionKey),
          ...(index.sortKey ? { sortKey: attribute(index.sortKey) } : {}),
          ...(index.projection === 'ALL'
            ? { projectionType: dynamodb.ProjectionType.ALL }
            : { projectionType: dynamodb.ProjectionType.INCLUDE, nonKeyAttributes: [...index.projection.include] }),
        });
      }
      return [spec.id, table] as const;
    });
    this.tables = Object.fromEntries(entries) as Record<TableId, dynamodb.Table>;
  }

  /** The variables every function reads the physical table names from (each table's `envVar`). */
  environment(): Record<string, string> {
    return Object.fromEntries(TABLES.map((spec) => [spec.envVar, this.tables[spec.id].tableName]));
  }

  /**
   * Lets `grantee` read, or read and write, the items of a table, and query each of the table's indexes by name (not
   * the operator's own: `operatorOnly`).
   * CDK's own table grants would name `<table>/index/*` once a table has an index; naming the indexes keeps the
   * grant to what TABLES declares (and cdk-nag's IAM5 without a wildcard to acknowledge).
   */
  grantData(id: TableId, grantee: iam.IGrantable, mode: 'read' | 'readwrite'): void {
    const table = this.tables[id];
    const grants = new dynamodb.TableGrants({ table, hasIndex: false });
    if (mode === 'read') grants.readData(grantee);
    else grants.readWriteData(grantee);
    const indexes = (TABLES.find((spec) => spec.id === id)?.indexes ?? []).filter((index) => !index.operatorOnly);
    if (indexes.length) {
      grantee.grantPrincipal.addToPrincipalPolicy(
        new iam.PolicyStatement({ actions: ['dynamodb:Query'], resources: indexes.map((index) => `${table.tableArn}/index/${index.name}`) }),
      );
    }
  }
}
