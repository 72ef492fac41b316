import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { availableParallelism, cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../bin/local/dynamodb.ts';
import { reserve, settle } from '../lambdas/budgets/ledger.ts';
import { writeBenchmarkSection } from './report.ts';

/**
 * `npm run bench`: the proxy's overhead. The same requests go (a) straight to the simulated Anthropic upstream and
 * (b) through the gateway (auth, pricing, reservation and settlement on DynamoDB Local, SSE pass-through) to that
 * same upstream. Upstream, gateway and load generator are three processes. Results go to docs/benchmarks.md.
 *
 * Knobs: BENCH_REQUESTS (per scenario, default 400), BENCH_CONCURRENCY (comma-separated levels, default 1,8),
 * BENCH_WARMUP (default 40). Concurrency 1 shows the fixed cost per request, 8 the cost under contention.
 */
const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 400);
const CONCURRENCY_LEVELS = (process.env.BENCH_CONCURRENCY ?? '1,8').split(',').map(Number);
const WARMUP = Number(process.env.BENCH_WARMUP ?? 40);
const MODEL = 'claude-sonnet-4-6';
const PROMPT = 'Benchmark [[words:20]]';
/** /prompt runs per row: each is admitted (plan, lease, the user's compute) and charged a compute second at least. */
const PROMPT_REQUESTS = Math.min(REQUESTS, 200);

function waitForLine(child: ChildProcess, pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => reject(new Error(`timed out waiting for ${pattern}\n${buffer}`)), timeoutMs);
    const onData = (d: Buffer) => {
      buffer += d.toString();
      const m = buffer.match(pattern);
      if (m) {
        clearTimeout(timer);
        child.stdout?.off('data', onData);
        resolve(m);
      }
    };
    child.stdout?.on('data', onData);
    child.once('exit', (code) => reject(new Error(`process exited (${code}) before ready\n${buffer}`)));
  });
}

interface Scenario {
  name: string;
  url: string;
  headers: Record<string, string>;
  stream: boolean;
  /** A one-turn /prompt run (the token in the body) instead of a Messages request. */
  prompt?: { token: string };
}

async function once(s: Scenario): Promise<{ total: number; firstByte: number }> {
  const started = performance.now();
  const res = s.prompt
    ? await fetch(`${s.url}/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...(s.stream ? { accept: 'text/event-stream' } : {}) },
        body: JSON.stringify({ message: PROMPT, options: { token: s.prompt.token, model: MODEL } }),
      })
    : await fetch(`${s.url}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...s.headers },
        body: JSON.stringify({ model: MODEL, max_tokens: 64, stream: s.stream, messages: [{ role: 'user', content: PROMPT }] }),
      });
  if (res.status !== 200) throw new Error(`${s.name}: HTTP ${res.status} ${await res.text()}`);
  const reader = res.body!.getReader();
  let firstByte = 0;
  for (;;) {
    const { done } = await reader.read();
    if (!firstByte) firstByte = performance.now() - started;
    if (done) break;
  }
  return { total: performance.now() - started, firstByte };
}

/** Runs `task` `count` times, `concurrency` at a time; returns each run's result and the wall time in seconds. */
async function concurrently<T>(count: number, concurrency: number, task: () => Promise<T>): Promise<{ results: T[]; seconds: number }> {
  const results: T[] = [];
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < count) {
        next++;
        results.push(await task());
      }
    }),
  );
  return { results, seconds: (performance.now() - started) / 1000 };
}

function percentile(xs: number[], p: number): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

type Figures = { p50: number; p99: number; ttfb50: number; rps: number };

async function run(s: Scenario, count: number, concurrency: number): Promise<Figures> {
  const { results, seconds } = await concurrently(count, concurrency, () => once(s));
  const totals = results.map((r) => r.total);
  return { p50: percentile(totals, 50), p99: percentile(totals, 99), ttfb50: percentile(results.map((r) => r.firstByte), 50), rps: count / seconds };
}

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-'));
  const children: ChildProcess[] = [];
  try {
    const upstream = spawn(process.execPath, ['--import', 'tsx', 'bench/upstream-server.ts'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(upstream);
    const upstreamUrl = (await waitForLine(upstream, /(http:\/\/[\d.:]+)\n/, 30_000))[1]!;

    const port = await freePort();
    const gateway = spawn(process.execPath, ['--import', 'tsx', 'bin/local.ts'], {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, PORT: String(port), DATA_DIR: dataDir, ANTHROPIC_API_KEY: 'sk-bench', ANTHROPIC_BASE_URL: upstreamUrl, POWERTOOLS_LOG_LEVEL: 'ERROR' },
    });
    children.push(gateway);
    await waitForLine(gateway, /Press Ctrl-C to stop/, 120_000);
    const token = readFileSync(join(dataDir, 'dev-token.txt'), 'utf8').trim();
    const gatewayUrl = `http://127.0.0.1:${port}`;

    const scenarios: Scenario[] = [
      { name: 'direct, JSON', url: upstreamUrl, headers: { 'x-api-key': 'sk-bench' }, stream: false },
      { name: 'gateway, JSON', url: gatewayUrl, headers: { 'x-api-key': token }, stream: false },
      { name: 'direct, SSE', url: upstreamUrl, headers: { 'x-api-key': 'sk-bench' }, stream: true },
      { name: 'gateway, SSE', url: gatewayUrl, headers: { 'x-api-key': token }, stream: true },
    ];
    const byLevel = new Map<number, Record<string, Figures>>();
    for (const concurrency of CONCURRENCY_LEVELS) {
      const results: Record<string, Figures> = {};
      for (const s of scenarios) {
        await run(s, WARMUP, concurrency);
        results[s.name] = await run(s, REQUESTS, concurrency);
      }
      results['ledger only'] = await ledgerOnly(dataDir, concurrency);
      // A one-turn /prompt run against one direct model call. At concurrency 1 only: the development developer's
      // tier admits 5 runs at once, and every run charges the development user at least a compute second.
      if (concurrency === 1) {
        for (const stream of [false, true]) {
          const s: Scenario = { name: `/prompt, ${stream ? 'SSE' : 'JSON'}`, url: gatewayUrl, headers: {}, stream, prompt: { token } };
          await run(s, WARMUP, 1);
          results[s.name] = await run(s, PROMPT_REQUESTS, 1);
        }
      }
      for (const [name, r] of Object.entries(results)) {
        console.log(`c=${concurrency} ${name.padEnd(14)} p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  first byte p50 ${r.ttfb50.toFixed(2)} ms  ${r.rps.toFixed(0)} req/s`);
      }
      byLevel.set(concurrency, results);
    }
    writeReport(byLevel);
  } finally {
    for (const c of children) c.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 1500));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

