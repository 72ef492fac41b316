import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { CfnElement, Duration, Stack, Validations } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as dynamodb from 'aws-cdk-lib/aws-dynamodb';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import type { IConstruct } from 'constructs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CONJURE_ROUTES } from '../../lambdas/conjure/routes.ts';
import { FUNCTIONS, functionSpec, type FunctionAccess, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { QUEUES, queueSpec } from '../../lambdas/store/queues.ts';
import {
  projectionOf,
  SESSIONS_PROJECT_INDEX,
  SESSIONS_SWEEP_INDEX,
  TABLES,
  VESSELS_PARKED_INDEX,
  VESSELS_PROJECT_INDEX,
  VESSELS_RECONCILE_INDEX,
} from '../../lambdas/store/tables.ts';
import { buildGatewayApp, gatewayOptions } from '../../lib/app.ts';
import { GatewayQueues } from '../../lib/constructs/queues.ts';
import { GatewayScheduling } from '../../lib/constructs/scheduling.ts';
import { GatewaySecrets } from '../../lib/constructs/secrets.ts';
import { GatewayStack } from '../../lib/gateway-stack.ts';
import { GatewayChecks, gatewayNagPacks } from '../../lib/nag.ts';
import { asArray, iamStatements, removeTestApps, roleStatements, testApp } from './helpers.ts';

const OUTPUTS = [
  'ChannelingUrl',
  'PromptUrl',
  'ConjureUrl',
  'RegistryTableName',
  'UsageTableName',
  'VesselsTableName',
  'LeasesTableName',
  'SessionsTableName',
  'ProviderKeysKmsKeyId',
  'AnthropicKeySecretArn',
  'Region',
  'PromptFunctionName',
  // The CLI's `webhook redeliver` and `webhook show` (docs/webhooks.md).
  'WebhookQueueUrl',
  'WebhookDeadLetterQueueUrl',
  // The wss:// URL /ws clients connect to (docs/ws.md).
  'SessionsWebSocketUrl',
];

// One synth of the app exactly as bin/app.ts builds it (default context: stage dev), shared by the tests below.
const app = testApp();
const stack = buildGatewayApp(app);
let template: Template;
let resources: Record<string, { Type: string; Properties?: Record<string, unknown>; DeletionPolicy?: string }>;
let validationReport: { pluginReports: Array<{ pluginName?: string; violations?: unknown[] }> };

beforeAll(() => {
  // Synthesis runs the registered cdk-nag packs as validation plugins; an unacknowledged error would throw here.
  const assembly = app.synth();
  template = Template.fromJSON(assembly.getStackByName(stack.stackName).template as Record<string, unknown>);
  resources = template.toJSON().Resources;
  validationReport = JSON.parse(readFileSync(join(assembly.directory, 'validation-report.json'), 'utf8'));
}, 60_000);

afterAll(removeTestApps);

const ofType = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);
const logicalIdOf = (construct: IConstruct) => stack.getLogicalId((CfnElement.isCfnElement(construct) ? construct : construct.node.defaultChild) as CfnElement);
const fnArnOf = (construct: IConstruct) => ({ 'Fn::GetAtt': [logicalIdOf(construct), 'Arn'] });
/** The environment variables of a gateway function. */
const envOf = (f: { fn: IConstruct }) =>
  ((resources[logicalIdOf(f.fn)]!.Properties?.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables ?? {}) as Record<string, unknown>;
/** The logical id of the function URL that invokes `construct`'s function. */
const urlIdOf = (construct: IConstruct) =>
  ofType('AWS::Lambda::Url').find(([, u]) => JSON.stringify(u.Properties?.TargetFunctionArn) === JSON.stringify(fnArnOf(construct)))![0];

describe('cdk-nag', () => {
  it('reports no unacknowledged AwsSolutions or gateway finding, errors or warnings', () => {
    for (const pack of gatewayNagPacks(app)) {
      const report = pack.validateScope(stack);
      expect(report.violations, `${pack.readPackName} findings`).toEqual([]);
    }
    const reported = validationReport.pluginReports.flatMap((r) => r.violations ?? []);
    expect(reported).toEqual([]);
  });

  it('is really checking: synth of the same app fails on an unprotected table or an unacknowledged public URL', () => {
    const probeApp = testApp();
    const probe = buildGatewayApp(probeApp);
    new dynamodb.Table(probe, 'Unprotected', { partitionKey: { name: 'pk', type: dynamodb.AttributeType.STRING } });
    const fn = new lambda.Function(probe, 'Public', {
      runtime: lambda.Runtime.NODEJS_22_X,
      handler: 'index.handler',
      code: lambda.Code.fromInline('export const handler = async () => {}'),
    });
    fn.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.NONE });
    const found = gatewayNagPacks(probeApp).flatMap((pack) => pack.validateScope(probe).violations.map((v) => v.ruleName));
    expect(found).toEqual(expect.arrayContaining(['AwsSolutions-DDB3', 'AwsSolutions-L1', 'PromptGateway-LambdaFunctionUrlAuth']));
    expect(() => probeApp.synth()).toThrow(
      /AwsSolutions-DDB3[\s\S]*PromptGateway-LambdaFunctionUrlAuth|PromptGateway-LambdaFunctionUrlAuth[\s\S]*AwsSolutions-DDB3/,
    );
    expect(new GatewayChecks().name).toBe('PromptGateway');
  });

  it('acknowledges every rule it skips with a specific reason', () => {
    const acknowledgements: Array<{ path: string; id: string; reason: string }> = [];
    for (const construct of app.node.findAll()) {
      for (const entry of construct.node.metadata) {
        if (entry.type !== Validations.ACKNOWLEDGED_RULES_METADATA_KEY) continue;
        for (const [id, value] of Object.entries(entry.data as Record<string, unknown>)) {
          const reason = typeof value === 'string' ? value : String((value as { reason?: string }).reason ?? '');
          acknowledgements.push({ path: construct.node.path, id, reason });
        }
      }
    }
    expect(acknowledgements.length).toBeGreaterThan(0);
    for (const ack of acknowledgements) {
      expect(ack.reason.length, `${ack.id} at ${ack.path}`).toBeGreaterThan(60);
    }
    const ids = new Set(acknowledgements.map((a) => a.id.replace(/^annotation::/i, '')));
    expect([...ids].sort()).toEqual(
      [
        'AwsSolutions-APIG3',
        'AwsSolutions-APIG4',
        'AwsSolutions-COG4',
        'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AmazonAPIGatewayPushToCloudWatchLogs]',
        // The functions that schedule (vessels, webhook retries) may manage any schedule of the gateway's group (names
        // are per vessel, per delivery attempt).
        'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:scheduler:<AWS::Region>:<AWS::AccountId>:schedule/prompt-gateway-dev/*]',
        // The /ws functions may post to and close any connection of the gateway's WebSocket API (ids are API Gateway's).
        `AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:execute-api:<AWS::Region>:<AWS::AccountId>:<${logicalIdOf(stack.webSockets.Sessions!.api)}>/*/*/@connections/*]`,
        'AwsSolutions-L1',
        'AwsSolutions-SMG4',
        'PromptGateway-LambdaFunctionUrlAuth',
      ].sort(),
    );
  });
});

describe('functions', () => {
  it("channeling and prompt are public RESPONSE_STREAM function URLs, the only ones, as the manifest's only streaming-url functions", () => {
    expect(FUNCTIONS.filter((f) => f.trigger.kind === 'streaming-url').map((f) => f.id)).toEqual(['Channeling', 'Prompt']);
    const urls = ofType('AWS::Lambda::Url').map(([, u]) => u.Properties);
    expect(urls).toHaveLength(2);
    expect(urls).toEqual(
      expect.arrayContaining(
        [stack.channeling.fn, stack.functionOf('Prompt').fn].map((fn) => ({ AuthType: 'NONE', InvokeMode: 'RESPONSE_STREAM', TargetFunctionArn: fnArnOf(fn) })),
      ),
    );
  });

  it('the function URLs carry no CORS configuration: the functions set every CORS header and answer preflights themselves', () => {
    // A function URL's Cors would answer preflights itself and overwrite the functions' Access-Control-* headers.
    const urls = ofType('AWS::Lambda::Url');
    expect(urls.length).toBeGreaterThan(0);
    for (const [logicalId, url] of urls) expect(url.Properties, logicalId).not.toHaveProperty('Cors');
  });

  it('runs Node 22 on ARM with an ESM bundle, source maps, Powertools settings and every table name', () => {
    const functions = ofType('AWS::Lambda::Function');
    expect(functions.length).toBe(FUNCTIONS.length);
    for (const [, fn] of functions) {
      const props = fn.Properties!;
      expect(props.Runtime).toBe('nodejs22.x');
      expect(props.Architectures).toEqual(['arm64']);
      expect(props.Handler).toBe('index.handler');
      expect(props.LoggingConfig).toEqual({ LogGroup: { Ref: expect.any(String) } });
      const vars = (props.Environment as { Variables: Record<string, unknown> }).Variables;
      expect(vars).toMatchObject({
        NODE_OPTIONS: '--enable-source-maps --experimental-async-context-frame',
        POWERTOOLS_SERVICE_NAME: 'prompt-gateway-dev',
        POWERTOOLS_METRICS_NAMESPACE: 'PromptGateway',
        POWERTOOLS_LOG_LEVEL: 'INFO',
        STAGE: 'dev',
      });
      for (const spec of TABLES) expect(vars[spec.envVar], spec.envVar).toEqual({ Ref: logicalIdOf(stack.data.tables[spec.id]) });
    }
    template.hasResourceProperties('AWS::Lambda::Function', {
      Timeout: 900,
      MemorySize: 1024,
      Environment: {
        Variables: Match.objectLike({
          PROVIDER_KEYS_KMS_KEY_ID: { 'Fn::GetAtt': [logicalIdOf(stack.secrets.providerKeysKey), 'Arn'] },
          ANTHROPIC_API_KEY_SECRET_ARN: { Ref: logicalIdOf(stack.secrets.anthropicKey) },
        }),
      },
    });
    template.hasResourceProperties('AWS::Lambda::Function', { Timeout: 29, MemorySize: 512 });
  });

  it("never lets a deployed function call loopback addresses on a user's behalf (ALLOW_LOOPBACK_URLS is local only)", () => {
    const functions = Object.values(resources).filter((r) => (r as { Type: string }).Type === 'AWS::Lambda::Function');
    expect(functions.length).toBeGreaterThanOrEqual(3);
    for (const fn of functions) {
      const variables = ((fn as { Properties: { Environment?: { Variables?: Record<string, unknown> } } }).Properties.Environment?.Variables ?? {}) as Record<
        string,
        unknown
      >;
      expect(variables).not.toHaveProperty('ALLOW_LOOPBACK_URLS');
    }
  });

  it('gives every function its own log group with a retention', () => {
    for (const [, group] of ofType('AWS::Logs::LogGroup')) expect(group.Properties?.RetentionInDays).toBeGreaterThan(0);
    // + the REST API's access and execution logs, and each WebSocket API's access logs
    expect(ofType('AWS::Logs::LogGroup').length).toBe(ofType('AWS::Lambda::Function').length + 2 + Object.keys(stack.webSockets).length);
  });
});

