import { spawn, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { afterAll, describe, expect, it, vi } from 'vitest';
import vitestConfig, { EMPTY_METRICS_WARNING } from '../../vitest.config.ts';
import { checkJava, JavaRequiredError, startDynamoLocal } from '../../bin/local/dynamodb.ts';
import { startGateway } from '../../bin/local/runtime.ts';
import { ensureDevelopmentProject } from '../../bin/local/seed.ts';
import { createDeveloper, createProject, setProviderKey } from '../../lambdas/registry/registry.ts';
import { npmStartCommand } from '../../bin/local/start-command.ts';

/**
 * The local runtime's engines stay on this machine and its data stays with its owner:
 * every listening socket of the runtime (and of the Java process it starts) is bound to 127.0.0.1, DATA_DIR is 0700
 * and its files 0600, a missing Java is one readable message, and a start prints nothing on stderr.
 */
const ROOT = resolve(import.meta.dirname, '../..');
const BIN = join(ROOT, 'node_modules/.bin');
const LINUX_PROC = existsSync('/proc/net/tcp');
const dirs: string[] = [];
const tmp = (name = 'gw-engines-') => {
  const dir = mkdtempSync(join(tmpdir(), name));
  dirs.push(dir);
  return dir;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

const mode = (path: string) => statSync(path).mode & 0o777;

// ---------------------------------------------------------------------------------------------------------------
// Who listens where, from /proc: the kernel's own table of listening sockets, matched to the processes' open files.

interface Listener {
  pid: number;
  command: string;
  address: string;
  port: number;
}

/** `pid` and every process below it. */
function processTree(pid: number): number[] {
  const parents = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      // The command name may hold spaces and parentheses; the fields after its closing parenthesis do not.
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parents.set(ppid, [...(parents.get(ppid) ?? []), Number(entry)]);
    } catch {
      // the process ended while we looked
    }
  }
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) tree.push(...(parents.get(tree[i]!) ?? []));
  return tree;
}

/** /proc/net/tcp{,6} hold addresses as 32-bit words in host (little-endian) byte order. */
function decodeAddress(hex: string): string {
  const words = hex.match(/.{8}/g)!.map((w) => w.match(/../g)!.reverse().join(''));
  if (words.length === 1)
    return words[0]!
      .match(/../g)!
      .map((b) => parseInt(b, 16))
      .join('.');
  const v6 = words.join('');
  if (v6.toUpperCase().startsWith('00000000000000000000FFFF')) {
    return `::ffff:${v6
      .slice(24)
      .match(/../g)!
      .map((b) => parseInt(b, 16))
      .join('.')}`;
  }
  const groups = v6.match(/.{4}/g)!.map((g) => parseInt(g, 16).toString(16));
  return groups.join(':').replace(/(^|:)0(:0)+(:|$)/, '::');
}

function listeners(rootPid: number): Listener[] {
  const owner = new Map<string, number>();
  for (const pid of processTree(rootPid)) {
    let fds: string[] = [];
    try {
      fds = readdirSync(`/proc/${pid}/fd`);
    } catch {
      continue;
    }
    for (const fd of fds) {
      try {
        const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
        if (m) owner.set(m[1]!, pid);
      } catch {
        // closed meanwhile
      }
    }
  }
  const found: Listener[] = [];
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').trim().split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      const [local, state, inode] = [f[1]!, f[3]!, f[9]!];
      const pid = owner.get(inode);
      if (state !== '0A' || pid === undefined) continue; // 0A = LISTEN
      const [addr, port] = local.split(':') as [string, string];
      found.push({ pid, command: readFileSync(`/proc/${pid}/comm`, 'utf8').trim(), address: decodeAddress(addr), port: parseInt(port, 16) });
    }
  }
  return found;
}

const isLoopback = (address: string) => /^127\./.test(address) || address === '::1' || /^::ffff:127\./.test(address);
const portOf = (url: string) => Number(new URL(url).port);

