import { CfnElement } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FUNCTIONS, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { type QUEUES, queueSpec } from '../../lambdas/store/queues.ts';
import { TABLES } from '../../lambdas/store/tables.ts';
import { buildGatewayApp } from '../../lib/app.ts';
import { bundledSources, type EnvRead, envReads, envSchemaKeys, queueSends, sdkCommands } from './bundle-sources.ts';
import { asArray, type PolicyStatement, removeTestApps, roleStatements, testApp } from './helpers.ts';

/**
 * The deployed stack against the code it runs (issue 26): every function's bundle, as esbuild builds it for the stack
 * (lib/bundling.ts), is read for what it takes from its environment and which queues it sends to; the synthesized
 * template must give it those variables and the IAM to make those calls.
 */

const app = testApp();
const stack = buildGatewayApp(app);
const specs = FUNCTIONS as readonly FunctionSpec[];
type Resources = Record<string, { Type: string; Properties?: Record<string, unknown> }>;
let resources: Resources;
/** The source files under lambdas/ of each function's bundle. */
const sources = new Map<string, string[]>();

beforeAll(async () => {
  const [assembly] = await Promise.all([Promise.resolve(app.synth()), ...specs.map(async (spec) => sources.set(spec.id, await bundledSources(spec.entry)))]);
  resources = (assembly.getStackByName(stack.stackName).template as { Resources: Resources }).Resources;
}, 120_000);

afterAll(removeTestApps);

const logicalIdOf = (construct: IConstruct) => stack.getLogicalId((CfnElement.isCfnElement(construct) ? construct : construct.node.defaultChild) as CfnElement);
const variablesOf = (spec: FunctionSpec) =>
  ((resources[logicalIdOf(stack.functionOf(spec.id).fn)]!.Properties?.Environment as { Variables?: Record<string, unknown> } | undefined)?.Variables ??
    {}) as Record<string, unknown>;
const readsOf = (spec: FunctionSpec): EnvRead[] => sources.get(spec.id)!.flatMap(envReads);
const sendsOf = (spec: FunctionSpec) => sources.get(spec.id)!.flatMap((file) => queueSends(file).map((send) => ({ ...send, file })));