describe('IAM', () => {
  it('no statement allows a wildcard action, and none names Resource "*"', () => {
    const statements = iamStatements(resources);
    expect(statements.length).toBeGreaterThan(5);
    for (const { logicalId, statement } of statements) {
      for (const action of asArray(statement.Action)) {
        expect(action, `${logicalId}: ${action}`).not.toMatch(/\*/);
      }
      expect(asArray(statement.Resource), logicalId).not.toContain('*');
    }
  });

  it('the functions that call providers (or only decrypt) may Decrypt with the provider-keys key, those that encrypt may Encrypt, nothing else of it', () => {
    expect(FUNCTIONS.filter((f) => f.access.providers).map((f) => f.id)).toEqual(['Channeling', 'Prompt', 'VesselExecutor', 'SessionTurn']);
    expect(FUNCTIONS.filter((f) => (f.access as FunctionAccess).encrypts).map((f) => f.id)).toEqual(['ConjureApi']);
    expect(FUNCTIONS.filter((f) => (f.access as FunctionAccess).decrypts).map((f) => f.id)).toEqual(['WebhookSender']);
    const keyArn = { 'Fn::GetAtt': [logicalIdOf(stack.secrets.providerKeysKey), 'Arn'] };
    // Every kms: action of every policy, with the roles it is attached to: exactly one statement per grant.
    const kmsGrants = iamStatements(resources)
      .filter(({ statement }) => asArray(statement.Action).some((a) => a.startsWith('kms:')))
      .map(({ logicalId, statement }) =>
        JSON.stringify({ roles: resources[logicalId]!.Properties?.Roles, action: statement.Action, resource: statement.Resource }),
      )
      .sort();
    const expected = FUNCTIONS.flatMap((f) => {
      const access: FunctionAccess = f.access;
      const roles = [{ Ref: logicalIdOf(stack.functionOf(f.id).role) }];
      return [
        ...(access.providers || access.decrypts ? [JSON.stringify({ roles, action: 'kms:Decrypt', resource: keyArn })] : []),
        ...(access.encrypts ? [JSON.stringify({ roles, action: 'kms:Encrypt', resource: keyArn })] : []),
      ];
    }).sort();
    expect(kmsGrants).toEqual(expected);
    for (const f of [stack.channeling, stack.functionOf('Prompt'), stack.functionOf('VesselExecutor'), stack.functionOf('SessionTurn')]) {
      template.hasResourceProperties('AWS::IAM::Policy', {
        Roles: [{ Ref: logicalIdOf(f.role) }],
        PolicyDocument: {
          Statement: Match.arrayWith([
            { Action: 'kms:Decrypt', Effect: 'Allow', Resource: keyArn },
            {
              Action: ['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue'],
              Effect: 'Allow',
              Resource: { Ref: logicalIdOf(stack.secrets.anthropicKey) },
            },
          ]),
        },
      });
    }
    // The conjure function calls no provider: no Decrypt, no secret — it encrypts callback secrets, and knows the key.
    const conjureActions = roleStatements(resources, logicalIdOf(stack.conjure.role)).flatMap(({ statement }) => asArray(statement.Action));
    expect(conjureActions.filter((a) => a.startsWith('kms:') || a.startsWith('secretsmanager:'))).toEqual(['kms:Encrypt']);
    const conjureEnv = envOf(stack.conjure);
    expect(conjureEnv.PROVIDER_KEYS_KMS_KEY_ID).toEqual(keyArn);
    expect(conjureEnv.ANTHROPIC_API_KEY_SECRET_ARN).toBeUndefined();
    // The webhook sender reads callback secrets: Decrypt only, no Anthropic secret; it knows the key, not the secret.
    const senderActions = roleStatements(resources, logicalIdOf(stack.functionOf('WebhookSender').role)).flatMap(({ statement }) => asArray(statement.Action));
    expect(senderActions.filter((a) => a.startsWith('kms:') || a.startsWith('secretsmanager:'))).toEqual(['kms:Decrypt']);
    const senderEnv = envOf(stack.functionOf('WebhookSender'));
    expect(senderEnv.PROVIDER_KEYS_KMS_KEY_ID).toEqual(keyArn);
    expect(senderEnv.ANTHROPIC_API_KEY_SECRET_ARN).toBeUndefined();
    // A function that neither calls providers nor encrypts nor decrypts is not told the key.
    expect(envOf(stack.functionOf('VesselReconciler')).PROVIDER_KEYS_KMS_KEY_ID).toBeUndefined();
  });

  it('only prompt, the executor and the session turn worker may write the Leases table, the reconciler may read it, nobody else may touch it', () => {
    const leasesId = logicalIdOf(stack.data.tables.Leases);
    const onLeases = ({ statement }: { statement: { Resource?: unknown } }) => JSON.stringify(statement.Resource ?? null).includes(`"${leasesId}"`);
    const leasesActionsOf = (id: string) =>
      roleStatements(resources, logicalIdOf(stack.functionOf(id).role))
        .filter(onLeases)
        .flatMap(({ statement }) => asArray(statement.Action));
    for (const id of ['Prompt', 'VesselExecutor', 'SessionTurn']) {
      expect(leasesActionsOf(id), id).toEqual(
        expect.arrayContaining([
          'dynamodb:GetItem',
          'dynamodb:Query',
          'dynamodb:PutItem',
          'dynamodb:UpdateItem',
          'dynamodb:DeleteItem',
          'dynamodb:ConditionCheckItem',
        ]),
      );
    }
    expect(leasesActionsOf('VesselReconciler')).toEqual(expect.arrayContaining(['dynamodb:GetItem', 'dynamodb:Query']));
    expect(leasesActionsOf('VesselReconciler').filter((a) => /Put|Update|Delete|Write/.test(a))).toEqual([]);
    for (const f of [stack.channeling, stack.conjure]) {
      const statements = roleStatements(resources, logicalIdOf(f.role));
      // They do have table grants (Registry, Usage), just none on Leases.
      expect(statements.some(({ statement }) => asArray(statement.Action).includes('dynamodb:PutItem'))).toBe(true);
      expect(statements.filter(onLeases)).toEqual([]);
    }
    // Nor does any other policy of the stack name the table.
    const allowed = new Set(
      ['Prompt', 'VesselExecutor', 'SessionTurn', 'VesselReconciler'].map((id) => JSON.stringify([{ Ref: logicalIdOf(stack.functionOf(id).role) }])),
    );
    expect(
      iamStatements(resources)
        .filter(onLeases)
        .filter(({ logicalId }) => !allowed.has(JSON.stringify(resources[logicalId]!.Properties?.Roles))),
    ).toEqual([]);
  });

  it('each function may do exactly what its manifest access says, beyond its tables and its own logs', () => {
    for (const spec of FUNCTIONS as readonly FunctionSpec[]) {
      const { access, trigger } = spec;
      const deadLetters = access.deadLetters ?? [];
      const expected = [
        ...(access.providers ? ['kms:Decrypt', 'secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue'] : []),
        ...(access.encrypts ? ['kms:Encrypt'] : []),
        ...(access.decrypts ? ['kms:Decrypt'] : []),
        ...(access.queues.length || deadLetters.length ? ['sqs:SendMessage'] : []),
        ...(access.scheduler ? ['iam:PassRole', 'scheduler:CreateSchedule', 'scheduler:DeleteSchedule'] : []),
        // The WebSocket API's handler answers its clients; a function with `connections` posts to them too.
        ...(access.connections || trigger.kind === 'websocket' ? ['execute-api:ManageConnections'] : []),
        // An SQS event source consumes its queue.
        ...(trigger.kind === 'sqs'
          ? ['sqs:ChangeMessageVisibility', 'sqs:DeleteMessage', 'sqs:GetQueueAttributes', 'sqs:GetQueueUrl', 'sqs:ReceiveMessage']
          : []),
      ];
      const actions = roleStatements(resources, logicalIdOf(stack.functionOf(spec.id).role))
        .flatMap(({ statement }) => asArray(statement.Action))
        .filter((a) => !a.startsWith('dynamodb:') && !a.startsWith('logs:'));
      expect([...new Set(actions)].sort(), spec.id).toEqual([...new Set(expected)].sort());
      const env = envOf(stack.functionOf(spec.id));
      for (const name of ['SCHEDULE_GROUP_NAME', 'SCHEDULER_ROLE_ARN']) expect(env[name] !== undefined, `${spec.id} ${name}`).toBe(access.scheduler === true);
      // The handler reads the management endpoint from its events; the others are told it.
      expect(env.WEBSOCKET_CALLBACK_URL !== undefined, `${spec.id} WEBSOCKET_CALLBACK_URL`).toBe(access.connections === true);
      for (const queue of QUEUES) {
        // A queue's URL and ARN come together with the grant to send to it (the ARN is what a schedule targets).
        expect(env[queue.envVar] !== undefined, `${spec.id} ${queue.envVar}`).toBe(access.queues.includes(queue.name));
        expect(env[queue.arnEnvVar] !== undefined, `${spec.id} ${queue.arnEnvVar}`).toBe(access.queues.includes(queue.name));
        expect(env[queue.deadLetterEnvVar] !== undefined, `${spec.id} ${queue.deadLetterEnvVar}`).toBe(deadLetters.includes(queue.name));
      }
      expect(env.PROVIDER_KEYS_KMS_KEY_ID !== undefined, `${spec.id} PROVIDER_KEYS_KMS_KEY_ID`).toBe(
        Boolean(access.providers || access.encrypts || access.decrypts),
      );
    }
  });

  it('a function with a table that has indexes may query those indexes by name, never index/*', () => {
    const indexArn = (table: (typeof TABLES)[number], name: string) => ({
      'Fn::Join': ['', [{ 'Fn::GetAtt': [logicalIdOf(stack.data.tables[table.id]), 'Arn'] }, `/index/${name}`]],
    });
    expect(TABLES.filter((t) => t.indexes?.length).map((t) => t.id)).toEqual(['Vessels', 'Sessions']);
    for (const spec of FUNCTIONS as readonly FunctionSpec[]) {
      const statements = roleStatements(resources, logicalIdOf(stack.functionOf(spec.id).role)).map(({ statement }) => statement);
      const onIndex = statements.filter((st) => JSON.stringify(st.Resource).includes('/index/'));
      // One Query statement on the indexes of every indexed table the entry names (CDK merges them), in any order.
      // Not the operator's own indexes (the console's listings): no function queries them.
      const expected = TABLES.filter((t) => t.indexes?.length && spec.access.tables[t.id]).flatMap((t) =>
        t.indexes!.filter((i) => !i.operatorOnly).map((i) => JSON.stringify(indexArn(t, i.name))),
      );
      expect(
        onIndex.map((st) => ({
          ...st,
          Resource: asArray(st.Resource as unknown)
            .map((r) => JSON.stringify(r))
            .sort(),
        })),
        spec.id,
      ).toEqual(expected.length ? [{ Action: 'dynamodb:Query', Effect: 'Allow', Resource: expected.sort() }] : []);
    }
    // e.g. the session turn worker, which has both indexed tables
    expect(
      roleStatements(resources, logicalIdOf(stack.functionOf('SessionTurn').role))
        .filter(({ statement }) => JSON.stringify(statement.Resource).includes('/index/'))
        .flatMap(({ statement }) => asArray(statement.Resource as unknown)),
    ).toHaveLength(3);
    expect(JSON.stringify(iamStatements(resources))).not.toContain('/index/*');
  });

  it("uses no AWS managed policy except API Gateway's account-level logging role", () => {
    const managed = ofType('AWS::IAM::Role').flatMap(([id, role]) =>
      asArray(role.Properties?.ManagedPolicyArns as unknown[]).map((arn) => [id, JSON.stringify(arn)]),
    );
    expect(managed.length).toBe(1);
    expect(managed[0]![1]).toContain('AmazonAPIGatewayPushToCloudWatchLogs');
  });
});