it('decodes /proc/net addresses (the helper the socket checks rest on)', () => {
  expect(decodeAddress('0100007F')).toBe('127.0.0.1');
  expect(decodeAddress('00000000')).toBe('0.0.0.0');
  expect(decodeAddress('0000000000000000FFFF00000100007F')).toBe('::ffff:127.0.0.1');
  expect(decodeAddress('00000000000000000000000001000000')).toBe('::1');
  expect(decodeAddress('00000000000000000000000000000000')).toBe('::');
  expect(isLoopback('0.0.0.0') || isLoopback('::') || isLoopback('::ffff:10.0.0.1')).toBe(false);
});

// ---------------------------------------------------------------------------------------------------------------

describe.runIf(LINUX_PROC)('the local runtime in this process (its own DynamoDB Local, fauxqs, simulated upstreams)', () => {
  it('binds every engine to 127.0.0.1, and makes an old, looser DATA_DIR private: 0700 directories, 0600 files', async () => {
    // A DATA_DIR as an earlier version left it: world-readable directory and files.
    const dataDir = tmp();
    chmodSync(dataDir, 0o755);
    writeFileSync(join(dataDir, 'runtime.json'), '{}', { mode: 0o644 });
    writeFileSync(join(dataDir, 'dev-token.txt'), 'old\n', { mode: 0o644 });
    mkdirSync(join(dataDir, 'dynamodb'), { mode: 0o755 });
    writeFileSync(join(dataDir, 'dynamodb', 'leftover.log'), 'x', { mode: 0o644 });

    const gw = await startGateway({ dataDir, simulateUpstreams: true, tablePrefix: 'engines' });
    try {
      const expected = {
        gateway: portOf(gw.url),
        dynamodb: portOf(gw.dynamoEndpoint),
        sqs: portOf(gw.queues.endpoint),
        anthropic: gw.upstreams.anthropic!.port,
        openai: gw.upstreams.openai!.port,
      };
      const found = listeners(process.pid);
      // Every listening socket of this process and its children, known or not, is on loopback.
      expect(found.filter((l) => !isLoopback(l.address))).toEqual([]);
      for (const [engine, port] of Object.entries(expected)) {
        const addresses = found.filter((l) => l.port === port).map((l) => l.address);
        expect(addresses, engine).toHaveLength(1);
        expect(isLoopback(addresses[0]!), `${engine} on ${addresses[0]}`).toBe(true);
      }
      // DynamoDB Local's socket is the Java child's: the launcher, not a proxy in front of a wildcard listener.
      expect(found.find((l) => l.port === expected.dynamodb)).toMatchObject({ command: 'java' });
      expect(found.find((l) => l.port === expected.dynamodb)!.pid).not.toBe(process.pid);

      // Why it matters: DynamoDB Local takes any signature. A forged one reads the registry, so only this machine
      // may reach the port.
      const forged = await fetch(gw.dynamoEndpoint, {
        method: 'POST',
        headers: {
          'content-type': 'application/x-amz-json-1.0',
          'x-amz-target': 'DynamoDB_20120810.ListTables',
          authorization: 'AWS4-HMAC-SHA256 Credential=anyone/20200101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00',
        },
        body: '{}',
      });
      expect(forged.status).toBe(200);

      // Every file the runtime writes into DATA_DIR: runtime.json, the dev token, the provider-key key, schedules.
      const previousDataDir = process.env.DATA_DIR;
      process.env.DATA_DIR = dataDir;
      try {
        await ensureDevelopmentProject({ simulated: true });
      } finally {
        if (previousDataDir === undefined) delete process.env.DATA_DIR;
        else process.env.DATA_DIR = previousDataDir;
      }
      await createDeveloper({ developerId: 'dev-modes', planSeconds: 1 });
      const project = await createProject({ developerId: 'dev-modes' });
      await setProviderKey(project.projectId, 'openai', 'sk-modes');
      await gw.scheduler.schedule({ name: 'later', at: new Date(Date.now() + 3_600_000), body: '{}' });

      expect(mode(dataDir)).toBe(0o700);
      expect(mode(join(dataDir, 'dynamodb'))).toBe(0o700);
      const files = [
        'runtime.json',
        'dev-token.txt',
        'provider-keys.key',
        'schedules.json',
        ...readdirSync(join(dataDir, 'dynamodb')).map((f) => join('dynamodb', f)),
      ];
      expect(files).toContain(join('dynamodb', 'shared-local-instance.db'));
      expect(Object.fromEntries(files.map((f) => [f, mode(join(dataDir, f)).toString(8)]))).toEqual(Object.fromEntries(files.map((f) => [f, '600'])));
    } finally {
      await gw.stop();
    }
  });

  it('refuses a DATA_DIR open to others that holds files not its own, and leaves it as it was', async () => {
    const dataDir = tmp();
    chmodSync(dataDir, 0o755);
    writeFileSync(join(dataDir, 'notes.txt'), 'mine');
    await expect(startGateway({ dataDir, simulateUpstreams: true })).rejects.toThrow(
      `DATA_DIR ${dataDir} is open to other users (mode 755) and holds files that are not the gateway's (notes.txt); the gateway keeps secrets there. ` +
        `Use a directory of its own (e.g. DATA_DIR=${join(dataDir, '.prompt-gateway')}) or run: chmod 700 ${dataDir}`,
    );
    expect(mode(dataDir)).toBe(0o755);
  });
});