describe('every environment variable a function reads is set on it', () => {
  /**
   * Read in lambdas/ but unset in AWS by design: the local runtime's endpoints and key file, the local Anthropic key
   * (deployed functions read the secret), and the outbound guard's loopback switch (contract.md: never deployed).
   */
  const LOCAL_ONLY: Record<string, string> = {
    DYNAMODB_ENDPOINT: 'DynamoDB Local (the local runtime and tests)',
    SQS_ENDPOINT: 'fauxqs (the local runtime and tests)',
    SCHEDULER_ENDPOINT: "the local runtime's scheduler stand-in",
    PROVIDER_KEYS_LOCAL_KEY_FILE: 'the local alternative to KMS; deployed functions use PROVIDER_KEYS_KMS_KEY_ID',
    ALLOW_LOOPBACK_URLS: 'lets outbound calls reach loopback: tests and the local runtime only, never the stack',
    ANTHROPIC_API_KEY: 'the local Anthropic key; deployed functions read ANTHROPIC_API_KEY_SECRET_ARN',
  };

  /**
   * Read by code a bundle carries but a function only runs when its manifest entry says so: set then (the test
   * checks it is), genuinely unused otherwise, and each reader refuses with the manifest flag's name if reached.
   */
  const ONLY_WHEN: Record<string, { needed: (spec: FunctionSpec) => boolean; why: string }> = {
    SCHEDULE_GROUP_NAME: {
      needed: (spec) => spec.access.scheduler === true,
      why:
        'scheduler() reads it only for a delivery due beyond SQS’s 15-minute delay (scheduling/delay.ts); only the ' +
        'functions with access.scheduler make such deliveries (an /incubate executeAt, a far webhook retry) — the ' +
        "others' deliveries through deliverAt are due now (a wake, a re-drive, a callback hand-off)",
    },
    SCHEDULER_ROLE_ARN: { needed: (spec) => spec.access.scheduler === true, why: 'as SCHEDULE_GROUP_NAME' },
    PROVIDER_KEYS_KMS_KEY_ID: {
      needed: (spec) => Boolean(spec.access.providers || spec.access.encrypts || spec.access.decrypts),
      why:
        'keyCipher() is called to decrypt provider keys (providers), encrypt or decrypt callback secrets (encrypts, ' +
        'decrypts); the registry module brings it into other bundles, which never call it',
    },
    WEBSOCKET_CALLBACK_URL: {
      needed: (spec) => spec.access.connections === true,
      why: "the WebSocket handler reads its stage's management endpoint from each event (lambdas/http/websocket.ts)",
    },
  };

  /**
   * Reads whose key is only known at run time, and what checks them instead: a queue's URL (and, for a schedule, its
   * ARN) is set together with the grant to send to it, which the IAM checks below hold against the code's sends.
   */
  const KNOWN_DYNAMIC: Record<string, string> = {
    'lambdas/queues/sender.ts: env()[envVar]': "the URL of the queue a send names (QUEUES' envVar)",
    'lambdas/queues/sender.ts: env()[deadLetterEnvVar]': 'the URL of the dead-letter queue a sendToDeadLetter names',
    'lambdas/scheduling/scheduler.ts: config[q.arnEnvVar]': 'the ARNs of the queues a schedule may target',
  };

  it('the scan recognises every use of env() and process.env in every bundle', () => {
    const unrecognised = specs.flatMap(readsOf).filter((r) => r.kind === 'unrecognised');
    expect(
      unrecognised.map((r) => `${r.file}:${r.line}: ${r.text}`),
      'read the environment as env().NAME, const { NAME } = env(), or process.env.NAME — or teach test/lib/bundle-sources.ts the new form',
    ).toEqual([]);
    const dynamic = new Set(
      specs
        .flatMap(readsOf)
        .filter((r) => r.kind === 'dynamic')
        .map((r) => `${r.file}: ${r.text}`),
    );
    for (const read of dynamic) expect(KNOWN_DYNAMIC, `a dynamic read of the environment nothing checks: ${read}`).toHaveProperty([read]);
    // The list is not stale: every entry is still read somewhere.
    expect([...dynamic].sort()).toEqual(Object.keys(KNOWN_DYNAMIC).sort());
  });

  it('each key a bundle reads is set by the stack, defaulted by the schema, local-only, or unused by that function', () => {
    const schema = envSchemaKeys();
    const missing: string[] = [];
    for (const spec of specs) {
      const variables = variablesOf(spec);
      const keys = new Map<string, Set<string>>();
      for (const read of readsOf(spec)) {
        if (read.kind === 'key') keys.set(read.key, (keys.get(read.key) ?? new Set()).add(read.file));
      }
      expect(keys.size, spec.id).toBeGreaterThan(3);
      for (const [key, files] of keys) {
        if (key in variables || schema.get(key)?.hasDefault || key in LOCAL_ONLY) continue;
        const only = ONLY_WHEN[key];
        if (only && !only.needed(spec)) continue;
        missing.push(`${spec.id}: ${key} (read in ${[...files].join(', ')})`);
      }
    }
    expect(missing, 'set them in lib/gateway-stack.ts (or grant what sets them in the manifest)').toEqual([]);
  });

  it('a function is told the URL of every queue its code sends to (and the ARN, where it may schedule)', () => {
    const missing: string[] = [];
    for (const spec of specs) {
      const variables = variablesOf(spec);
      for (const { queue, deadLetter, file } of sendsOf(spec)) {
        const q = queueSpec(queue as (typeof QUEUES)[number]['name']);
        const needed = deadLetter ? [q.deadLetterEnvVar] : [q.envVar, ...(spec.access.scheduler ? [q.arnEnvVar] : [])];
        for (const name of needed) if (!(name in variables)) missing.push(`${spec.id}: ${name} (${file} sends to the ${queue} queue)`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('the schema scan sees the defaults', () => {
    const schema = envSchemaKeys();
    expect(schema.get('VESSELS_TABLE')).toEqual({ hasDefault: true });
    expect(schema.get('PROVIDER_KEYS_KMS_KEY_ID')).toEqual({ hasDefault: false });
    for (const key of [...Object.keys(LOCAL_ONLY), ...Object.keys(ONLY_WHEN)]) expect(schema.get(key)?.hasDefault, key).toBe(false);
  });
});

describe('every AWS call a function can make is allowed by its IAM statements', () => {
  /**
   * Each AWS SDK command lambdas/ issues, and the IAM actions it needs. DynamoDB's: which table modes they need
   * (`read` or only `readwrite`); the others: the manifest access that covers them. A command missing here fails the
   * test, so a new kind of call is a decision.
   */
  const DYNAMODB: Record<string, { mode: 'read' | 'readwrite'; actions: string[] }> = {
    GetCommand: { mode: 'read', actions: ['dynamodb:GetItem'] },
    QueryCommand: { mode: 'read', actions: ['dynamodb:Query'] },
    BatchGetCommand: { mode: 'read', actions: ['dynamodb:BatchGetItem'] },
    BatchWriteCommand: { mode: 'readwrite', actions: ['dynamodb:BatchWriteItem'] },
    PutItemCommand: { mode: 'readwrite', actions: ['dynamodb:PutItem'] },
    UpdateItemCommand: { mode: 'readwrite', actions: ['dynamodb:UpdateItem'] },
    DeleteCommand: { mode: 'readwrite', actions: ['dynamodb:DeleteItem'] },
    // IAM authorises each item of a transaction by its own action.
    TransactWriteCommand: { mode: 'readwrite', actions: ['dynamodb:PutItem', 'dynamodb:UpdateItem', 'dynamodb:DeleteItem', 'dynamodb:ConditionCheckItem'] },
  };
  const OTHERS: Record<string, string> = {
    GetSecretValueCommand: 'providers',
    EncryptCommand: 'encrypts',
    DecryptCommand: 'providers or decrypts',
    SendMessageCommand: 'queues, deadLetters',
    CreateScheduleCommand: 'scheduler',
    DeleteScheduleCommand: 'scheduler',
    PostToConnectionCommand: 'connections, or a websocket trigger',
    DeleteConnectionCommand: 'connections, or a websocket trigger',
  };

  /** A policy value as text: `${Ref}` and `${LogicalId.Attribute}` for references, Fn::Join joined. */
  function resolve(value: unknown): string {
    if (typeof value === 'string') return value;
    const v = value as Record<string, unknown>;
    if (v && typeof v === 'object') {
      if (typeof v.Ref === 'string') return `\${${v.Ref}}`;
      if (Array.isArray(v['Fn::GetAtt'])) return `\${${(v['Fn::GetAtt'] as string[]).join('.')}}`;
      if (Array.isArray(v['Fn::Join'])) {
        const [separator, parts] = v['Fn::Join'] as [string, unknown[]];
        return parts.map(resolve).join(separator);
      }
    }
    throw new Error(`Cannot resolve ${JSON.stringify(value)} in a policy`);
  }
  const glob = (pattern: string) => new RegExp(`^${pattern.replace(/[.+?^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*')}$`);
  const allows = (statements: PolicyStatement[], action: string, resource: string) =>
    statements.some(
      (st) =>
        st.Effect === 'Allow' &&
        st.Condition === undefined &&
        asArray(st.Action).some((a) => glob(a).test(action)) &&
        asArray(st.Resource as unknown).some((r) => glob(resolve(r)).test(resource)),
    );

  const arn = (construct: IConstruct) => `\${${logicalIdOf(construct)}.Arn}`;
  const ref = (construct: IConstruct) => `\${${logicalIdOf(construct)}}`;

  /** The (action, resource) pairs `spec` needs: from its manifest access and trigger, and the queues its code sends to. */
  function needs(spec: FunctionSpec, commands: Set<string>): Array<{ action: string; resource: string; why: string }> {
    const out: Array<{ action: string; resource: string; why: string }> = [];
    const { access, trigger } = spec;
    for (const table of TABLES) {
      const mode = access.tables[table.id];
      if (!mode) continue;
      for (const [command, { mode: needed, actions }] of Object.entries(DYNAMODB)) {
        if (!commands.has(command) || (needed === 'readwrite' && mode === 'read')) continue;
        for (const action of actions) out.push({ action, resource: arn(stack.data.tables[table.id]), why: `${table.id} ${mode}` });
      }
      // An operator-only index (the console's listings) is granted to no function: none may query it.
      for (const index of (table.indexes ?? []).filter((i) => !i.operatorOnly)) {
        out.push({ action: 'dynamodb:Query', resource: `${arn(stack.data.tables[table.id])}/index/${index.name}`, why: `${table.id} ${mode}` });
      }
    }
    const key = arn(stack.secrets.providerKeysKey);
    if (access.providers) {
      out.push({ action: 'kms:Decrypt', resource: key, why: 'providers' });
      out.push({ action: 'secretsmanager:GetSecretValue', resource: ref(stack.secrets.anthropicKey), why: 'providers' });
    }
    if (access.decrypts) out.push({ action: 'kms:Decrypt', resource: key, why: 'decrypts' });
    if (access.encrypts) out.push({ action: 'kms:Encrypt', resource: key, why: 'encrypts' });
    const sends = new Set([
      ...access.queues,
      ...sendsOf(spec)
        .filter((s) => !s.deadLetter)
        .map((s) => s.queue),
    ]);
    for (const queue of sends) {
      out.push({ action: 'sqs:SendMessage', resource: arn(stack.queues.byName[queue as 'run'].queue), why: `sends to the ${queue} queue` });
    }
    const deadLetters = new Set([
      ...(access.deadLetters ?? []),
      ...sendsOf(spec)
        .filter((s) => s.deadLetter)
        .map((s) => s.queue),
    ]);
    for (const queue of deadLetters) {
      out.push({ action: 'sqs:SendMessage', resource: arn(stack.queues.byName[queue as 'run'].deadLetterQueue), why: `parks in the ${queue} DLQ` });
    }
    if (access.scheduler) {
      const schedule = `arn:\${AWS::Partition}:scheduler:\${AWS::Region}:\${AWS::AccountId}:schedule/${stack.scheduling.groupName}/vessel-1`;
      for (const action of ['scheduler:CreateSchedule', 'scheduler:DeleteSchedule']) out.push({ action, resource: schedule, why: 'scheduler' });
      out.push({ action: 'iam:PassRole', resource: arn(stack.scheduling.role), why: 'scheduler' });
    }
    if (access.connections || trigger.kind === 'websocket') {
      const api = stack.webSockets[specs.find((s) => s.trigger.kind === 'websocket')!.id]!.api;
      const connection = `arn:\${AWS::Partition}:execute-api:\${AWS::Region}:\${AWS::AccountId}:${ref(api)}/dev/POST/@connections/abc=`;
      out.push({ action: 'execute-api:ManageConnections', resource: connection, why: 'connections' });
    }
    if (trigger.kind === 'sqs') {
      for (const action of ['sqs:ReceiveMessage', 'sqs:DeleteMessage', 'sqs:ChangeMessageVisibility', 'sqs:GetQueueAttributes']) {
        out.push({ action, resource: arn(stack.queues.byName[trigger.queue].queue), why: `consumes the ${trigger.queue} queue` });
      }
    }
    return out;
  }

  it('no function bundles the operator-only listings (their indexes are granted to no role)', () => {
    for (const spec of specs) {
      expect(
        sources.get(spec.id)!.filter((file) => /lambdas\/(vessels|sessions)\/list\.ts$|lambdas\/registry\/listing\.ts$/.test(file)),
        spec.id,
      ).toEqual([]);
    }
  });

  it('every SDK command lambdas/ issues has its IAM actions here', () => {
    const commands = sdkCommands([...new Set([...sources.values()].flat())]);
    expect(commands.size).toBeGreaterThan(5);
    expect([...commands].filter((c) => !(c in DYNAMODB) && !(c in OTHERS))).toEqual([]);
  });

  it.each(specs.map((spec) => [spec.id, spec] as const))('%s may make every call its manifest entry and its code imply', (_id, spec) => {
    const commands = sdkCommands(sources.get(spec.id)!);
    const statements = roleStatements(resources, logicalIdOf(stack.functionOf(spec.id).role)).map(({ statement }) => statement);
    const denied = needs(spec, commands)
      .filter(({ action, resource }) => !allows(statements, action, resource))
      .map(({ action, resource, why }) => `${action} on ${resource} (${why})`);
    expect(denied).toEqual([]);
  });

  it('no function may send to a queue its manifest entry does not list', () => {
    for (const spec of specs) {
      const listed = new Set([
        ...spec.access.queues.map((q) => arn(stack.queues.byName[q].queue)),
        ...(spec.access.deadLetters ?? []).map((q) => arn(stack.queues.byName[q].deadLetterQueue)),
      ]);
      const granted = roleStatements(resources, logicalIdOf(stack.functionOf(spec.id).role))
        .map(({ statement }) => statement)
        .filter((st) => asArray(st.Action).includes('sqs:SendMessage'))
        .flatMap((st) => asArray(st.Resource as unknown).map(resolve));
      expect(
        granted.filter((r) => !listed.has(r)),
        spec.id,
      ).toEqual([]);
    }
  });
});
