/**
 * The one description of every DynamoDB table. The CDK stack builds its tables from it and the local runtime
 * creates the same tables in DynamoDB Local, so the two can never disagree on keys or TTL attributes.
 */
export interface TableSpec {
  /** Logical name, also the CDK construct id. */
  readonly id: 'Registry' | 'Usage' | 'Vessels' | 'Leases' | 'Sessions';
  /** Environment variable the functions read the physical name from. */
  readonly envVar: 'REGISTRY_TABLE' | 'USAGE_TABLE' | 'VESSELS_TABLE' | 'LEASES_TABLE' | 'SESSIONS_TABLE';
  readonly partitionKey: string;
  readonly sortKey?: string;
  /** Attribute DynamoDB's TTL deletes expired items by (epoch seconds). */
  readonly ttlAttribute?: string;
  readonly purpose: string;
}

export const TABLES: readonly TableSpec[] = [
  {
    id: 'Registry',
    envVar: 'REGISTRY_TABLE',
    partitionKey: 'pk',
    purpose: 'developers and projects (secrets, encrypted provider keys, custom pricing)',
  },
  {
    id: 'Usage',
    envVar: 'USAGE_TABLE',
    partitionKey: 'pk',
    ttlAttribute: 'expiresAt',
    purpose: 'per-user budget windows with their reservations, developer monthly compute',
  },
  {
    id: 'Vessels',
    envVar: 'VESSELS_TABLE',
    partitionKey: 'pk',
    ttlAttribute: 'expiresAt',
    purpose: 'incubated runs and their idempotency keys',
  },
  {
    id: 'Leases',
    envVar: 'LEASES_TABLE',
    partitionKey: 'pk',
    sortKey: 'sk',
    ttlAttribute: 'expiresAt',
    purpose: 'per-developer concurrency leases',
  },
  {
    id: 'Sessions',
    envVar: 'SESSIONS_TABLE',
    partitionKey: 'pk',
    ttlAttribute: 'expiresAt',
    purpose: 'multi-turn /ws sessions',
  },
];