describe('data', () => {
  it.each(TABLES.map((spec) => [spec.id, spec] as const))('%s: on demand, PITR, TTL, encrypted, keys from TABLES', (_id, spec) => {
    const table = resources[logicalIdOf(stack.data.tables[spec.id])]!;
    expect(table.Type).toBe('AWS::DynamoDB::Table');
    expect(table.DeletionPolicy).toBe('Delete');
    expect(table.Properties).toMatchObject({
      BillingMode: 'PAY_PER_REQUEST',
      PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
      SSESpecification: { SSEEnabled: true },
      KeySchema: [{ AttributeName: spec.partitionKey, KeyType: 'HASH' }, ...(spec.sortKey ? [{ AttributeName: spec.sortKey, KeyType: 'RANGE' }] : [])],
    });
    if (spec.ttlAttribute) {
      expect(table.Properties?.TimeToLiveSpecification).toEqual({ AttributeName: spec.ttlAttribute, Enabled: true });
    } else {
      expect(table.Properties?.TimeToLiveSpecification).toBeUndefined();
    }
    expect(table.Properties?.DeletionProtectionEnabled).toBe(false);
    // The indexes of TABLES, with their key types; none on demand needs throughput.
    expect(table.Properties?.GlobalSecondaryIndexes).toEqual(
      spec.indexes?.map((index) => ({
        IndexName: index.name,
        KeySchema: [
          { AttributeName: index.partitionKey.name, KeyType: 'HASH' },
          ...(index.sortKey ? [{ AttributeName: index.sortKey.name, KeyType: 'RANGE' }] : []),
        ],
        Projection: projectionOf(index),
      })),
    );
    for (const index of spec.indexes ?? []) {
      for (const key of [index.partitionKey, ...(index.sortKey ? [index.sortKey] : [])]) {
        expect(table.Properties?.AttributeDefinitions).toContainEqual({ AttributeName: key.name, AttributeType: key.type });
      }
    }
  });

  it("the Vessels table has the sparse reconcile and parked indexes, projection ALL, and the project's listing", () => {
    const vessels = resources[logicalIdOf(stack.data.tables.Vessels)]!;
    expect([VESSELS_RECONCILE_INDEX, VESSELS_PARKED_INDEX, VESSELS_PROJECT_INDEX]).toEqual(['reconcile', 'parked', 'project']);
    expect(vessels.Properties?.GlobalSecondaryIndexes).toEqual([
      {
        IndexName: 'reconcile',
        KeySchema: [
          { AttributeName: 'reconcileShard', KeyType: 'HASH' },
          { AttributeName: 'reconcileAt', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'ALL' },
      },
      {
        IndexName: 'parked',
        KeySchema: [
          { AttributeName: 'parkedFor', KeyType: 'HASH' },
          { AttributeName: 'parkedAt', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'ALL' },
      },
      {
        IndexName: 'project',
        KeySchema: [
          { AttributeName: 'projectId', KeyType: 'HASH' },
          { AttributeName: 'createdAt', KeyType: 'RANGE' },
        ],
        // The listing's attributes only: never the output, the options or the callback's encrypted secret.
        Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['vesselId', 'userId', 'status', 'scheduledFor', 'startedAt', 'completedAt'] },
      },
    ]);
    expect(vessels.Properties?.AttributeDefinitions).toEqual(
      expect.arrayContaining([
        { AttributeName: 'pk', AttributeType: 'S' },
        { AttributeName: 'reconcileShard', AttributeType: 'S' },
        { AttributeName: 'reconcileAt', AttributeType: 'N' },
        { AttributeName: 'parkedFor', AttributeType: 'S' },
        { AttributeName: 'parkedAt', AttributeType: 'N' },
      ]),
    );
    const withIndexes = ofType('AWS::DynamoDB::Table').filter(([, t]) => t.Properties?.GlobalSecondaryIndexes);
    expect(withIndexes.map(([id]) => id).sort()).toEqual([logicalIdOf(stack.data.tables.Vessels), logicalIdOf(stack.data.tables.Sessions)].sort());
  });

  it('production keeps data: deletion protection and RETAIN on tables, key, secret, queues and logs', () => {
    const prodApp = testApp({ stage: 'prod' });
    expect(gatewayOptions(prodApp).production).toBe(true);
    const prod = buildGatewayApp(prodApp);
    const prodResources = Template.fromStack(prod).toJSON().Resources as typeof resources;
    const byType = (type: string) => Object.values(prodResources).filter((r) => r.Type === type);
    expect(byType('AWS::DynamoDB::Table')).toHaveLength(TABLES.length);
    for (const table of byType('AWS::DynamoDB::Table')) {
      expect(table.DeletionPolicy).toBe('Retain');
      expect(table.Properties?.DeletionProtectionEnabled).toBe(true);
    }
    for (const type of ['AWS::KMS::Key', 'AWS::SecretsManager::Secret', 'AWS::SQS::Queue', 'AWS::Logs::LogGroup']) {
      for (const r of byType(type)) expect(r.DeletionPolicy, type).toBe('Retain');
    }
  });

  it('reads production from context, defaulting to stage === "prod"', () => {
    expect(gatewayOptions(testApp()).production).toBe(false);
    expect(gatewayOptions(testApp({ stage: 'prod', production: 'false' })).production).toBe(false);
    expect(gatewayOptions(testApp({ stage: 'staging', production: 'true' })).production).toBe(true);
    expect(() => gatewayOptions(testApp({ production: 'yes please' }))).toThrow(/true or false/);
    expect(() => gatewayOptions(testApp({ stage: 'Prod!' }))).toThrow(/stage/);
    expect(gatewayOptions(testApp({ anthropicBaseUrl: 'https://upstream.example' })).upstreams).toEqual({ anthropic: 'https://upstream.example' });
  });
});

describe('secrets', () => {
  it('the provider-keys key rotates; the Anthropic key secret is created without a value', () => {
    template.hasResourceProperties('AWS::KMS::Key', { EnableKeyRotation: true });
    const secret = resources[logicalIdOf(stack.secrets.anthropicKey)]!;
    expect(secret.Properties?.GenerateSecretString).toBeUndefined();
    expect(secret.Properties?.SecretString).toBeUndefined();
  });
});

describe('queues', () => {
  it('run, webhook and turn queues redrive to their DLQs after QUEUES.maxReceiveCount, with visibility 6x the consumer timeout', () => {
    for (const spec of QUEUES) {
      const q = stack.queues.byName[spec.name];
      const main = resources[logicalIdOf(q.queue)]!;
      expect(main.Properties).toMatchObject({
        VisibilityTimeout: spec.consumerTimeoutSeconds * 6,
        SqsManagedSseEnabled: true,
        RedrivePolicy: { deadLetterTargetArn: { 'Fn::GetAtt': [logicalIdOf(q.deadLetterQueue), 'Arn'] }, maxReceiveCount: spec.maxReceiveCount },
      });
      const dlq = resources[logicalIdOf(q.deadLetterQueue)]!;
      expect(dlq.Properties).toMatchObject({ MessageRetentionPeriod: 14 * 24 * 3600, SqsManagedSseEnabled: true });
    }
    expect(resources[logicalIdOf(stack.queues.byName.run.queue)]!.Properties?.VisibilityTimeout).toBe(5400);
    expect(resources[logicalIdOf(stack.queues.byName.webhook.queue)]!.Properties?.VisibilityTimeout).toBe(180);
    expect(resources[logicalIdOf(stack.queues.byName.turn.queue)]!.Properties?.VisibilityTimeout).toBe(5400);
  });

  it('every queue refuses requests without TLS', () => {
    const policies = ofType('AWS::SQS::QueuePolicy');
    expect(policies).toHaveLength(QUEUES.length * 2);
    for (const [, policy] of policies) {
      expect(policy.Properties?.PolicyDocument).toMatchObject({
        Statement: expect.arrayContaining([
          expect.objectContaining({ Effect: 'Deny', Action: 'sqs:*', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        ]),
      });
    }
  });

  it('a consumer gets partial batch failures, and one that outlives the visibility timeout is refused', () => {
    const probeApp = testApp();
    const probe = new Stack(probeApp, 'Consumers');
    const queues = new GatewayQueues(probe, 'Queues', { production: false });
    const fn = (id: string, timeout: Duration) =>
      new lambda.Function(probe, id, {
        runtime: lambda.Runtime.NODEJS_22_X,
        handler: 'index.handler',
        code: lambda.Code.fromInline('export const handler = async () => ({ batchItemFailures: [] })'),
        timeout,
      });
    queues.attachConsumer('webhook', fn('WebhookSender', Duration.seconds(queueSpec('webhook').consumerTimeoutSeconds)));
    expect(() => queues.attachConsumer('webhook', fn('TooSlow', Duration.seconds(queueSpec('run').consumerTimeoutSeconds)))).toThrow(/visibility timeout/);
    Template.fromStack(probe).hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BatchSize: 10,
    });
  });
});

describe('helpers for the later queue and scheduler users', () => {
  it('grantSend and grantScheduling give exactly the actions and the variables a producer needs, nag-clean', () => {
    const probeApp = testApp();
    const probe = new Stack(probeApp, 'Producers');
    const queues = new GatewayQueues(probe, 'Queues', { production: false });
    const scheduling = new GatewayScheduling(probe, 'Scheduling', { stage: 'dev', targetQueues: queues.all.map((q) => q.queue) });
    const fn = new lambda.Function(probe, 'Producer', {
      runtime: lambda.Runtime.NODEJS_22_X,
      handler: 'index.handler',
      code: lambda.Code.fromInline('export const handler = async () => {}'),
    });
    queues.grantSend('run', fn);
    queues.grantSend('webhook', fn);
    scheduling.grantScheduling(fn);
    // Scheduling alone names no target queue: a queue's ARN comes with the grant to send to it.
    const schedulesOnly = new lambda.Function(probe, 'SchedulesOnly', {
      runtime: lambda.Runtime.NODEJS_22_X,
      handler: 'index.handler',
      code: lambda.Code.fromInline('export const handler = async () => {}'),
    });
    scheduling.grantScheduling(schedulesOnly);
    const t = Template.fromStack(probe);
    const pid = (c: IConstruct) => probe.getLogicalId((CfnElement.isCfnElement(c) ? c : c.node.defaultChild) as CfnElement);
    const probeResources = t.toJSON().Resources as typeof resources;
    const variablesOf = (c: IConstruct) =>
      (probeResources[pid(c)]!.Properties?.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables ?? {};
    expect(variablesOf(fn)).toEqual({
      RUN_QUEUE_URL: { Ref: pid(queues.byName.run.queue) },
      RUN_QUEUE_ARN: { 'Fn::GetAtt': [pid(queues.byName.run.queue), 'Arn'] },
      WEBHOOK_QUEUE_URL: { Ref: pid(queues.byName.webhook.queue) },
      WEBHOOK_QUEUE_ARN: { 'Fn::GetAtt': [pid(queues.byName.webhook.queue), 'Arn'] },
      SCHEDULE_GROUP_NAME: 'prompt-gateway-dev',
      SCHEDULER_ROLE_ARN: { 'Fn::GetAtt': [pid(scheduling.role), 'Arn'] },
    });
    expect(variablesOf(schedulesOnly)).toEqual({
      SCHEDULE_GROUP_NAME: 'prompt-gateway-dev',
      SCHEDULER_ROLE_ARN: { 'Fn::GetAtt': [pid(scheduling.role), 'Arn'] },
    });
    const actions = iamStatements(t.toJSON().Resources)
      .filter(({ logicalId }) => logicalId.startsWith('ProducerServiceRoleDefaultPolicy'))
      .flatMap(({ statement }) => asArray(statement.Action));
    expect([...new Set(actions)].sort()).toEqual(['iam:PassRole', 'scheduler:CreateSchedule', 'scheduler:DeleteSchedule', 'sqs:SendMessage']);
    const sendsOf = (prefix: string) =>
      iamStatements(t.toJSON().Resources)
        .filter(({ logicalId, statement }) => logicalId.startsWith(prefix) && asArray(statement.Action).includes('sqs:SendMessage'))
        .flatMap(({ statement }) => asArray(statement.Resource as unknown));
    expect(sendsOf('ProducerServiceRoleDefaultPolicy')).toEqual([
      { 'Fn::GetAtt': [pid(queues.byName.run.queue), 'Arn'] },
      { 'Fn::GetAtt': [pid(queues.byName.webhook.queue), 'Arn'] },
    ]);
    expect(sendsOf('SchedulesOnlyServiceRoleDefaultPolicy')).toEqual([]);
    const iam5 = gatewayNagPacks(probeApp)
      .flatMap((pack) => pack.validateScope(probe).violations)
      .filter((v) => v.ruleName.startsWith('AwsSolutions-IAM5'));
    expect(iam5).toEqual([]);
  });

  it('grantSendToDeadLetter and grantDecryptOnly give one action on one resource, and the one variable it needs', () => {
    const probeApp = testApp();
    const probe = new Stack(probeApp, 'DeadLetters');
    const queues = new GatewayQueues(probe, 'Queues', { production: false });
    const secrets = new GatewaySecrets(probe, 'Secrets', { stage: 'dev', production: false });
    const fn = new lambda.Function(probe, 'Parker', {
      runtime: lambda.Runtime.NODEJS_22_X,
      handler: 'index.handler',
      code: lambda.Code.fromInline('export const handler = async () => {}'),
    });
    queues.grantSendToDeadLetter('webhook', fn);
    secrets.grantDecryptOnly(fn);
    const t = Template.fromStack(probe);
    const pid = (c: IConstruct) => probe.getLogicalId((CfnElement.isCfnElement(c) ? c : c.node.defaultChild) as CfnElement);
    const probeResources = t.toJSON().Resources as typeof resources;
    expect((probeResources[pid(fn)]!.Properties!.Environment as { Variables?: Record<string, unknown> }).Variables).toEqual({
      WEBHOOK_DEAD_LETTER_QUEUE_URL: { Ref: pid(queues.byName.webhook.deadLetterQueue) },
      PROVIDER_KEYS_KMS_KEY_ID: { 'Fn::GetAtt': [pid(secrets.providerKeysKey), 'Arn'] },
    });
    const statements = iamStatements(probeResources)
      .filter(({ logicalId }) => logicalId.startsWith('ParkerServiceRoleDefaultPolicy'))
      .map(({ statement }) => statement);
    // The dead-letter queue only (not the queue itself); Decrypt only (not Encrypt, not the Anthropic secret).
    expect(statements).toEqual([
      { Action: 'sqs:SendMessage', Effect: 'Allow', Resource: { 'Fn::GetAtt': [pid(queues.byName.webhook.deadLetterQueue), 'Arn'] } },
      { Action: 'kms:Decrypt', Effect: 'Allow', Resource: { 'Fn::GetAtt': [pid(secrets.providerKeysKey), 'Arn'] } },
    ]);
  });
});

describe('scheduler', () => {
  it('a schedule group, and a role only EventBridge Scheduler of this group may assume, allowed only sqs:SendMessage on the run and webhook queues', () => {
    template.resourceCountIs('AWS::Scheduler::ScheduleGroup', 1);
    template.hasResourceProperties('AWS::Scheduler::ScheduleGroup', { Name: 'prompt-gateway-dev' });
    const roleId = logicalIdOf(stack.scheduling.role);
    const role = resources[roleId]!;
    expect(role.Properties?.AssumeRolePolicyDocument).toMatchObject({
      Statement: [
        {
          Action: 'sts:AssumeRole',
          Effect: 'Allow',
          Principal: { Service: 'scheduler.amazonaws.com' },
          Condition: {
            StringEquals: {
              'aws:SourceAccount': { Ref: 'AWS::AccountId' },
              'aws:SourceArn': { 'Fn::GetAtt': [logicalIdOf(stack.scheduling.group), 'Arn'] },
            },
          },
        },
      ],
    });
    expect(role.Properties?.ManagedPolicyArns).toBeUndefined();
    const statements = iamStatements(resources).filter(({ logicalId }) => {
      const r = resources[logicalId]!;
      return logicalId === roleId || asArray(r.Properties?.Roles as unknown[]).some((ref) => JSON.stringify(ref) === JSON.stringify({ Ref: roleId }));
    });
    // The queues themselves, never their dead-letter queues.
    expect(statements.map((s) => s.statement)).toEqual([
      {
        Action: 'sqs:SendMessage',
        Effect: 'Allow',
        Resource: [
          { 'Fn::GetAtt': [logicalIdOf(stack.queues.byName.run.queue), 'Arn'] },
          { 'Fn::GetAtt': [logicalIdOf(stack.queues.byName.webhook.queue), 'Arn'] },
        ],
      },
    ]);
  });
});

describe('vessels', () => {
  const schedulingStatements = (id: string) => {
    const groupArn = {
      'Fn::Join': [
        '',
        ['arn:', { Ref: 'AWS::Partition' }, ':scheduler:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':schedule/prompt-gateway-dev/*'],
      ],
    };
    return [
      { Action: ['scheduler:CreateSchedule', 'scheduler:DeleteSchedule'], Effect: 'Allow', Resource: groupArn },
      { Action: 'iam:PassRole', Effect: 'Allow', Resource: { 'Fn::GetAtt': [logicalIdOf(stack.scheduling.role), 'Arn'] } },
    ].map((statement) => ({ id, statement }));
  };
  const statementsOf = (id: string) => roleStatements(resources, logicalIdOf(stack.functionOf(id).role)).map(({ statement }) => ({ id, statement }));

  it("conjure and the webhook sender (only) may create and delete schedules in the gateway's group only, handing them only the delivery role", () => {
    expect(FUNCTIONS.filter((f) => (f.access as FunctionAccess).scheduler).map((f) => f.id)).toEqual(['ConjureApi', 'WebhookSender']);
    // Each is told the group, the role, and the queue it schedules onto (conjure: due vessels; the sender: retries).
    const targetOf = { ConjureApi: 'run', WebhookSender: 'webhook' } as const;
    for (const [id, queue] of Object.entries(targetOf)) {
      const statements = statementsOf(id);
      for (const expected of schedulingStatements(id)) expect(statements).toContainEqual(expected);
      expect(statements.filter(({ statement }) => asArray(statement.Action).some((a) => a.startsWith('scheduler:') || a.startsWith('iam:')))).toEqual(
        schedulingStatements(id),
      );
      const spec = queueSpec(queue);
      expect(envOf(stack.functionOf(id))).toMatchObject({
        SCHEDULE_GROUP_NAME: 'prompt-gateway-dev',
        SCHEDULER_ROLE_ARN: { 'Fn::GetAtt': [logicalIdOf(stack.scheduling.role), 'Arn'] },
        [spec.arnEnvVar]: { 'Fn::GetAtt': [logicalIdOf(stack.queues.byName[queue].queue), 'Arn'] },
        [spec.envVar]: { Ref: logicalIdOf(stack.queues.byName[queue].queue) },
      });
    }
    // The sender is not told (nor may send to) the run queue; conjure is told the webhook queue, as it may send a
    // canceled vessel's callback there.
    expect(envOf(stack.conjure).WEBHOOK_QUEUE_ARN).toEqual({ 'Fn::GetAtt': [logicalIdOf(stack.queues.byName.webhook.queue), 'Arn'] });
    expect(envOf(stack.functionOf('WebhookSender')).RUN_QUEUE_ARN).toBeUndefined();
    // The executor and the reconciler never schedule (only a cancel removes a schedule).
    for (const id of ['VesselExecutor', 'VesselReconciler']) {
      expect(
        statementsOf(id).filter(({ statement }) => asArray(statement.Action).some((a) => a.startsWith('scheduler:') || a === 'iam:PassRole')),
        id,
      ).toEqual([]);
      expect(envOf(stack.functionOf(id)).SCHEDULE_GROUP_NAME, id).toBeUndefined();
    }
  });

  it('conjure, the executor and the reconciler may send to the run and webhook queues (conjure: a canceled vessel hands its callback over); every metered function to the webhook queue (budget alerts)', () => {
    const queueArn = (name: 'run' | 'webhook') => ({ 'Fn::GetAtt': [logicalIdOf(stack.queues.byName[name].queue), 'Arn'] });
    const sendsTo = (id: string) =>
      statementsOf(id)
        .filter(({ statement }) => asArray(statement.Action).includes('sqs:SendMessage'))
        .flatMap(({ statement }) => asArray(statement.Resource as unknown));
    expect(sendsTo('ConjureApi')).toEqual([queueArn('run'), queueArn('webhook')]);
    expect(sendsTo('VesselExecutor')).toEqual([queueArn('run'), queueArn('webhook')]);
    expect(sendsTo('VesselReconciler')).toEqual([queueArn('run'), queueArn('webhook')]);
    expect(envOf(stack.conjure).WEBHOOK_QUEUE_URL).toEqual({ Ref: logicalIdOf(stack.queues.byName.webhook.queue) });
    // The functions that end vessels hand webhook deliveries over this way, and so does every function that settles
    // charges (they write the Usage table: a settlement may fire a budget alert, lambdas/alerts/fire.ts), besides the
    // sender (its retries).
    expect(FUNCTIONS.filter((f) => (f.access.queues as readonly string[]).includes('webhook')).map((f) => f.id)).toEqual([
      'Channeling',
      'ConjureApi',
      'Prompt',
      'VesselExecutor',
      'VesselReconciler',
      'WebhookSender',
      'SessionTurn',
    ]);
    const settles = FUNCTIONS.filter((f) => (f.access.tables as FunctionAccess['tables']).Usage === 'readwrite' && f.id !== 'WebhookSender');
    for (const f of settles) expect(f.access.queues as readonly string[], f.id).toContain('webhook');
    expect(sendsTo('Channeling')).toEqual([queueArn('webhook')]);
    expect(sendsTo('Prompt')).toEqual([queueArn('run'), queueArn('webhook')]);
  });

  it('the executor consumes the run queue one vessel per invocation, at most 20 at once, reporting partial batch failures', () => {
    const executor = stack.functionOf('VesselExecutor');
    const mappings = ofType('AWS::Lambda::EventSourceMapping').filter(
      ([, m]) => JSON.stringify(m.Properties?.FunctionName) === JSON.stringify({ Ref: logicalIdOf(executor.fn) }),
    );
    expect(mappings.map(([, m]) => m.Properties)).toEqual([
      expect.objectContaining({
        EventSourceArn: { 'Fn::GetAtt': [logicalIdOf(stack.queues.byName.run.queue), 'Arn'] },
        BatchSize: 1,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        ScalingConfig: { MaximumConcurrency: 20 },
      }),
    ]);
    expect(resources[logicalIdOf(executor.fn)]!.Properties).toMatchObject({ Timeout: 900, MemorySize: 1024 });
    // The run queue has no other consumer.
    const onRun = ofType('AWS::Lambda::EventSourceMapping').filter(
      ([, m]) => JSON.stringify(m.Properties?.EventSourceArn) === JSON.stringify({ 'Fn::GetAtt': [logicalIdOf(stack.queues.byName.run.queue), 'Arn'] }),
    );
    expect(onRun).toHaveLength(1);
  });

  it('the reconciler runs on an EventBridge rule every minute, which alone may invoke it', () => {
    const reconciler = stack.functionOf('VesselReconciler');
    // One rule per schedule entry of the manifest; the reconciler's is the one targeting it.
    expect(ofType('AWS::Events::Rule')).toHaveLength(FUNCTIONS.filter((f) => f.trigger.kind === 'schedule').length);
    const rules = ofType('AWS::Events::Rule').filter(([, r]) => JSON.stringify(r.Properties?.Targets).includes(JSON.stringify(fnArnOf(reconciler.fn))));
    expect(rules).toHaveLength(1);
    const [ruleId, rule] = rules[0]!;
    expect(rule.Properties).toMatchObject({
      ScheduleExpression: 'rate(1 minute)',
      State: 'ENABLED',
      Targets: [expect.objectContaining({ Arn: fnArnOf(reconciler.fn) })],
    });
    template.hasResourceProperties('AWS::Lambda::Permission', {
      Action: 'lambda:InvokeFunction',
      FunctionName: fnArnOf(reconciler.fn),
      Principal: 'events.amazonaws.com',
      SourceArn: { 'Fn::GetAtt': [ruleId, 'Arn'] },
    });
    expect(resources[logicalIdOf(reconciler.fn)]!.Properties).toMatchObject({ Timeout: 60, MemorySize: 256 });
  });
});

describe('webhooks', () => {
  const sender = () => stack.functionOf('WebhookSender');
  const webhook = () => stack.queues.byName.webhook;
  const arnOf = (c: IConstruct) => ({ 'Fn::GetAtt': [logicalIdOf(c), 'Arn'] });

  it('the webhook sender consumes the webhook queue ten deliveries at a time, reporting partial batch failures, within 30 s', () => {
    const mappings = ofType('AWS::Lambda::EventSourceMapping').filter(
      ([, m]) => JSON.stringify(m.Properties?.FunctionName) === JSON.stringify({ Ref: logicalIdOf(sender().fn) }),
    );
    expect(mappings.map(([, m]) => m.Properties)).toEqual([
      expect.objectContaining({ EventSourceArn: arnOf(webhook().queue), BatchSize: 10, FunctionResponseTypes: ['ReportBatchItemFailures'] }),
    ]);
    expect(queueSpec('webhook').batchSize).toBe(10);
    // The webhook queue has no other consumer.
    const onWebhook = ofType('AWS::Lambda::EventSourceMapping').filter(
      ([, m]) => JSON.stringify(m.Properties?.EventSourceArn) === JSON.stringify(arnOf(webhook().queue)),
    );
    expect(onWebhook).toHaveLength(1);
    // 30 s: a 10 s delivery plus bookkeeping, within the queue's consumer timeout (its visibility is 6x that).
    expect(resources[logicalIdOf(sender().fn)]!.Properties).toMatchObject({ Timeout: 30, MemorySize: 256 });
    expect(queueSpec('webhook').consumerTimeoutSeconds).toBe(30);
  });

  it('the webhook sender is told its queue, its dead-letter queue, the key, and the schedule group and role; no Anthropic secret, no run queue', () => {
    const env = envOf(sender());
    expect(env).toMatchObject({
      WEBHOOK_QUEUE_URL: { Ref: logicalIdOf(webhook().queue) },
      WEBHOOK_QUEUE_ARN: arnOf(webhook().queue),
      WEBHOOK_DEAD_LETTER_QUEUE_URL: { Ref: logicalIdOf(webhook().deadLetterQueue) },
      PROVIDER_KEYS_KMS_KEY_ID: arnOf(stack.secrets.providerKeysKey),
      SCHEDULE_GROUP_NAME: 'prompt-gateway-dev',
      SCHEDULER_ROLE_ARN: arnOf(stack.scheduling.role),
      VESSELS_TABLE: { Ref: logicalIdOf(stack.data.tables.Vessels) },
    });
    for (const absent of [
      'ANTHROPIC_API_KEY_SECRET_ARN',
      'RUN_QUEUE_URL',
      'RUN_QUEUE_ARN',
      'RUN_DEAD_LETTER_QUEUE_URL',
      'ALLOW_LOOPBACK_URLS',
      'WEBHOOK_RETRY_WAITS',
    ]) {
      expect(env, absent).not.toHaveProperty(absent);
    }
  });

  it('the webhook sender may Decrypt (never Encrypt), send to the webhook queue and its dead-letter queue, and schedule; nothing of Secrets Manager', () => {
    const statements = roleStatements(resources, logicalIdOf(sender().role)).map(({ statement }) => statement);
    const actions = statements.flatMap((st) => asArray(st.Action));
    expect(actions.filter((a) => a.startsWith('kms:'))).toEqual(['kms:Decrypt']);
    expect(actions).not.toContain('kms:Encrypt');
    expect(actions.filter((a) => a.startsWith('secretsmanager:'))).toEqual([]);
    expect(statements.filter((st) => asArray(st.Action).some((a) => a.startsWith('kms:')))).toEqual([
      { Action: 'kms:Decrypt', Effect: 'Allow', Resource: arnOf(stack.secrets.providerKeysKey) },
    ]);
    const sendsTo = statements.filter((st) => asArray(st.Action).includes('sqs:SendMessage')).flatMap((st) => asArray(st.Resource as unknown));
    // In whatever order CDK merges the statements.
    expect(sendsTo.map((r) => JSON.stringify(r)).sort()).toEqual(
      [arnOf(webhook().queue), arnOf(webhook().deadLetterQueue)].map((r) => JSON.stringify(r)).sort(),
    );
    // Its tables: Vessels (callbacks' delivery records) and Usage (budget alerts' items, where theirs are).
    const tableIds = TABLES.map((t) => logicalIdOf(stack.data.tables[t.id]));
    const onTables = tableIds.filter((id) => JSON.stringify(statements).includes(`"${id}"`));
    expect(onTables.sort()).toEqual([logicalIdOf(stack.data.tables.Usage), logicalIdOf(stack.data.tables.Vessels)].sort());
  });

  it('no other role may send to a dead-letter queue', () => {
    const dlqArns = stack.queues.all.map((q) => JSON.stringify(arnOf(q.deadLetterQueue)));
    const senders = iamStatements(resources)
      .filter(({ statement }) => asArray(statement.Action).includes('sqs:SendMessage'))
      .filter(({ statement }) => asArray(statement.Resource as unknown).some((r) => dlqArns.includes(JSON.stringify(r))))
      .map(({ logicalId }) => resources[logicalId]!.Properties?.Roles);
    expect(senders).toEqual([[{ Ref: logicalIdOf(sender().role) }]]);
  });
});

describe('/ws sessions', () => {
  const sessions = () => stack.functionOf('Sessions');
  const turnWorker = () => stack.functionOf('SessionTurn');
  const sweeper = () => stack.functionOf('SessionSweeper');
  const ws = () => stack.webSockets.Sessions!;
  const apiId = () => logicalIdOf(ws().api);
  const arnOf = (c: IConstruct) => ({ 'Fn::GetAtt': [logicalIdOf(c), 'Arn'] });
  /** `execute-api:ManageConnections` on this API's connections, and nothing more. */
  const manageConnections = () => ({
    Action: 'execute-api:ManageConnections',
    Effect: 'Allow',
    Resource: {
      'Fn::Join': [
        '',
        [
          'arn:',
          { Ref: 'AWS::Partition' },
          ':execute-api:',
          { Ref: 'AWS::Region' },
          ':',
          { Ref: 'AWS::AccountId' },
          ':',
          { Ref: apiId() },
          '/*/*/@connections/*',
        ],
      ],
    },
  });
  const stageUrl = (scheme: 'wss' | 'https') => ({
    'Fn::Join': ['', [`${scheme}://`, { Ref: apiId() }, '.execute-api.', { Ref: 'AWS::Region' }, '.', { Ref: 'AWS::URLSuffix' }, '/dev']],
  });
  const statementsOf = (id: string) => roleStatements(resources, logicalIdOf(stack.functionOf(id).role)).map(({ statement }) => statement);
  const sendsTo = (id: string) =>
    statementsOf(id)
      .filter((st) => asArray(st.Action).includes('sqs:SendMessage'))
      .flatMap((st) => asArray(st.Resource as unknown));
  /** The tables a role's statements name, split by whether it may write them. */
  const tablesOf = (id: string) => {
    const statements = statementsOf(id).filter((st) => asArray(st.Action).some((a) => a.startsWith('dynamodb:')));
    const named = (writes: boolean) =>
      TABLES.filter((t) =>
        statements.some(
          (st) =>
            asArray(st.Action).includes('dynamodb:PutItem') === writes && JSON.stringify(st.Resource).includes(`"${logicalIdOf(stack.data.tables[t.id])}"`),
        ),
      )
        .map((t) => t.id)
        .sort();
    return { read: named(false).filter((t) => !named(true).includes(t)), readwrite: named(true) };
  };
  const manifestTables = (id: 'Sessions' | 'SessionTurn' | 'SessionSweeper') => {
    const tables = Object.entries((FUNCTIONS.find((f) => f.id === id)!.access as FunctionAccess).tables);
    return {
      read: tables
        .filter(([, mode]) => mode === 'read')
        .map(([t]) => t)
        .sort(),
      readwrite: tables
        .filter(([, mode]) => mode === 'readwrite')
        .map(([t]) => t)
        .sort(),
    };
  };

  it('one WebSocket API whose $connect, $disconnect and $default all invoke the Sessions function', () => {
    expect(Object.keys(stack.webSockets)).toEqual(['Sessions']);
    template.resourceCountIs('AWS::ApiGatewayV2::Api', 1);
    expect(resources[apiId()]!.Properties).toMatchObject({ ProtocolType: 'WEBSOCKET', Name: 'prompt-gateway-dev-sessionswebsocket' });
    const routes = ofType('AWS::ApiGatewayV2::Route').map(([, r]) => r.Properties!);
    expect(routes.map((r) => r.RouteKey).sort()).toEqual(['$connect', '$default', '$disconnect']);
    for (const route of routes) {
      expect(route, String(route.RouteKey)).toMatchObject({ ApiId: { Ref: apiId() }, AuthorizationType: 'NONE' });
      expect(route.Target).toEqual({ 'Fn::Join': ['', ['integrations/', { Ref: expect.any(String) }]] });
      const integrationId = (route.Target as { 'Fn::Join': [string, [string, { Ref: string }]] })['Fn::Join'][1][1].Ref;
      const integration = resources[integrationId]!;
      expect(integration.Type).toBe('AWS::ApiGatewayV2::Integration');
      expect(integration.Properties).toMatchObject({ ApiId: { Ref: apiId() }, IntegrationType: 'AWS_PROXY' });
      expect(JSON.stringify(integration.Properties?.IntegrationUri)).toContain(JSON.stringify(fnArnOf(sessions().fn)));
    }
    // API Gateway may invoke it, from this API only; nothing else invokes it.
    const permissions = ofType('AWS::Lambda::Permission').filter(
      ([, p]) => JSON.stringify(p.Properties?.FunctionName) === JSON.stringify(fnArnOf(sessions().fn)),
    );
    expect(permissions.length).toBeGreaterThan(0);
    for (const [, permission] of permissions) {
      expect(permission.Properties).toMatchObject({ Action: 'lambda:InvokeFunction', Principal: 'apigateway.amazonaws.com' });
      expect(JSON.stringify(permission.Properties?.SourceArn)).toContain(JSON.stringify({ Ref: apiId() }));
    }
    expect(
      ofType('AWS::Lambda::EventSourceMapping').filter(
        ([, m]) => JSON.stringify(m.Properties?.FunctionName) === JSON.stringify({ Ref: logicalIdOf(sessions().fn) }),
      ),
    ).toEqual([]);
    expect(resources[logicalIdOf(sessions().fn)]!.Properties).toMatchObject({ Timeout: 29, MemorySize: 512 });
  });

  it('its stage is named after the gateway stage, auto-deployed, throttled, with access logs kept for a while', () => {
    template.resourceCountIs('AWS::ApiGatewayV2::Stage', 1);
    const stage = resources[logicalIdOf(ws().stage)]!;
    expect(stage.Properties).toMatchObject({
      ApiId: { Ref: apiId() },
      StageName: 'dev',
      AutoDeploy: true,
      DefaultRouteSettings: { ThrottlingRateLimit: 50, ThrottlingBurstLimit: 100 },
      AccessLogSettings: { DestinationArn: arnOf(ws().accessLogs), Format: expect.stringContaining('$context.connectionId') },
    });
    expect(resources[logicalIdOf(ws().accessLogs)]!.Properties?.RetentionInDays).toBeGreaterThan(0);
  });

  it("outputs SessionsWebSocketUrl: the stage's wss:// URL", () => {
    template.hasOutput('SessionsWebSocketUrl', { Value: stageUrl('wss') });
    template.hasOutput('SessionsFunctionName', { Value: { Ref: logicalIdOf(sessions().fn) } });
  });

  it('the Sessions function may read the registry, read and write sessions, and send to the turn queue only; no provider access', () => {
    const statements = statementsOf('Sessions');
    const actions = statements.flatMap((st) => asArray(st.Action));
    expect(actions.filter((a) => a.startsWith('kms:') || a.startsWith('secretsmanager:'))).toEqual([]);
    expect(actions).not.toContain('kms:Decrypt');
    expect(sendsTo('Sessions')).toEqual([arnOf(stack.queues.byName.turn.queue)]);
    expect(tablesOf('Sessions')).toEqual(manifestTables('Sessions'));
    expect(tablesOf('Sessions')).toEqual({ read: ['Registry'], readwrite: ['Sessions'] });
    // It answers its own clients (GatewayWebSocket's grant), on this API's connections only.
    expect(statements.filter((st) => asArray(st.Action).some((a) => a.startsWith('execute-api:')))).toEqual([manageConnections()]);
    const env = envOf(sessions());
    expect(env).toMatchObject({
      TURN_QUEUE_URL: { Ref: logicalIdOf(stack.queues.byName.turn.queue) },
      TURN_QUEUE_ARN: arnOf(stack.queues.byName.turn.queue),
      SESSIONS_TABLE: { Ref: logicalIdOf(stack.data.tables.Sessions) },
    });
    // The handler reads the management endpoint from each event.
    for (const absent of [
      'PROVIDER_KEYS_KMS_KEY_ID',
      'ANTHROPIC_API_KEY_SECRET_ARN',
      'RUN_QUEUE_URL',
      'TURN_DEAD_LETTER_QUEUE_URL',
      'WEBSOCKET_CALLBACK_URL',
    ]) {
      expect(env, absent).not.toHaveProperty(absent);
    }
  });

  it('the turn worker consumes the turn queue one turn per invocation, reporting partial batch failures, within 15 minutes', () => {
    const turn = stack.queues.byName.turn;
    const mappings = ofType('AWS::Lambda::EventSourceMapping').filter(
      ([, m]) => JSON.stringify(m.Properties?.FunctionName) === JSON.stringify({ Ref: logicalIdOf(turnWorker().fn) }),
    );
    expect(mappings.map(([, m]) => m.Properties)).toEqual([
      expect.objectContaining({ EventSourceArn: arnOf(turn.queue), BatchSize: 1, FunctionResponseTypes: ['ReportBatchItemFailures'] }),
    ]);
    expect(mappings[0]![1].Properties?.ScalingConfig).toBeUndefined();
    // The turn queue has no other consumer.
    expect(
      ofType('AWS::Lambda::EventSourceMapping').filter(([, m]) => JSON.stringify(m.Properties?.EventSourceArn) === JSON.stringify(arnOf(turn.queue))),
    ).toHaveLength(1);
    expect(resources[logicalIdOf(turnWorker().fn)]!.Properties).toMatchObject({ Timeout: 900, MemorySize: 1024 });
    // Visibility 6x the worker's 15 minutes; a turn message is retried three times, then parked in the DLQ (14 days).
    expect(resources[logicalIdOf(turn.queue)]!.Properties).toMatchObject({
      VisibilityTimeout: 5400,
      RedrivePolicy: { deadLetterTargetArn: arnOf(turn.deadLetterQueue), maxReceiveCount: 3 },
    });
    expect(resources[logicalIdOf(turn.deadLetterQueue)]!.Properties).toMatchObject({ MessageRetentionPeriod: 14 * 24 * 3600 });
    expect(queueSpec('turn')).toMatchObject({ batchSize: 1, consumerTimeoutSeconds: 900, maxReceiveCount: 3 });
  });

  it("the turn worker may post to this API's connections, use its manifest tables, call providers, and send to the run and webhook queues only", () => {
    const statements = statementsOf('SessionTurn');
    expect(statements.filter((st) => asArray(st.Action).some((a) => a.startsWith('execute-api:')))).toEqual([manageConnections()]);
    expect(tablesOf('SessionTurn')).toEqual(manifestTables('SessionTurn'));
    expect(tablesOf('SessionTurn')).toEqual({ read: ['Registry'], readwrite: ['Activity', 'Leases', 'Sessions', 'Usage', 'Vessels'].sort() });
    // Sends to the run queue (a turn's end wakes a parked vessel) and the webhook queue (a settlement's budget alert),
    // never to the turn queue nor any dead-letter queue.
    expect(sendsTo('SessionTurn')).toEqual([arnOf(stack.queues.byName.run.queue), arnOf(stack.queues.byName.webhook.queue)]);
    // Consumes the turn queue (its event source), no other.
    const consumes = statements.filter((st) => asArray(st.Action).includes('sqs:ReceiveMessage')).flatMap((st) => asArray(st.Resource as unknown));
    expect(consumes).toEqual([arnOf(stack.queues.byName.turn.queue)]);
    // Providers: Decrypt the provider keys and read the Anthropic key, nothing else of either.
    expect(statements.filter((st) => asArray(st.Action).some((a) => a.startsWith('kms:') || a.startsWith('secretsmanager:')))).toEqual([
      { Action: 'kms:Decrypt', Effect: 'Allow', Resource: arnOf(stack.secrets.providerKeysKey) },
      {
        Action: ['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue'],
        Effect: 'Allow',
        Resource: { Ref: logicalIdOf(stack.secrets.anthropicKey) },
      },
    ]);
    expect(statements.flatMap((st) => asArray(st.Action)).filter((a) => a.startsWith('scheduler:') || a.startsWith('iam:'))).toEqual([]);
  });

  it("the turn worker is told the stage's management endpoint, the run and webhook queues, the key and the secret; not the turn queue", () => {
    const env = envOf(turnWorker());
    expect(env).toMatchObject({
      WEBSOCKET_CALLBACK_URL: stageUrl('https'),
      RUN_QUEUE_URL: { Ref: logicalIdOf(stack.queues.byName.run.queue) },
      WEBHOOK_QUEUE_URL: { Ref: logicalIdOf(stack.queues.byName.webhook.queue) },
      PROVIDER_KEYS_KMS_KEY_ID: arnOf(stack.secrets.providerKeysKey),
      ANTHROPIC_API_KEY_SECRET_ARN: { Ref: logicalIdOf(stack.secrets.anthropicKey) },
      SESSIONS_TABLE: { Ref: logicalIdOf(stack.data.tables.Sessions) },
    });
    for (const absent of [
      'TURN_QUEUE_URL',
      'TURN_QUEUE_ARN',
      'TURN_DEAD_LETTER_QUEUE_URL',
      'WEBHOOK_DEAD_LETTER_QUEUE_URL',
      'SCHEDULE_GROUP_NAME',
      'ALLOW_LOOPBACK_URLS',
    ]) {
      expect(env, absent).not.toHaveProperty(absent);
    }
  });

  it('the sweeper runs on an EventBridge rule every minute, may read and write sessions (and query their sweep index) and manage connections, nothing else', () => {
    const rules = ofType('AWS::Events::Rule').filter(([, r]) => JSON.stringify(r.Properties?.Targets).includes(JSON.stringify(fnArnOf(sweeper().fn))));
    expect(rules).toHaveLength(1);
    const [ruleId, rule] = rules[0]!;
    expect(rule.Properties).toMatchObject({
      ScheduleExpression: 'rate(1 minute)',
      State: 'ENABLED',
      Targets: [expect.objectContaining({ Arn: fnArnOf(sweeper().fn) })],
    });
    const permissions = ofType('AWS::Lambda::Permission').filter(
      ([, p]) => JSON.stringify(p.Properties?.FunctionName) === JSON.stringify(fnArnOf(sweeper().fn)),
    );
    expect(permissions.map(([, p]) => p.Properties)).toEqual([
      expect.objectContaining({ Action: 'lambda:InvokeFunction', Principal: 'events.amazonaws.com', SourceArn: { 'Fn::GetAtt': [ruleId, 'Arn'] } }),
    ]);
    expect(resources[logicalIdOf(sweeper().fn)]!.Properties).toMatchObject({ Timeout: 60, MemorySize: 256 });

    const statements = statementsOf('SessionSweeper');
    expect(statements.filter((st) => asArray(st.Action).some((a) => a.startsWith('execute-api:')))).toEqual([manageConnections()]);
    expect(tablesOf('SessionSweeper')).toEqual(manifestTables('SessionSweeper'));
    expect(tablesOf('SessionSweeper')).toEqual({ read: [], readwrite: ['Sessions'] });
    expect(statements.filter((st) => JSON.stringify(st.Resource).includes('/index/'))).toEqual([
      {
        Action: 'dynamodb:Query',
        Effect: 'Allow',
        Resource: { 'Fn::Join': ['', [arnOf(stack.data.tables.Sessions), `/index/${SESSIONS_SWEEP_INDEX}`]] },
      },
    ]);
    const actions = [...new Set(statements.flatMap((st) => asArray(st.Action)))];
    expect(actions.filter((a) => !a.startsWith('dynamodb:') && !a.startsWith('logs:')).sort()).toEqual(['execute-api:ManageConnections']);
    const env = envOf(sweeper());
    expect(env.WEBSOCKET_CALLBACK_URL).toEqual(stageUrl('https'));
    for (const absent of ['PROVIDER_KEYS_KMS_KEY_ID', 'ANTHROPIC_API_KEY_SECRET_ARN', 'TURN_QUEUE_URL', 'RUN_QUEUE_URL'])
      expect(env, absent).not.toHaveProperty(absent);
  });

  it("only the three /ws functions may manage connections, and only this API's", () => {
    expect(FUNCTIONS.filter((f) => (f.access as FunctionAccess).connections).map((f) => f.id)).toEqual(['SessionTurn', 'SessionSweeper']);
    const grants = iamStatements(resources)
      .filter(({ statement }) => asArray(statement.Action).some((a) => a.startsWith('execute-api:')))
      .map(({ logicalId, statement }) => ({ roles: resources[logicalId]!.Properties?.Roles, statement }));
    expect(grants).toHaveLength(3);
    for (const { statement } of grants) expect(statement).toEqual(manageConnections());
    expect(grants.map((g) => JSON.stringify(g.roles)).sort()).toEqual(
      ['Sessions', 'SessionTurn', 'SessionSweeper'].map((id) => JSON.stringify([{ Ref: logicalIdOf(stack.functionOf(id).role) }])).sort(),
    );
  });

  it("the Sessions table has the sparse sweep index (sweepShard, sweepAt), projection ALL, the project's listing, and its TTL", () => {
    expect([SESSIONS_SWEEP_INDEX, SESSIONS_PROJECT_INDEX]).toEqual(['sweep', 'project']);
    const table = resources[logicalIdOf(stack.data.tables.Sessions)]!;
    expect(table.Properties?.GlobalSecondaryIndexes).toEqual([
      {
        IndexName: 'sweep',
        KeySchema: [
          { AttributeName: 'sweepShard', KeyType: 'HASH' },
          { AttributeName: 'sweepAt', KeyType: 'RANGE' },
        ],
        Projection: { ProjectionType: 'ALL' },
      },
      {
        IndexName: 'project',
        KeySchema: [
          { AttributeName: 'projectId', KeyType: 'HASH' },
          { AttributeName: 'createdAt', KeyType: 'RANGE' },
        ],
        // Never the conversation.
        Projection: { ProjectionType: 'INCLUDE', NonKeyAttributes: ['sessionId', 'userId', 'state', 'messages'] },
      },
    ]);
    expect(table.Properties?.AttributeDefinitions).toEqual(
      expect.arrayContaining([
        { AttributeName: 'pk', AttributeType: 'S' },
        { AttributeName: 'sweepShard', AttributeType: 'S' },
        { AttributeName: 'sweepAt', AttributeType: 'N' },
      ]),
    );
    expect(table.Properties?.TimeToLiveSpecification).toEqual({ AttributeName: 'expiresAt', Enabled: true });
  });

  it('the scheduler may not deliver to the turn queue (nothing schedules turns)', () => {
    const scheduled = JSON.stringify(roleStatements(resources, logicalIdOf(stack.scheduling.role)));
    expect(scheduled).not.toContain(logicalIdOf(stack.queues.byName.turn.queue));
  });

  it('a function asking for connections without exactly one websocket function is refused at synth', () => {
    const withoutApi = FUNCTIONS.filter((f) => f.id !== 'Sessions');
    expect(() => new GatewayStack(testApp(), 'NoApi', { stage: 'dev', production: false, functions: withoutApi })).toThrow(
      /SessionTurn, SessionSweeper ask for `connections`.*exactly one function with a websocket trigger; it has none/,
    );
    const second: FunctionSpec = { ...functionSpec('Sessions'), id: 'MoreSessions' };
    expect(() => new GatewayStack(testApp(), 'TwoApis', { stage: 'dev', production: false, functions: [...FUNCTIONS, second] })).toThrow(
      /it has 2 \(Sessions, MoreSessions\)/,
    );
    // Without a function asking for connections, no websocket function is needed.
    const neither = FUNCTIONS.filter((f) => !['Sessions', 'SessionTurn', 'SessionSweeper'].includes(f.id));
    expect(new GatewayStack(testApp(), 'NoWs', { stage: 'dev', production: false, functions: neither }).webSockets).toEqual({});
  });
});

describe('conjure API', () => {
  it('GET /usage is proxied to the conjure function; the stage logs, throttles and validates', () => {
    template.hasResourceProperties('AWS::ApiGateway::Resource', { PathPart: 'usage' });
    template.hasResourceProperties('AWS::ApiGateway::Method', {
      HttpMethod: 'GET',
      AuthorizationType: 'NONE',
      RequestValidatorId: Match.anyValue(),
      Integration: {
        Type: 'AWS_PROXY',
        IntegrationHttpMethod: 'POST',
        Uri: Match.objectLike({ 'Fn::Join': Match.arrayWith([Match.arrayWith([{ 'Fn::GetAtt': [logicalIdOf(stack.conjure.fn), 'Arn'] }])]) }),
      },
    });
    template.hasResourceProperties('AWS::ApiGateway::RequestValidator', { ValidateRequestBody: true, ValidateRequestParameters: true });
    template.hasResourceProperties('AWS::ApiGateway::Stage', {
      StageName: 'dev',
      AccessLogSetting: { DestinationArn: Match.anyValue(), Format: Match.stringLikeRegexp('requestId') },
      MethodSettings: [
        Match.objectLike({
          HttpMethod: '*',
          ResourcePath: '/*',
          LoggingLevel: 'ERROR',
          DataTraceEnabled: false,
          ThrottlingRateLimit: 50,
          ThrottlingBurstLimit: 100,
        }),
      ],
    });
    template.hasResourceProperties('AWS::ApiGateway::RestApi', { EndpointConfiguration: { Types: ['REGIONAL'] } });
  });

  it('every resource with a route also routes OPTIONS (the CORS preflight) to the same Lambda proxy integration, without authorization', () => {
    type MethodProps = { HttpMethod: string; ResourceId: unknown; AuthorizationType?: string; ApiKeyRequired?: boolean; Integration?: Record<string, unknown> };
    const methods = ofType('AWS::ApiGateway::Method').map(([logicalId, m]) => ({ logicalId, ...(m.Properties as unknown as MethodProps) }));
    const resourceOf = (m: MethodProps) => JSON.stringify(m.ResourceId);
    const routed = methods.filter((m) => m.HttpMethod !== 'OPTIONS');
    const preflights = methods.filter((m) => m.HttpMethod === 'OPTIONS');
    // One resource per distinct path of CONJURE_ROUTES, each with exactly one OPTIONS method.
    const paths = new Set(CONJURE_ROUTES.map((r) => r.path));
    expect(routed).toHaveLength(CONJURE_ROUTES.length);
    expect(new Set(routed.map(resourceOf)).size).toBe(paths.size);
    expect(preflights).toHaveLength(paths.size);
    expect(new Set(preflights.map(resourceOf))).toEqual(new Set(routed.map(resourceOf)));
    for (const preflight of preflights) {
      expect(preflight.AuthorizationType, preflight.logicalId).toBe('NONE');
      expect(preflight.ApiKeyRequired ?? false, preflight.logicalId).toBe(false);
      expect(preflight.Integration, preflight.logicalId).toMatchObject({ Type: 'AWS_PROXY', IntegrationHttpMethod: 'POST' });
      // The same function as the resource's other methods.
      for (const m of routed.filter((r) => resourceOf(r) === resourceOf(preflight))) {
        expect(preflight.Integration?.Uri, `${preflight.logicalId} vs ${m.logicalId}`).toEqual(m.Integration?.Uri);
      }
      expect(JSON.stringify(preflight.Integration?.Uri)).toContain(logicalIdOf(stack.conjure.fn));
    }
    // No API Gateway-side CORS: nothing answers a preflight by itself (defaultCorsPreflightOptions makes MOCK methods).
    expect(methods.filter((m) => m.Integration?.Type !== 'AWS_PROXY')).toEqual([]);
    // API Gateway may invoke the function for OPTIONS (the proxy integration's permission covers each method it names).
    const permissions = ofType('AWS::Lambda::Permission').map(([, p]) => JSON.stringify(p.Properties?.SourceArn ?? ''));
    expect(permissions.filter((arn) => arn.includes('/OPTIONS/'))).toHaveLength(paths.size);
  });

  it("the preflights' cdk-nag findings are acknowledged on each OPTIONS method with the preflight's own reason", () => {
    const preflights = stack.conjureApi!.api.methods.filter((m) => m.httpMethod === 'OPTIONS');
    expect(preflights.length).toBeGreaterThan(0);
    for (const method of preflights) {
      const acknowledged = method.node.metadata
        .filter((e) => e.type === Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
        .flatMap((e) => Object.entries(e.data as Record<string, unknown>))
        .map(([id, reason]) => ({ id: id.replace(/^annotation::/i, ''), reason: String(reason) }));
      expect(acknowledged.map((a) => a.id).sort(), method.node.path).toEqual(['AwsSolutions-APIG4', 'AwsSolutions-COG4']);
      for (const a of acknowledged) expect(a.reason).toMatch(/preflight/);
    }
  });

  it("API Gateway's own 4xx and 5xx answers give the request's Origin back, with Vary: Origin", () => {
    for (const type of ['DEFAULT_4XX', 'DEFAULT_5XX']) {
      template.hasResourceProperties('AWS::ApiGateway::GatewayResponse', {
        ResponseType: type,
        RestApiId: { Ref: logicalIdOf(stack.conjureApi!.api) },
        ResponseParameters: {
          'gatewayresponse.header.Access-Control-Allow-Origin': 'method.request.header.Origin',
          'gatewayresponse.header.Vary': "'Origin'",
        },
      });
    }
    // Their status and body stay API Gateway's own (no StatusCode, no template): only headers are added.
    for (const [, response] of ofType('AWS::ApiGateway::GatewayResponse')) {
      expect(response.Properties).not.toHaveProperty('StatusCode');
      expect(response.Properties).not.toHaveProperty('ResponseTemplates');
    }
    // Nothing grants credentials to any origin.
    expect(JSON.stringify(resources)).not.toMatch(/Access-Control-Allow-Credentials/i);
  });

  it('refuses at synth a path served by two functions: its preflight could reach only one', () => {
    const withSecond = () =>
      new GatewayStack(testApp(), 'SharedPath', {
        stage: 'dev',
        production: false,
        functions: [
          ...FUNCTIONS,
          {
            id: 'Second',
            entry: 'lambdas/handlers/conjure-api.ts',
            description: 'a second REST function on /usage',
            memoryMb: 256,
            timeoutSeconds: 29,
            trigger: { kind: 'rest', routes: [{ method: 'DELETE', path: '/usage' }] },
            access: { tables: {}, providers: false, queues: [] },
          },
        ],
      });
    expect(withSecond).toThrow(/Two functions serve \/usage on the conjure API .*OPTIONS/);
  });
});

describe('observability', () => {
  it('a dashboard and alarms on 5xx rates, throttles, dead letters and ledger errors', () => {
    template.resourceCountIs('AWS::CloudWatch::Dashboard', 1);
    const alarmNames = ofType('AWS::CloudWatch::Alarm').map(([, a]) => a.Properties?.AlarmName);
    expect(alarmNames.sort()).toEqual(
      [
        'ConjureApi5xxRate',
        'GatewayErrorRate',
        'LedgerErrors',
        // Each function of the manifest: failed invocations and throttles.
        ...FUNCTIONS.flatMap(({ id }) => [`${id}ErrorRate`, `${id}Throttles`]),
        // Each queue's dead-letter queue.
        ...stack.queues.all.map((q) => `${q.label}DeadLetterQueueDepth`),
      ]
        .map((n) => `prompt-gateway-dev-${n}`)
        .sort(),
    );
    expect(alarmNames).toEqual(
      expect.arrayContaining(
        [
          'SessionsErrorRate',
          'SessionTurnThrottles',
          'SessionSweeperErrorRate',
          'RunDeadLetterQueueDepth',
          'WebhookDeadLetterQueueDepth',
          'TurnDeadLetterQueueDepth',
        ].map((n) => `prompt-gateway-dev-${n}`),
      ),
    );
    const alarm = (name: string) => ofType('AWS::CloudWatch::Alarm').find(([, a]) => a.Properties?.AlarmName === `prompt-gateway-dev-${name}`)![1].Properties!;
    expect(alarm('LedgerErrors')).toMatchObject({
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      Metrics: [
        {
          MetricStat: {
            Metric: { Namespace: 'PromptGateway', MetricName: 'LedgerErrors', Dimensions: [{ Name: 'service', Value: 'prompt-gateway-dev' }] },
            Stat: 'Sum',
          },
        },
      ],
    });
    for (const queue of ['Run', 'Webhook', 'Turn']) {
      expect(alarm(`${queue}DeadLetterQueueDepth`)).toMatchObject({
        Threshold: 0,
        ComparisonOperator: 'GreaterThanThreshold',
        Metrics: [{ MetricStat: { Metric: { Namespace: 'AWS/SQS', MetricName: 'ApproximateNumberOfMessagesVisible' }, Stat: 'Maximum' } }],
      });
    }
    expect(JSON.stringify(alarm('ConjureApi5xxRate'))).toContain('5XXError');
    for (const { id: fnId } of FUNCTIONS) {
      const errorRate = JSON.stringify(alarm(`${fnId}ErrorRate`));
      expect(errorRate).toMatch(/"MetricName":"Errors".*"MetricName":"Invocations"|"MetricName":"Invocations".*"MetricName":"Errors"/);
      expect(errorRate).toContain(JSON.stringify({ Ref: logicalIdOf(stack.functionOf(fnId).fn) }));
      expect(JSON.stringify(alarm(`${fnId}Throttles`))).toContain(JSON.stringify({ Ref: logicalIdOf(stack.functionOf(fnId).fn) }));
    }
    expect(JSON.stringify(alarm('GatewayErrorRate'))).toContain('"Namespace":"PromptGateway"');
    const body = JSON.stringify(resources[logicalIdOf(stack.node.findChild('Observability').node.findChild('Dashboard'))]);
    for (const metric of [
      'Requests',
      'Errors',
      'SpendMicrodollars',
      'UpstreamLatency',
      'Throttles',
      'Duration',
      'ApproximateNumberOfMessagesVisible',
      '5XXError',
      'VesselTriggers',
      'VesselsReconciled',
      'WebhookAttempts',
      'WebhooksFailed',
      'SessionEvents',
      'SessionTurns',
      'SessionsSwept',
    ]) {
      expect(body).toContain(metric);
    }
    expect(body).toContain('p99');
    // Every function of the manifest has its errors, throttles, duration and invocations on it.
    for (const { id: fnId } of FUNCTIONS) {
      expect(body).toContain(JSON.stringify({ Ref: logicalIdOf(stack.functionOf(fnId).fn) }));
      for (const label of [`${fnId} errors`, `${fnId} throttles`, `${fnId} p99`]) expect(body).toContain(label);
    }
  });
});

describe('outputs', () => {
  it('exports the names the operator CLI reads', () => {
    const outputs = Object.keys(template.toJSON().Outputs);
    expect(outputs).toEqual(expect.arrayContaining(OUTPUTS));
    // One <Id>Url per function URL, the REST API's, the WebSocket API's, and the webhook queues' URLs, nothing else;
    // each function URL output is its own URL's.
    expect(outputs.filter((o) => o.endsWith('Url')).sort()).toEqual([
      'ChannelingUrl',
      'ConjureUrl',
      'PromptUrl',
      'SessionsWebSocketUrl',
      'WebhookDeadLetterQueueUrl',
      'WebhookQueueUrl',
    ]);
    template.hasOutput('WebhookQueueUrl', { Value: { Ref: logicalIdOf(stack.queues.byName.webhook.queue) } });
    template.hasOutput('WebhookDeadLetterQueueUrl', { Value: { Ref: logicalIdOf(stack.queues.byName.webhook.deadLetterQueue) } });
    template.hasOutput('WebhookSenderFunctionName', { Value: { Ref: logicalIdOf(stack.functionOf('WebhookSender').fn) } });
    for (const fnId of ['Channeling', 'Prompt']) {
      const f = stack.functionOf(fnId);
      template.hasOutput(`${fnId}Url`, {
        Value: { 'Fn::Join': ['', ['https://', { 'Fn::Select': [2, { 'Fn::Split': ['/', { 'Fn::GetAtt': [urlIdOf(f.fn), 'FunctionUrl'] }] }] }]] },
      });
      template.hasOutput(`${fnId}FunctionName`, { Value: { Ref: logicalIdOf(f.fn) } });
    }
    template.hasOutput('ProviderKeysKmsKeyId', { Value: { 'Fn::GetAtt': [logicalIdOf(stack.secrets.providerKeysKey), 'Arn'] } });
    template.hasOutput('Region', { Value: { Ref: 'AWS::Region' } });
  });
});

describe('a new function is one manifest entry', () => {
  // Any existing handler file stands in for the new ones: bundling is skipped here.
  const stand_in = 'lambdas/handlers/conjure-api.ts';
  const base = { entry: stand_in, memoryMb: 256 } as const;

  it('a streaming-url entry deploys another RESPONSE_STREAM URL, its <Id>Url and <Id>FunctionName outputs and its grants', () => {
    const slotApp = testApp();
    const withOracle = new GatewayStack(slotApp, 'WithOracle', {
      stage: 'dev',
      production: false,
      functions: [
        ...FUNCTIONS,
        {
          ...base,
          id: 'Oracle',
          description: 'Prompt gateway /oracle (a further streaming endpoint)',
          timeoutSeconds: 900,
          trigger: { kind: 'streaming-url', paths: ['/oracle'] },
          access: { tables: { Registry: 'read', Usage: 'readwrite', Leases: 'readwrite' }, providers: true, queues: [] },
        },
      ],
    });
    const t = Template.fromStack(withOracle);
    const oracle = withOracle.functionOf('Oracle');
    // One URL more than the real manifest deploys.
    const manifestUrls = FUNCTIONS.filter((f) => f.trigger.kind === 'streaming-url').length;
    expect(manifestUrls).toBe(ofType('AWS::Lambda::Url').length);
    t.resourceCountIs('AWS::Lambda::Url', manifestUrls + 1);
    t.hasResourceProperties('AWS::Lambda::Url', {
      AuthType: 'NONE',
      InvokeMode: 'RESPONSE_STREAM',
      TargetFunctionArn: { 'Fn::GetAtt': [withOracle.getLogicalId(oracle.fn.node.defaultChild as never), 'Arn'] },
    });
    expect(Object.keys(t.toJSON().Outputs)).toEqual(expect.arrayContaining([...OUTPUTS, 'OracleUrl', 'OracleFunctionName', 'ChannelingFunctionName']));
    const tables = (name: string) => withOracle.getLogicalId(withOracle.data.tables[name as 'Leases'].node.defaultChild as never);
    const resourcesOfOracle = iamStatements(t.toJSON().Resources)
      .filter(({ logicalId }) => logicalId.startsWith(withOracle.getLogicalId(oracle.role.node.defaultChild as never).replace(/Role.*$/, 'RoleDefaultPolicy')))
      .flatMap(({ statement }) => asArray(statement.Resource as unknown))
      .map((r) => JSON.stringify(r));
    expect(resourcesOfOracle.some((r) => r.includes(tables('Leases')))).toBe(true);
    expect(resourcesOfOracle.some((r) => r.includes(tables('Vessels')))).toBe(false);
  });

  it('sqs, websocket and schedule entries get their event source, API and rule, with exactly their grants, nag-clean', () => {
    const probeApp = testApp();
    const probe = new GatewayStack(probeApp, 'Triggers', {
      stage: 'dev',
      production: false,
      // The probe consumer stands in for the manifest's webhook sender (one consumer per queue, as deployed), the probe
      // Sessions for the manifest's (one WebSocket API; the turn worker and the sweeper post to its connections).
      functions: [
        ...FUNCTIONS.filter((f) => f.id !== 'WebhookSender' && f.id !== 'Sessions'),
        {
          ...base,
          id: 'WebhookProbe',
          description: 'Prompt gateway webhook probe consumer',
          timeoutSeconds: 30,
          trigger: { kind: 'sqs', queue: 'webhook', maxConcurrency: 5 },
          access: { tables: { Vessels: 'readwrite' }, providers: false, queues: ['run'] },
        },
        {
          ...base,
          id: 'Sessions',
          description: 'Prompt gateway /ws sessions',
          timeoutSeconds: 60,
          trigger: { kind: 'websocket' },
          access: { tables: { Sessions: 'readwrite' }, providers: false, queues: [] },
        },
        {
          ...base,
          id: 'Sweeper',
          description: 'Prompt gateway reservation sweep',
          timeoutSeconds: 60,
          trigger: { kind: 'schedule', expression: 'rate(5 minutes)' },
          access: { tables: { Usage: 'readwrite' }, providers: false, queues: [] },
        },
      ],
    });
    const t = Template.fromStack(probe);
    const json = t.toJSON() as { Resources: typeof resources; Outputs: Record<string, unknown> };
    const idOf = (c: IConstruct) => probe.getLogicalId((CfnElement.isCfnElement(c) ? c : c.node.defaultChild) as CfnElement);
    const fnArn = (id: string) => ({ 'Fn::GetAtt': [idOf(probe.functionOf(id).fn), 'Arn'] });

    // sqs: the queue's batch size (QUEUES), partial failures, the concurrency cap; it may send to the run queue
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', {
      EventSourceArn: { 'Fn::GetAtt': [idOf(probe.queues.byName.webhook.queue), 'Arn'] },
      FunctionName: { Ref: idOf(probe.functionOf('WebhookProbe').fn) },
      BatchSize: queueSpec('webhook').batchSize,
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      ScalingConfig: { MaximumConcurrency: 5 },
    });
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ RUN_QUEUE_URL: { Ref: idOf(probe.queues.byName.run.queue) } }) },
    });

    // websocket: one API, its three routes to the function, a logged stage, the right to answer its connections
    t.resourceCountIs('AWS::ApiGatewayV2::Api', 1);
    t.hasResourceProperties('AWS::ApiGatewayV2::Api', { ProtocolType: 'WEBSOCKET', Name: 'prompt-gateway-dev-sessionswebsocket' });
    const routeKeys = Object.values(json.Resources)
      .filter((r) => r.Type === 'AWS::ApiGatewayV2::Route')
      .map((r) => r.Properties?.RouteKey);
    expect(routeKeys.sort()).toEqual(['$connect', '$default', '$disconnect']);
    t.hasResourceProperties('AWS::ApiGatewayV2::Stage', {
      StageName: 'dev',
      AutoDeploy: true,
      AccessLogSettings: { DestinationArn: Match.anyValue(), Format: Match.anyValue() },
    });
    t.hasResourceProperties('AWS::Lambda::Permission', { Principal: 'apigateway.amazonaws.com', FunctionName: fnArn('Sessions') });
    expect(Object.keys(json.Outputs)).toEqual(
      expect.arrayContaining(['SessionsWebSocketUrl', 'SessionsFunctionName', 'WebhookProbeFunctionName', 'SweeperFunctionName']),
    );

    // schedule: an EventBridge rule on the expression, targeting the function
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(5 minutes)',
      State: 'ENABLED',
      Targets: [Match.objectLike({ Arn: fnArn('Sweeper') })],
    });

    // each role is allowed exactly what its entry's access says
    const actionsOf = (id: string) => {
      const roleId = idOf(probe.functionOf(id).role);
      return [
        ...new Set(
          iamStatements(json.Resources)
            .filter(({ logicalId }) =>
              asArray(json.Resources[logicalId]!.Properties?.Roles as unknown[]).some((r) => JSON.stringify(r) === JSON.stringify({ Ref: roleId })),
            )
            .flatMap(({ statement }) => asArray(statement.Action)),
        ),
      ].sort();
    };
    expect(actionsOf('WebhookProbe')).toEqual(
      expect.arrayContaining(['sqs:SendMessage', 'sqs:ReceiveMessage', 'sqs:DeleteMessage', 'dynamodb:PutItem', 'logs:PutLogEvents']),
    );
    expect(actionsOf('WebhookProbe').filter((a) => a.startsWith('kms:') || a.startsWith('secretsmanager:'))).toEqual([]);
    expect(actionsOf('Sessions')).toEqual(expect.arrayContaining(['execute-api:ManageConnections', 'dynamodb:PutItem']));
    expect(actionsOf('Sweeper').filter((a) => !a.startsWith('dynamodb:') && !a.startsWith('logs:'))).toEqual([]);

    const findings = gatewayNagPacks(probeApp).flatMap((pack) =>
      pack.validateScope(probe).violations.map((v) => `${v.ruleName} ${JSON.stringify(v.violatingResources.map((r) => r.resourceLogicalId))}`),
    );
    expect(findings).toEqual([]);
  });

  it("an sqs consumer that may outlive its queue's visibility timeout is refused at synth", () => {
    expect(
      () =>
        new GatewayStack(testApp(), 'TooSlow', {
          stage: 'dev',
          production: false,
          functions: [
            {
              ...base,
              id: 'Executor',
              description: 'too slow for the webhook queue',
              timeoutSeconds: queueSpec('webhook').consumerTimeoutSeconds + 1,
              trigger: { kind: 'sqs', queue: 'webhook' },
              access: { tables: {}, providers: false, queues: [] },
            },
          ],
        }),
    ).toThrow(/visibility timeout/);
  });
});
