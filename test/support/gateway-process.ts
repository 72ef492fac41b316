import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { join, resolve } from 'node:path';
import { npmStartCommand } from '../../bin/local/start-command.ts';

/**
 * The real `npm start` path (its command, `npmStartCommand`) as a separate process, so that a crash of the local runtime is
 * observable as a dead process instead of taking the test runner down with it. It runs in its own process group:
 * the group is how its DynamoDB Local (java) child is found and, if it outlives the gateway, killed.
 */
export interface GatewayProcess {
  url: string;
  dataDir: string;
  /** The development token `npm start` writes to DATA_DIR/dev-token.txt. */
  token: string;
  child: ChildProcess;
  alive(): boolean;
  /** stdout and stderr so far (for failure messages). */
  output(): string;
  /** SIGINT to the gateway process; then reports what was still running in its group after 20 s (and SIGKILLs it). */
  stop(): Promise<{ exitCode: number | null; signal: NodeJS.Signals | null; leftovers: string[] }>;
}

const repoRoot = resolve(import.meta.dirname, '../..');

export function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const server = net.createServer();
    server.once('error', rej);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => res(port));
    });
  });
}

/** Processes whose process group is `pgid`. */
export function groupMembers(pgid: number): { pid: number; args: string }[] {
  const out = execFileSync('ps', ['-eo', 'pid=,pgid=,args='], { encoding: 'utf8' });
  return out
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter((f) => Number(f[1]) === pgid)
    .map((f) => ({ pid: Number(f[0]), args: f.slice(2).join(' ') }));
}

export async function startGatewayProcess(dataDir: string, readyTimeoutMs = 110_000): Promise<GatewayProcess> {
  const port = await freePort();
  // A clean environment: nothing an in-process gateway may have exported (tables, endpoints, upstream keys) leaks in.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined) continue;
    if (/^(DYNAMODB_|SQS_|ANTHROPIC_|OPENAI_|OPENROUTER_|PROVIDER_KEYS_)|_TABLE$|_QUEUE_URL$|^VITEST|^STAGE$/.test(k)) continue;
    env[k] = v;
  }
  Object.assign(env, { DATA_DIR: dataDir, PORT: String(port), POWERTOOLS_LOG_LEVEL: 'ERROR' });
  const [command, ...args] = npmStartCommand();
  const child = spawn(command, args, { cwd: repoRoot, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));

  const url = await readyUrl(child, () => output, readyTimeoutMs);
  const token = readFileSync(join(dataDir, 'dev-token.txt'), 'utf8').trim();
  const pgid = child.pid!;
  return {
    url,
    dataDir,
    token,
    child,
    alive: () => child.exitCode === null && child.signalCode === null,
    output: () => output,
    async stop() {
      // SIGINT goes to the gateway's own node process (the one tsx runs bin/local.ts in), not to the group: java
      // must then be stopped by the gateway itself, not by a signal of its own. (npx does not relay signals, and a
      // terminal's Ctrl-C, which does reach the whole group, would hide a gateway that leaves DynamoDB Local behind.)
      const gateway = groupMembers(pgid).find((p) => p.args.includes('preflight.cjs') && p.args.includes('bin/local.ts'));
      if (gateway) process.kill(gateway.pid, 'SIGINT');
      else if (child.exitCode === null && child.signalCode === null) process.kill(-pgid, 'SIGINT');
      // Then the rest of the group (tsx, sh, npx) follows the gateway out; see who is left after 20 s.
      let leftovers: string[] = [];
      for (let i = 0; i < 80; i++) {
        leftovers = groupMembers(pgid).map((p) => `${p.pid} ${p.args.slice(0, 160)}`);
        if (leftovers.length === 0) break;
        await new Promise((r) => setTimeout(r, 250));
      }
      if (leftovers.length) {
        try {
          process.kill(-pgid, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      return { exitCode: child.exitCode, signal: child.signalCode, leftovers };
    },
  };
}

/** The URL a starting `bin/local.ts` child announces ("Prompt gateway ready on …"); rejects if it exits or is too slow. */
export function readyUrl(child: ChildProcess, output: () => string, timeoutMs: number): Promise<string> {
  return new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`the gateway did not start within ${timeoutMs} ms:\n${output().slice(-3000)}`)), timeoutMs);
    const onData = () => {
      const m = /Prompt gateway ready on (http:\/\/\S+)/.exec(output());
      if (m) {
        clearTimeout(timer);
        res(m[1]!);
      }
    };
    child.stdout!.on('data', onData);
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      rej(new Error(`the gateway exited (code ${code}, signal ${signal}) before it was ready:\n${output().slice(-3000)}`));
    });
  });
}
