import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingHttpHeaders, type Server } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo, Socket } from 'node:net';
import { release, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

/**
 * Running the real Claude Code CLI (the `@anthropic-ai/claude-code` devDependency) headless against a local gateway,
 * with nothing leaving the machine: every outbound connection it would make goes to a trap that refuses it and
 * records where it was going, and every request it makes to the gateway is recorded on the way through.
 */

const require = createRequire(import.meta.url);
const PACKAGE_DIR = dirname(require.resolve('@anthropic-ai/claude-code/package.json'));

/** The installed Claude Code version (the devDependency is pinned exactly, so this is what package.json says). */
export const CLAUDE_CODE_VERSION = (JSON.parse(readFileSync(join(PACKAGE_DIR, 'package.json'), 'utf8')) as { version: string }).version;

/**
 * How to start Claude Code. Its postinstall copies the platform's native binary (an optional dependency) over the
 * small placeholder at bin/claude.exe; where install scripts did not run, the package's own launcher finds the
 * native binary instead (one extra Node process, same program).
 */
function command(): { file: string; prefix: string[] } {
  const bin = join(PACKAGE_DIR, 'bin', 'claude.exe');
  if (statSync(bin).size > 1_000_000) return { file: bin, prefix: [] };
  return { file: process.execPath, prefix: [join(PACKAGE_DIR, 'cli-wrapper.cjs')] };
}

/** What Claude Code prints with `--output-format json` (the fields the tests read). */
export interface ClaudeResult {
  type: string;
  subtype: string;
  is_error: boolean;
  num_turns: number;
  result: string;
  api_error_status: number | null;
  total_cost_usd: number;
  usage: { input_tokens: number; output_tokens: number; cache_read_input_tokens: number; cache_creation_input_tokens: number };
  modelUsage: Record<string, { inputTokens: number; outputTokens: number; cacheReadInputTokens: number; cacheCreationInputTokens: number }>;
}

export interface ClaudeRun {
  exitCode: number | null;
  stdout: string;
  stderr: string;
  /** Parsed stdout (undefined when it was not JSON). */
  json?: ClaudeResult;
  /** The temporary HOME / working directory the run used (already deleted), to scrub it from captures. */
  home: string;
}

/**
 * The environment Claude Code gets — built from nothing, so a developer's own ANTHROPIC_API_KEY, settings or
 * proxy never leak into the run:
 * - HOME, CLAUDE_CONFIG_DIR and the working directory are a fresh temporary directory: no user settings, memory,
 *   CLAUDE.md or git repository shape the request, and nothing is left behind;
 * - ANTHROPIC_BASE_URL / ANTHROPIC_AUTH_TOKEN point it at the gateway with the user's token (sent as Bearer);
 * - CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC turns off everything that is not a model call (auto-update, telemetry,
 *   error reports, feature flags, release notes…); the narrower switches are set too so that each still holds if
 *   a later version narrows the umbrella;
 * - HTTPS_PROXY / HTTP_PROXY send any other connection to the trap (NO_PROXY keeps the gateway direct), so a
 *   forgotten switch shows up as a recorded host instead of a hang on a machine without network.
 */
export function claudeEnv(opts: { baseUrl: string; token: string; home: string; trapUrl: string }): Record<string, string> {
  return {
    PATH: process.env.PATH ?? '/usr/bin:/bin',
    HOME: opts.home,
    CLAUDE_CONFIG_DIR: join(opts.home, '.claude'),
    ANTHROPIC_BASE_URL: opts.baseUrl,
    ANTHROPIC_AUTH_TOKEN: opts.token,
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    DISABLE_TELEMETRY: '1',
    DISABLE_ERROR_REPORTING: '1',
    DISABLE_BUG_COMMAND: '1',
    HTTPS_PROXY: opts.trapUrl,
    HTTP_PROXY: opts.trapUrl,
    https_proxy: opts.trapUrl,
    http_proxy: opts.trapUrl,
    NO_PROXY: '127.0.0.1,localhost',
    no_proxy: '127.0.0.1,localhost',
  };
}

/** `claude -p <prompt> --output-format json [...args]`, headless, in a fresh temporary HOME. */
export async function runClaude(opts: {
  baseUrl: string;
  token: string;
  trapUrl: string;
  prompt: string;
  args?: string[];
  timeoutMs?: number;
}): Promise<ClaudeRun> {
  const home = mkdtempSync(join(tmpdir(), 'cc-home-'));
  const { file, prefix } = command();
  try {
    const child = spawn(file, [...prefix, '-p', opts.prompt, '--output-format', 'json', ...(opts.args ?? [])], {
      cwd: home,
      env: claudeEnv({ baseUrl: opts.baseUrl, token: opts.token, home, trapUrl: opts.trapUrl }),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (d: string) => (stdout += d));
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), opts.timeoutMs ?? 60_000);
    const exitCode = await new Promise<number | null>((resolve, reject) => {
      child.on('error', reject);
      child.on('close', (code) => resolve(code));
    }).finally(() => clearTimeout(timer));
    let json: ClaudeResult | undefined;
    try {
      json = JSON.parse(stdout) as ClaudeResult;
    } catch {
      json = undefined;
    }
    return { exitCode, stdout, stderr, json, home };
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
}

// ---------------------------------------------------------------------------------------------------------------
// The egress trap and the recording front
// ---------------------------------------------------------------------------------------------------------------

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function close(server: Server, sockets: Set<Socket>): Promise<void> {
  for (const s of sockets) s.destroy();
  await new Promise<void>((resolve) => server.close(() => resolve()));
}

export interface EgressTrap {
  url: string;
  /** `CONNECT host:port` or `GET http://…` for every attempt, in order. */
  attempts: string[];
  close(): Promise<void>;
}

/** An HTTP proxy that refuses everything and records where each connection was headed. */
export async function startEgressTrap(): Promise<EgressTrap> {
  const attempts: string[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((req, res) => {
    attempts.push(`${req.method} ${req.url}`);
    res.writeHead(502).end();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('connect', (req, socket: Socket) => {
    attempts.push(`CONNECT ${req.url}`);
    socket.on('error', () => undefined);
    socket.end('HTTP/1.1 502 Bad Gateway\r\n\r\n');
  });
  const url = await listen(server);
  return { url, attempts, close: () => close(server, sockets) };
}

export interface FrontRecord {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
  /** The exact request body text. */
  body: string;
  status?: number;
  /** The response body when the gateway refused the request (status ≥ 400): what Claude Code was told. */
  errorBody?: string;
}

export interface RecordingFront {
  url: string;
  records: FrontRecord[];
  close(): Promise<void>;
}

/**
 * A pass-through in front of the gateway that records each request exactly as Claude Code sent it (path with its
 * query, every header, the body text) — what the gateway itself does not keep — and streams the answer back
 * untouched, chunk by chunk.
 */
export async function startRecordingFront(target: string): Promise<RecordingFront> {
  const records: FrontRecord[] = [];
  const sockets = new Set<Socket>();
  const { hostname, port } = new URL(target);
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const record: FrontRecord = { method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: body.toString('utf8') };
      records.push(record);
      const upstream = httpRequest({ hostname, port, method: req.method, path: req.url, headers: req.headers }, (answer) => {
        record.status = answer.statusCode;
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        if ((answer.statusCode ?? 0) >= 400) {
          const errorChunks: Buffer[] = [];
          answer.on('data', (c: Buffer) => errorChunks.push(c));
          answer.on('end', () => (record.errorBody = Buffer.concat(errorChunks).toString('utf8')));
        }
        answer.pipe(res);
      });
      upstream.on('error', () => res.destroy());
      upstream.end(body);
    });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  const url = await listen(server);
  return { url, records, close: () => close(server, sockets) };
}

// ---------------------------------------------------------------------------------------------------------------
// Fixtures: a captured request with what identifies the machine, the user or the session replaced
// ---------------------------------------------------------------------------------------------------------------

export const SCRUBBED = {
  home: '/home/user/project',
  osRelease: '6.1.0-generic',
  date: '2026-01-01',
  deviceId: '0'.repeat(64),
  sessionId: '00000000-0000-4000-8000-000000000000',
};

/** Headers worth keeping from a capture (never the credential, nor connection details of this machine). */
const KEPT_HEADERS = ['anthropic-beta', 'anthropic-version', 'anthropic-dangerous-direct-browser-access', 'content-type', 'user-agent', 'x-app'];

export interface CapturedRequest {
  /** Which Claude Code run this came from, e.g. `claude -p hi --model gpt-4.1`. */
  run: string;
  method: string;
  /** Path and query as sent, e.g. `/v1/messages?beta=true`. */
  url: string;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/**
 * The temporary directory (also in the dash-separated form Claude Code uses for its per-project folders), the
 * kernel release, the day's date and the device / session ids become fixed stand-ins; the body is otherwise the
 * one sent, so the fixture keeps Claude Code's real prompt, tools and parameters.
 */
export function scrubCapture(run: string, record: FrontRecord, home: string): CapturedRequest {
  const dashed = home.replace(/[^A-Za-z0-9]/g, '-');
  const day = new Date().toISOString().slice(0, 10);
  let text = record.body
    .split(home)
    .join(SCRUBBED.home)
    .split(dashed)
    .join(SCRUBBED.home.replace(/[^A-Za-z0-9]/g, '-'))
    .split(release())
    .join(SCRUBBED.osRelease)
    .split(day)
    .join(SCRUBBED.date);
  text = text.replace(/(\\"device_id\\":\\")[0-9a-f]+/, `$1${SCRUBBED.deviceId}`).replace(/(\\"session_id\\":\\")[0-9a-f-]+/, `$1${SCRUBBED.sessionId}`);
  const headers: Record<string, string> = {};
  for (const name of KEPT_HEADERS) {
    const value = record.headers[name];
    if (typeof value === 'string') headers[name] = value;
  }
  return { run, method: record.method, url: record.url, headers, body: redactProse(JSON.parse(text)) as Record<string, unknown> };
}

/**
 * Claude Code's own prose (its system prompt, tool and parameter descriptions) is not this project's to keep: every
 * `text` or `description` longer than a short phrase becomes a stand-in of the same length. The request's shape —
 * roles, block types, cache_control, tools and their schemas, thinking, betas — is what the tests need, and it stays.
 */
export function redactProse(value: unknown, key = ''): unknown {
  if (typeof value === 'string') {
    if ((key === 'text' || key === 'description') && value.length > 40) return `[${value.length} characters of Claude Code text]`.padEnd(value.length, '.');
    return value;
  }
  if (Array.isArray(value)) return value.map((v) => redactProse(v, key));
  if (value && typeof value === 'object') return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, redactProse(v, k)]));
  return value;
}
