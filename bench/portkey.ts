import { execFile, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../bin/local/dynamodb.ts';
import { spawnChild, stopChild } from './common.ts';

/**
 * Portkey's open-source AI gateway (a pass-through: no budgets, no metering), for the CPU side-by-side. It is
 * installed into a temporary folder for the run only, never into this project.
 *
 * Verified against @portkey-ai/gateway 1.15.2 (build/start-server.js):
 * - `--port=N` chooses the port (default 8787); `--headless` leaves out the local log console and its /log/stream
 *   fan-out, as a production deployment would.
 * - POST /v1/messages with `x-portkey-provider: anthropic` and `x-portkey-custom-host: <upstream>/v1` sends the
 *   Anthropic Messages request to `<upstream>/v1/messages` unchanged, with the caller's `x-api-key`. A custom host
 *   on 127.0.0.1 is accepted because localhost addresses are in its default TRUSTED_CUSTOM_HOSTS.
 */
export const PORTKEY_PACKAGE = '@portkey-ai/gateway@1.15.2';
const INSTALL_TIMEOUT_MS = 180_000;

export interface Portkey {
  url: string;
  pid: number;
  /** Request headers that route a Messages request to `upstreamUrl` (the caller adds its own x-api-key). */
  headers: (upstreamUrl: string) => Record<string, string>;
  stop: () => Promise<void>;
}

export type PortkeyStart = { ok: true; portkey: Portkey } | { ok: false; reason: string };

/** Installs and starts Portkey's gateway; `{ ok: false, reason }` when the registry or the install fails. */
export async function startPortkey(children: ChildProcess[]): Promise<PortkeyStart> {
  const dir = mkdtempSync(join(tmpdir(), 'gateway-bench-portkey-'));
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  const installed = await install(dir);
  if (!installed.ok) {
    removeDir();
    return installed;
  }
  const entry = join(dir, 'node_modules/@portkey-ai/gateway/build/start-server.js');
  if (!existsSync(entry)) {
    removeDir();
    return { ok: false, reason: `${PORTKEY_PACKAGE} has no build/start-server.js` };
  }
  const port = await freePort();
  const output = spawnChild(process.execPath, [entry, `--port=${port}`, '--headless'], { cwd: dir, env: { ...process.env, NODE_ENV: 'production' } }, children);
  const stop = async () => {
    await stopChild(output.child);
    removeDir();
  };
  try {
    await output.waitFor(/Ready for connections/, 60_000);
  } catch (err) {
    await stop();
    return { ok: false, reason: `did not start: ${(err as Error).message.split('\n')[0]}` };
  }
  const headers = (upstreamUrl: string) => ({ 'x-portkey-provider': 'anthropic', 'x-portkey-custom-host': `${upstreamUrl}/v1` });
  return { ok: true, portkey: { url: `http://127.0.0.1:${port}`, pid: output.child.pid!, headers, stop } };
}

/** `npm install --prefix <dir>`: scripts off (none is needed to run the built server), no audit, bounded in time. */
function install(dir: string): Promise<{ ok: true } | { ok: false; reason: string }> {
  return new Promise((resolve) => {
    execFile(
      'npm',
      ['install', '--prefix', dir, PORTKEY_PACKAGE, '--no-audit', '--no-fund', '--ignore-scripts', '--no-save', '--loglevel=error'],
      { timeout: INSTALL_TIMEOUT_MS, encoding: 'utf8' },
      (err, _stdout, stderr) => {
        if (!err) return resolve({ ok: true });
        const why = err.killed
          ? `npm install timed out after ${INSTALL_TIMEOUT_MS / 1000} s`
          : (stderr
              .trim()
              .split('\n')
              .find((l) => /ERR!/.test(l)) ?? err.message);
        resolve({ ok: false, reason: `could not install ${PORTKEY_PACKAGE} (${why.trim()})` });
      },
    );
  });
}
