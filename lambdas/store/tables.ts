/** A key attribute: its name and DynamoDB type (`S` string, `N` number). */
export interface KeyAttribute {
  readonly name: string;
  readonly type: 'S' | 'N';
}

/**
 * A global secondary index. Sparse by nature: an item appears in the index only while it has the index's key
 * attributes, so removing one of them takes it out. Projection ALL: a query reads whole items, never the table again;
 * `{ include }`: the keys and those attributes only — for a listing of big items (a vessel's output, a session's
 * conversation), whose index entry is then small and rewritten only when one of its attributes changes.
 */
export interface IndexSpec {
  readonly name: string;
  readonly partitionKey: KeyAttribute;
  readonly sortKey?: KeyAttribute;
  readonly projection: 'ALL' | { readonly include: readonly string[] };
  /** Queried only by the operator's tools (the console's listings), with their own credentials: no function is granted it. */
  readonly operatorOnly?: true;
}

/** An index's projection as DynamoDB's API takes it (DynamoDB Local's tables; the stack maps the same spec to CDK's). */
export function projectionOf(index: IndexSpec): { ProjectionType: 'ALL' | 'INCLUDE'; NonKeyAttributes?: string[] } {
  return index.projection === 'ALL' ? { ProjectionType: 'ALL' } : { ProjectionType: 'INCLUDE', NonKeyAttributes: [...index.projection.include] };
}

/** The Vessels table's index of the vessels the reconciler still watches (lambdas/vessels/reconciler.ts). */
export const VESSELS_RECONCILE_INDEX = 'reconcile';
/** The Vessels table's index of the vessels waiting for a developer's capacity, oldest first (lambdas/vessels/park.ts). */
export const VESSELS_PARKED_INDEX = 'parked';
/** The Vessels table's index of a project's vessels, newest first (lambdas/vessels/list.ts). */
export const VESSELS_PROJECT_INDEX = 'project';

/**
 * The Sessions table's index of what the session sweeper watches (lambdas/sessions/sweeper.ts): connections by when
 * they fall idle, running turns by when their worker's heartbeat goes stale.
 */
export const SESSIONS_SWEEP_INDEX = 'sweep';
/** The Sessions table's index of a project's sessions, newest first (lambdas/sessions/list.ts). */
export const SESSIONS_PROJECT_INDEX = 'project';

/**
 * The one description of every DynamoDB table. The CDK stack builds its tables from it and the local runtime
 * creates the same tables in DynamoDB Local, so the two can never disagree on keys, indexes or TTL attributes.
 */
export interface TableSpec {
  /** Logical name, also the CDK construct id. */
  readonly id: 'Registry' | 'Usage' | 'Vessels' | 'Leases' | 'Sessions' | 'Activity';
  /** Environment variable the functions read the physical name from. */
  readonly envVar: 'REGISTRY_TABLE' | 'USAGE_TABLE' | 'VESSELS_TABLE' | 'LEASES_TABLE' | 'SESSIONS_TABLE' | 'ACTIVITY_TABLE';
  readonly partitionKey: string;
  readonly sortKey?: string;
  /** Attribute DynamoDB's TTL deletes expired items by (epoch seconds). */
  readonly ttlAttribute?: string;
  /** Global secondary indexes (the stack and DynamoDB Local build the same ones). */
  readonly indexes?: readonly IndexSpec[];
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
    indexes: [
      {
        // Sparse: only items carrying both reconcileShard and reconcileAt (a number it sorts by) are in it — the
        // vessels that still need watching; a vessel drops out when it stops carrying them.
        name: VESSELS_RECONCILE_INDEX,
        partitionKey: { name: 'reconcileShard', type: 'S' },
        sortKey: { name: 'reconcileAt', type: 'N' },
        projection: 'ALL',
      },
      {
        // Sparse: the vessels parked until their developer has a free slot (parkedFor = the developer), in the
        // order they started waiting; a vessel leaves it when it is woken, started or ended.
        name: VESSELS_PARKED_INDEX,
        partitionKey: { name: 'parkedFor', type: 'S' },
        sortKey: { name: 'parkedAt', type: 'N' },
        projection: 'ALL',
      },
      {
        // Every vessel (idempotency keys carry no projectId), by project and creation: the owner's listing. Only the
        // attributes a list shows, which change with the status alone — not the heartbeats' updatedAt or
        // reconcileAt — so a vessel writes its entry about four times (lambdas/vessels/list.ts has the math).
        name: VESSELS_PROJECT_INDEX,
        partitionKey: { name: 'projectId', type: 'S' },
        sortKey: { name: 'createdAt', type: 'N' },
        projection: { include: ['vesselId', 'userId', 'status', 'scheduledFor', 'startedAt', 'completedAt'] },
        operatorOnly: true,
      },
    ],
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
    indexes: [
      {
        // Sparse: connections (sweepShard "connection") until they close, and sessions (sweepShard "turn") only
        // while a turn is queued or running, each sorted by the moment the sweeper should look at it.
        name: SESSIONS_SWEEP_INDEX,
        partitionKey: { name: 'sweepShard', type: 'S' },
        sortKey: { name: 'sweepAt', type: 'N' },
        projection: 'ALL',
      },
      {
        // Sessions only (connections carry no top-level projectId), by project and creation: the owner's listing,
        // without the conversation; an entry changes with the session's state and message count, a few times a turn.
        name: SESSIONS_PROJECT_INDEX,
        partitionKey: { name: 'projectId', type: 'S' },
        sortKey: { name: 'createdAt', type: 'N' },
        projection: { include: ['sessionId', 'userId', 'state', 'messages'] },
        operatorOnly: true,
      },
    ],
    purpose: 'multi-turn /ws sessions (conversation, options, owner, turn state) and the WebSocket connections bound to them',
  },
  {
    id: 'Activity',
    envVar: 'ACTIVITY_TABLE',
    // <project>#<day>#<bucket> / <hour>#<user>#<model>: lambdas/activity/record.ts has the layout and its partition math.
    partitionKey: 'pk',
    sortKey: 'sk',
    ttlAttribute: 'expiresAt',
    purpose: 'what every settled charge added to its project, per hour, user and model (the owner’s view)',
  },
];
