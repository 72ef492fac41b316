import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { freePort, groupMembers, readyUrl } from './gateway-process.ts';
import { npmStartCommand } from '../../bin/local/start-command.ts';

/**
 * The real `npm start` (its command, `npmStartCommand`) as a child process in a process group of its own, with the
 * environment the caller chooses (e.g. an upstream that runs in the test process and so outlives the child), and a
 * `kill -9` of the whole group — the gateway, tsx, npx and DynamoDB Local's java alike — to crash it.
 */
export interface RuntimeChild {
  url: string;
  child: ChildProcess;
  /** The process group (the child's pid). */
  pgid: number;
  output(): string;
  /** SIGKILL to every process of the group; resolves once none is left (or rejects naming the survivors after 10 s). */
  kill9(): Promise<void>;
}

const repoRoot = resolve(import.meta.dirname, '../..');

/** Starts the local runtime on `dataDir`; resolves when it prints that it is ready. */
export async function startRuntimeChild(opts: { dataDir: string; env?: Record<string, string>; readyTimeoutMs?: number }): Promise<RuntimeChild> {
  const port = await freePort();
  // A clean environment: nothing an in-process gateway of this test worker exported (tables, endpoints, upstream keys)
  // leaks in; what the runtime should see is given explicitly.
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) {
    if (v === undefined) continue;
    if (/^(DYNAMODB_|SQS_|ANTHROPIC_|OPENAI_|OPENROUTER_|PROVIDER_KEYS_|SCHEDULE|VESSEL_)|_TABLE$|_QUEUE_URL$|_QUEUE_ARN$|^VITEST|^STAGE$/.test(k)) continue;
    env[k] = v;
  }
  Object.assign(env, { DATA_DIR: opts.dataDir, PORT: String(port), POWERTOOLS_LOG_LEVEL: 'ERROR' }, opts.env);
  const [command, ...args] = npmStartCommand();
  const child = spawn(command, args, { cwd: repoRoot, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  const pgid = child.pid!;
  let output = '';
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  const readyTimeoutMs = opts.readyTimeoutMs ?? 110_000;
  const kill9 = async () => {
    try {
      process.kill(-pgid, 'SIGKILL');
    } catch {
      // the group is already gone
    }
    for (let i = 0; i < 40; i++) {
      if (groupMembers(pgid).length === 0) return;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`processes of group ${pgid} survived SIGKILL: ${JSON.stringify(groupMembers(pgid))}`);
  };
  try {
    const url = await readyUrl(child, () => output, readyTimeoutMs);
    return { url, child, pgid, output: () => output, kill9 };
  } catch (err) {
    await kill9().catch(() => undefined);
    throw err;
  }
}