// ---------------------------------------------------------------------------------------------------------------

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

function run(args: string[], env: NodeJS.ProcessEnv, timeoutMs = 90_000): Promise<Exit> {
  return new Promise((done) => {
    const child = spawn(args[0]!, args.slice(1), { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.on('close', (code) => {
      clearTimeout(timer);
      done({ code, stdout, stderr });
    });
  });
}

/** Only what a developer's shell would have: PATH and HOME, nothing of this test process's gateway settings. */
const cleanEnv = (extra: Record<string, string>): NodeJS.ProcessEnv => ({ HOME: process.env.HOME ?? tmpdir(), ...extra });

describe.runIf(LINUX_PROC)('npm start (bin/local.ts as a process)', () => {
  it('starts quietly (nothing on stderr), listens on loopback only, keeps DATA_DIR private, stops on Ctrl-C', async () => {
    const [startCommand, ...startArgs] = npmStartCommand();
    const dataDir = join(tmp(), 'data'); // does not exist yet: created 0700
    const child: ChildProcess = spawn(startCommand, startArgs, {
      cwd: ROOT,
      env: cleanEnv({ PATH: `${BIN}:${process.env.PATH ?? ''}`, DATA_DIR: dataDir, PORT: '0' }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout!.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    try {
      const deadline = Date.now() + 90_000;
      while (!stdout.includes('Press Ctrl-C to stop.')) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`npm start did not come up:\n${stdout}\n${stderr}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const url = /Prompt gateway ready on (http:\/\/\S+)/.exec(stdout)![1]!;
      const dynamo = /DynamoDB Local on (http:\/\/\S+?)\)/.exec(stdout)![1]!;
      expect((await fetch(`${url}/health`)).status).toBe(200);

      const found = listeners(child.pid!);
      expect(found.filter((l) => !isLoopback(l.address))).toEqual([]);
      expect(found.map((l) => l.port)).toEqual(expect.arrayContaining([portOf(url), portOf(dynamo)]));
      expect(found.length).toBeGreaterThanOrEqual(5); // gateway, DynamoDB Local, fauxqs, two simulated upstreams

      expect(mode(dataDir)).toBe(0o700);
      for (const f of ['runtime.json', 'dev-token.txt', join('dynamodb', 'shared-local-instance.db')]) expect(mode(join(dataDir, f)), f).toBe(0o600);

      // No "ExperimentalWarning: SQLite…" (fauxqs), no stack traces, nothing at all.
      expect(stderr).toBe('');
      const java = found.find((l) => l.command === 'java')!.pid;
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      expect(stdout).toMatch(/SIGINT: stopping…\nStopped\.\n$/);
      expect(existsSync(`/proc/${java}`)).toBe(false);
      expect(existsSync(join(dataDir, 'runtime.json'))).toBe(false);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 120_000);
});

describe.runIf(LINUX_PROC)('DynamoDB Local ends with the process that started it', () => {
  it('a killed runtime leaves no Java server behind (it would keep the port and the database)', async () => {
    const dir = tmp();
    const script = join(dir, 'dynamo.mts');
    writeFileSync(
      script,
      [
        `import { startDynamoLocal } from ${JSON.stringify(join(ROOT, 'bin/local/dynamodb.ts'))};`,
        `const dynamo = await startDynamoLocal({ path: ${JSON.stringify(join(dir, 'db'))} });`,
        `console.log(JSON.stringify({ pid: dynamo.pid, endpoint: dynamo.endpoint }));`,
        `setInterval(() => {}, 1000);`,
      ].join('\n'),
    );
    const child = spawn(join(BIN, 'tsx'), [script], {
      cwd: ROOT,
      env: cleanEnv({ PATH: `${BIN}:${process.env.PATH ?? ''}` }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    try {
      const deadline = Date.now() + 90_000;
      while (!stdout.includes('\n')) {
        if (Date.now() > deadline || child.exitCode !== null) throw new Error(`DynamoDB Local did not start: ${stdout}`);
        await new Promise((r) => setTimeout(r, 100));
      }
      const { pid } = JSON.parse(stdout) as { pid: number };
      expect(readFileSync(`/proc/${pid}/comm`, 'utf8').trim()).toBe('java');
      // SIGKILL the whole Node side (tsx and the node it runs): no handler of ours runs.
      for (const p of processTree(child.pid!)
        .filter((p) => p !== pid)
        .reverse())
        process.kill(p, 'SIGKILL');
      const gone = Date.now() + 20_000;
      while (existsSync(`/proc/${pid}`) && !/^\S+ \S+ Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8').replace(/\(.*\)/, 'x'))) {
        if (Date.now() > gone) {
          process.kill(pid, 'SIGKILL');
          throw new Error('DynamoDB Local outlived its parent');
        }
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  }, 120_000);
});

describe('without Java', () => {
  // node and tsx (node_modules/.bin) but no java; JAVA_HOME unset.
  const noJava = () => cleanEnv({ PATH: BIN });
  const INSTALL =
    'DynamoDB Local needs Java 17 or newer: no "java" command was found on PATH.\nInstall it, then run this again:\n  Debian/Ubuntu:  sudo apt-get install openjdk-17-jre-headless\n';

  it('npm start says what to install and exits 1, without a stack trace', async () => {
    const r = await run(npmStartCommand(), cleanEnv({ PATH: BIN, DATA_DIR: join(tmp(), 'data') }));
    expect(r.code).toBe(1);
    expect(r.stderr.startsWith(`Could not start the gateway: ${INSTALL}`)).toBe(true);
    expect(r.stderr).toContain('  macOS:          brew install openjdk@17');
    expect(r.stderr).not.toMatch(/ENOENT|\n\s+at /);
  });

  it('npm test (the global setup) says the same and exits 1', async () => {
    const r = await run([join(BIN, 'vitest'), 'run', 'test/budgets/windows.test.ts'], noJava());
    expect(r.code).toBe(1);
    expect(r.stderr).toContain(`npm test: ${INSTALL}`);
    expect(r.stderr).not.toMatch(/ENOENT|\n\s+at /);
  }, 60_000);

  it('an old Java, a stub without a runtime, a runtime without a compiler and a JAVA_HOME are each named', async () => {
    const dir = tmp();
    const fake = (name: string, script: string) => {
      const file = join(dir, name);
      writeFileSync(file, `#!/bin/sh\n${script}\n`, { mode: 0o755 });
      return file;
    };
    const java11 = fake('java11', `echo 'openjdk version "11.0.22" 2024-01-16' >&2`);
    const java8 = fake('java8', `echo 'java version "1.8.0_402"' >&2`);
    const stub = fake('stub', `echo 'The operation couldn’t be completed. Unable to locate a Java Runtime.' >&2; exit 1`);
    const java21 = fake('java21', `echo 'openjdk version "21.0.3" 2024-04-16 LTS' >&2`);
    expect(() => checkJava(java11)).toThrow(new JavaRequiredError(`"${java11}" is Java 11`));
    expect(() => checkJava(java8)).toThrow(new JavaRequiredError(`"${java8}" is Java 8`));
    expect(() => checkJava(stub)).toThrow(/did not report a version: The operation couldn’t be completed\. Unable to locate a Java Runtime\./);
    expect(() => checkJava(join(dir, 'missing'))).toThrow(new JavaRequiredError(`${join(dir, 'missing')} does not exist`));
    expect(checkJava(java21)).toEqual({ java: java21, version: 'openjdk version "21.0.3" 2024-04-16 LTS' });

    // A Java 17 runtime stripped of the compiler (some jlink-ed JRE images) cannot build the loopback launcher.
    const noCompilerHome = join(dir, 'jre');
    mkdirSync(join(noCompilerHome, 'bin'), { recursive: true });
    writeFileSync(
      join(noCompilerHome, 'bin', 'java'),
      [
        '#!/bin/sh',
        `if [ "$1" = "-version" ]; then echo 'openjdk version "17.0.99-nocompiler" 2030-01-01' >&2; exit 0; fi`,
        `echo 'Error occurred during initialization of boot layer' >&2`,
        `echo 'java.lang.module.FindException: Module jdk.compiler not found' >&2`,
        'exit 1',
      ].join('\n'),
      { mode: 0o755 },
    );
    vi.stubEnv('JAVA_HOME', noCompilerHome);
    try {
      await expect(startDynamoLocal()).rejects.toThrow(
        `DynamoDB Local needs a Java 17+ with the jdk.compiler module (every JDK has it, and so does Debian's openjdk-17-jre-headless): "${join(noCompilerHome, 'bin', 'java')}" could not compile the launcher that keeps DynamoDB Local on 127.0.0.1 (Error occurred during initialization of boot layer java.lang.module.FindException: Module jdk.compiler not found).\nInstall it, then run this again:`,
      );
    } finally {
      vi.unstubAllEnvs();
    }

    // JAVA_HOME wins over PATH
    mkdirSync(join(dir, 'jdk', 'bin'), { recursive: true });
    const homeJava = join(dir, 'jdk', 'bin', 'java');
    writeFileSync(homeJava, `#!/bin/sh\necho 'openjdk version "11.0.1"' >&2\n`, { mode: 0o755 });
    vi.stubEnv('JAVA_HOME', join(dir, 'jdk'));
    try {
      expect(() => checkJava()).toThrow(new JavaRequiredError(`"${homeJava}" is Java 11`));
    } finally {
      vi.unstubAllEnvs();
    }
  });
});

describe('quiet output', () => {
  it('only the SQLite ExperimentalWarning of fauxqs is dropped; any other warning still prints', async () => {
    const dir = tmp();
    const script = join(dir, 'queues.mts');
    writeFileSync(
      script,
      [
        `import { startLocalQueues } from ${JSON.stringify(join(ROOT, 'bin/local/queues.ts'))};`,
        `const queues = await startLocalQueues('quiet');`,
        `process.emitWarning('probe feature is experimental', 'ExperimentalWarning');`,
        `await queues.stop();`,
        `await new Promise((r) => setTimeout(r, 50));`,
        `console.log('done');`,
      ].join('\n'),
    );
    const r = await run([join(BIN, 'tsx'), script], cleanEnv({ PATH: `${BIN}:${process.env.PATH ?? ''}` }));
    expect(r).toMatchObject({ code: 0, stdout: 'done\n' });
    expect(r.stderr).toContain('ExperimentalWarning: probe feature is experimental');
    expect(r.stderr).not.toContain('SQLite');
  });

  it("Powertools' empty-metrics warning reaches vitest's console, where the config drops exactly that line", () => {
    expect(process.env.POWERTOOLS_DEV).toBe('true');
    const warn = vi.spyOn(console, 'warn').mockImplementation(() => undefined);
    try {
      new Metrics({ namespace: 'EnginesTest', serviceName: 'engines' }).publishStoredMetrics();
      const [message] = warn.mock.calls.find(([m]) => String(m).startsWith(EMPTY_METRICS_WARNING)) ?? [];
      expect(message).toBeDefined();
      const onConsoleLog = vitestConfig.test!.onConsoleLog!;
      expect(onConsoleLog(String(message), 'stderr', undefined)).toBe(false);
      expect(onConsoleLog('something a test printed', 'stderr', undefined)).not.toBe(false);
    } finally {
      warn.mockRestore();
    }
  });
});