/** The ledger's share: reserve + settle against the gateway's own DynamoDB Local, same concurrency, one user. */
async function ledgerOnly(dataDir: string, concurrency: number): Promise<Figures> {
  const runtime = JSON.parse(readFileSync(join(dataDir, 'runtime.json'), 'utf8')) as { dynamoEndpoint: string; tables: Record<string, string> };
  Object.assign(process.env, { DYNAMODB_ENDPOINT: runtime.dynamoEndpoint, ...runtime.tables, AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' });
  const caller = { projectId: 'bench', userId: 'ledger', budget: { ai: Number.MAX_SAFE_INTEGER, compute: 0, window: 'day' as const } };
  const pass = (count: number) =>
    concurrently(count, concurrency, async () => {
      const t = performance.now();
      const r = await reserve({ caller, amounts: { ai: 100, compute: 0 }, enforce: ['ai'] });
      if (r.ok) await settle(r.reservation, { ai: 66, compute: 0 });
      return performance.now() - t;
    });
  await pass(WARMUP);
  const { results: times, seconds } = await pass(REQUESTS);
  return { p50: percentile(times, 50), p99: percentile(times, 99), ttfb50: percentile(times, 50), rps: REQUESTS / seconds };
}

function writeReport(byLevel: Map<number, Record<string, Figures>>) {
  const table = (concurrency: number, results: Record<string, Figures>) => {
    const row = (name: string) => {
      const r = results[name]!;
      return `| ${name} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.ttfb50.toFixed(2)} | ${r.rps.toFixed(0)} |`;
    };
    const overhead = (kind: 'JSON' | 'SSE') => {
      const d = results[`direct, ${kind}`]!;
      const g = results[`gateway, ${kind}`]!;
      return `${kind} +${(g.p50 - d.p50).toFixed(2)} ms at p50, +${(g.p99 - d.p99).toFixed(2)} ms at p99`;
    };
    return [
      `### Concurrency ${concurrency}`,
      '',
      '| scenario | p50 ms | p99 ms | first byte p50 ms | req/s |',
      '|---|---|---|---|---|',
      ...['direct, JSON', 'gateway, JSON', 'direct, SSE', 'gateway, SSE', 'ledger only', '/prompt, JSON', '/prompt, SSE'].filter((n) => results[n]).map(row),
      '',
      `Gateway overhead: ${overhead('JSON')}; ${overhead('SSE')}.`,
      ...(results['/prompt, JSON']
        ? [
            '',
            `/prompt overhead against one direct model call (the agent streams its one model call): JSON +${(results['/prompt, JSON'].p50 - results['direct, SSE']!.p50).toFixed(2)} ms at p50, ` +
              `SSE +${(results['/prompt, SSE']!.p50 - results['direct, SSE']!.p50).toFixed(2)} ms at p50 (first byte: the run's first text chunk).`,
          ]
        : []),
      '',
    ];
  };
  const section = [
    '## Proxy overhead',
    '',
    'Command: `npm run bench` ' + `(BENCH_REQUESTS=${REQUESTS}, BENCH_CONCURRENCY=${CONCURRENCY_LEVELS.join(',')}, BENCH_WARMUP=${WARMUP}).`,
    '',
    `Measured ${new Date().toISOString().slice(0, 10)} on ${availableParallelism()} cores (${cpus()[0]?.model.trim() ?? 'unknown CPU'}), Node ${process.version}.`,
    `Each request: \`${MODEL}\`, max_tokens 64, a 20-word answer from the simulated upstream. Upstream, gateway`,
    'and load generator are separate processes on the same machine, so they compete for its cores; the gateway',
    'path includes token verification, pricing, the DynamoDB Local reservation and settlement (two conditional writes)',
    'and, for SSE, metering every event it passes through.',
    '',
    ...[...byLevel].flatMap(([c, r]) => table(c, r)),
    '"ledger only" is one reservation and one settlement on DynamoDB Local, with no HTTP, at the same concurrency:',
    "the share of the gateway's overhead that belongs to the local store. DynamoDB Local is a Java process writing",
    'to SQLite; it takes a few milliseconds per call and serialises writes to one item, so under concurrency the',
    "requests of one user queue behind each other. DynamoDB answers a conditional write in single-digit milliseconds",
    'without that queue, so in AWS this share is far smaller. The remainder is the gateway itself (HTTP, the event',
    'adapters, token verification, pricing, SSE metering).',
    '',
  ].join('\n');
  writeBenchmarkSection('## Proxy overhead', section);
  console.log('\nWrote docs/benchmarks.md');
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
