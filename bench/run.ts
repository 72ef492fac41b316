import type { ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../bin/local/dynamodb.ts';
import { npmStartCommand } from '../bin/local/start-command.ts';
import { DEV_PROJECT } from '../bin/local/seed.ts';
import { mintToken } from '../lambdas/auth/tokens.ts';
import { reserve, settle } from '../lambdas/budgets/ledger.ts';
import { functionSpec } from '../lambdas/handlers/manifest.ts';
import { getProject } from '../lambdas/registry/registry.ts';
import { AccessLog, phaseFigures, PHASES, type PhaseFigures } from './access-log.ts';
import { concurrently, ms, percentile, sleep, spawnChild, stopChild, type OutputLines } from './common.ts';
import { handlerMemory } from './handler-memory.ts';
import { layerShares, type LayerShare } from './cpu-layers.ts';
import { recordLayers } from './cpu-layers-history.ts';
import { connectInspector } from './inspector.ts';
import { chooseSize } from './lambda-cost.ts';
import { writeOverheadReport, type Results, type Figures, type CpuRun, type MemoryFigures, type EventFigures, type LatencyGoal } from './overhead-doc.ts';
import { startPortkey } from './portkey.ts';
import { findChild, memory, procAvailable, startCpuMeter } from './process-stats.ts';

/**
 * `npm run bench`: the proxy's overhead, CPU, memory and per-event cost. The same requests go (a) straight to the
 * simulated Anthropic upstream and (b) through the gateway (auth, pricing, reservation and settlement on DynamoDB
 * Local, SSE pass-through) to that same upstream; optionally (c) through Portkey's gateway. Upstream, gateway and
 * load generator are separate processes. Results go to docs/benchmarks.md ("Proxy overhead"); the explanations of
 * each figure are in bench/overhead-doc.ts.
 *
 * Knobs (environment):
 * - BENCH_REQUESTS (per latency scenario, default 400), BENCH_CONCURRENCY (levels, default 1,8), BENCH_WARMUP (40),
 *   BENCH_PACE_MS (the pause of the "paced" rows, 25)
 * - BENCH_CPU_REQUESTS (default 2000), BENCH_CPU_WARMUP (200), BENCH_CPU_CONCURRENCY (16 clients, one user each),
 *   BENCH_PROFILE_REQUESTS (1000: the profiled run that splits the gateway's CPU by layer), BENCH_PROFILE_OUT (a
 *   path: the profile is saved there, a .cpuprofile Chrome's DevTools open)
 * - BENCH_PORTKEY (1; 0 skips the Portkey side-by-side)
 * - BENCH_STREAMS (concurrent slow streams for memory, 100), BENCH_STREAM_WORDS (100), BENCH_STREAM_DELAY_MS (100)
 * - BENCH_EVENTS (events per stream for the per-event cost, 500), BENCH_EVENT_RUNS (streams each way, 10),
 *   BENCH_EVENT_DELAY_MS (between upstream events, 1); BENCH_EVENTS_DEBUG=1 prints each stream's slowest events
 * - BENCH_ONLY: a comma-separated subset of latency,cpu,portkey,memory,events; docs/benchmarks.md is only
 *   rewritten by a run of every part.
 */
const knob = (name: string, fallback: number) => Number(process.env[name] ?? fallback);
const REQUESTS = knob('BENCH_REQUESTS', 400);
const CONCURRENCY_LEVELS = (process.env.BENCH_CONCURRENCY ?? '1,8').split(',').map(Number);
const WARMUP = knob('BENCH_WARMUP', 40);
const PACE_MS = knob('BENCH_PACE_MS', 25);
const CPU_REQUESTS = knob('BENCH_CPU_REQUESTS', 2000);
const CPU_WARMUP = knob('BENCH_CPU_WARMUP', 200);
const CPU_CONCURRENCY = knob('BENCH_CPU_CONCURRENCY', 16);
const PROFILE_REQUESTS = knob('BENCH_PROFILE_REQUESTS', 1000);
const PORTKEY = process.env.BENCH_PORTKEY !== '0';
const STREAMS = knob('BENCH_STREAMS', 100);
const STREAM_WORDS = knob('BENCH_STREAM_WORDS', 100);
const STREAM_DELAY_MS = knob('BENCH_STREAM_DELAY_MS', 100);
const EVENTS = knob('BENCH_EVENTS', 500);
const EVENT_RUNS = knob('BENCH_EVENT_RUNS', 10);
const EVENT_DELAY_MS = knob('BENCH_EVENT_DELAY_MS', 1);
const EVENTS_DEBUG = process.env.BENCH_EVENTS_DEBUG === '1';
const PARTS = ['latency', 'cpu', 'portkey', 'memory', 'events'] as const;
const ONLY = new Set(process.env.BENCH_ONLY ? process.env.BENCH_ONLY.split(',') : PARTS);
const runs = (part: (typeof PARTS)[number]) => ONLY.has(part) && (part !== 'portkey' || (PORTKEY && ONLY.has('cpu')));

const MODEL = 'claude-sonnet-4-6';
const PROMPT = 'Benchmark [[words:20]]';
/** /prompt runs per row: each is admitted (plan, lease, the user's compute) and charged a compute second at least. */
const PROMPT_REQUESTS = Math.min(REQUESTS, 200);
/** How long the CPU part watches the idle processes before its load run. */
const IDLE_SECONDS = 5;
/** The gateway's CPU per request at the chosen Lambda size should fit in the p99 allowance over one store write. */
const CPU_BUDGET_MS = 5;
/** Minted bench users: a budget no run exhausts, so every request is admitted and metered. */
const BENCH_BUDGET = { ai: 1_000_000_000, compute: 3_600, window: 'day' as const };

const KNOBS = {
  REQUESTS,
  CONCURRENCY_LEVELS,
  WARMUP,
  PACE_MS,
  CPU_REQUESTS,
  CPU_WARMUP,
  CPU_CONCURRENCY,
  PROFILE_REQUESTS,
  PORTKEY,
  STREAMS,
  STREAM_WORDS,
  STREAM_DELAY_MS,
  EVENTS,
  EVENT_RUNS,
  EVENT_DELAY_MS,
  MODEL,
};

interface Scenario {
  name: string;
  url: string;
  headers: Record<string, string>;
  stream: boolean;
  /** The user message (default PROMPT) and max_tokens (default 64). */
  message?: string;
  maxTokens?: number;
  /** A one-turn /prompt run (the token in the body) instead of a Messages request. */
  prompt?: { token: string };
  /** A pause after each answer before the client's next request. */
  paceMs?: number;
}

function request(s: Scenario): Promise<Response> {
  if (s.prompt) {
    return fetch(`${s.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(s.stream ? { accept: 'text/event-stream' } : {}) },
      body: JSON.stringify({ message: PROMPT, options: { token: s.prompt.token, model: MODEL } }),
    });
  }
  return fetch(`${s.url}/v1/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01', ...s.headers },
    body: JSON.stringify({ model: MODEL, max_tokens: s.maxTokens ?? 64, stream: s.stream, messages: [{ role: 'user', content: s.message ?? PROMPT }] }),
  });
}

async function once(s: Scenario, onFirstByte?: () => void): Promise<{ total: number; firstByte: number }> {
  const started = performance.now();
  const res = await request(s);
  if (res.status !== 200) throw new Error(`${s.name}: HTTP ${res.status} ${await res.text()}`);
  const reader = res.body!.getReader();
  let firstByte = 0;
  for (;;) {
    const { done } = await reader.read();
    if (!firstByte) {
      firstByte = performance.now() - started;
      onFirstByte?.();
    }
    if (done) break;
  }
  return { total: performance.now() - started, firstByte };
}

async function run(s: Scenario, count: number, concurrency: number): Promise<Figures> {
  const { results, seconds } = await concurrently(count, concurrency, async () => {
    const r = await once(s);
    if (s.paceMs) await sleep(s.paceMs);
    return r;
  });
  return summarize(results, seconds);
}

function summarize(results: { total: number; firstByte: number }[], seconds: number): Figures {
  const totals = results.map((r) => r.total);
  const firstBytes = results.map((r) => r.firstByte);
  return {
    p50: percentile(totals, 50),
    p99: percentile(totals, 99),
    ttfb50: percentile(firstBytes, 50),
    ttfb99: percentile(firstBytes, 99),
    rps: results.length / seconds,
  };
}

/** The processes of one benchmark run and what the load generator needs to reach them. */
interface Setup {
  dataDir: string;
  upstreamUrl: string;
  upstream: OutputLines;
  gatewayUrl: string;
  gatewayPid: number;
  dynamoPid: number | undefined;
  inspectorPort: number;
  accessLog: AccessLog;
  devToken: string;
  /** One token per bench user (CPU_CONCURRENCY of them, at least 16), all of the development project. */
  userTokens: string[];
}

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'gateway-bench-'));
  const children: ChildProcess[] = [];
  try {
    const setup = await startProcesses(dataDir, children);
    const results: Results = { levels: new Map(), loadAverageAtStart: loadavg()[0]! };
    const rssAtStartMb = procAvailable() ? memory(setup.gatewayPid).rssMb : NaN;
    if (runs('latency')) await latency(setup, results);
    if (runs('cpu')) results.cpu = await cpuRuns(setup, children);
    if (runs('memory')) results.memory = await slowStreams(setup, rssAtStartMb);
    if (runs('events')) results.events = await perEvent(setup);
    if (results.memory && results.cpu) results.size = proposeSize(results);
    if (PARTS.every((p) => ONLY.has(p))) {
      writeOverheadReport(results, KNOBS);
      console.log('\nWrote docs/benchmarks.md');
    } else console.log('\nBENCH_ONLY: docs/benchmarks.md left as it was');
  } finally {
    await Promise.all(children.map((c) => stopChild(c)));
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function startProcesses(dataDir: string, children: ChildProcess[]): Promise<Setup> {
  // It stamps the text events of streams as long as the per-event run's (bench/stamped-upstream.ts).
  const upstream = spawnChild(
    process.execPath,
    ['--import', 'tsx', 'bench/stamped-upstream.ts'],
    { env: { ...process.env, BENCH_STAMP_MIN_EVENTS: String(EVENTS) } },
    children,
  );
  const upstreamUrl = (await upstream.waitFor(/^(http:\/\/[\d.:]+)$/, 30_000))[1]!;

  const port = await freePort();
  // The memory part reads the live heap through the inspector (bench/inspector.ts), on loopback only.
  const inspectorPort = await freePort();
  // `npm start`'s own node arguments, with the inspector added.
  const [, ...startArgs] = npmStartCommand();
  const gateway = spawnChild(
    process.execPath,
    [`--inspect=127.0.0.1:${inspectorPort}`, ...startArgs],
    {
      env: {
        ...process.env,
        // The deployed default (lambdas/config/env.ts); locally it is 1 s, which would re-read the project once a
        // second and put a store read into about 1 % of the requests at this rate: the local default's artefact.
        SECRET_CACHE_SECONDS: '60',
        PORT: String(port),
        DATA_DIR: dataDir,
        ANTHROPIC_API_KEY: 'sk-bench',
        ANTHROPIC_BASE_URL: upstreamUrl,
        POWERTOOLS_LOG_LEVEL: 'ERROR',
        // One JSON line per request, with its phases (bench/access-log.ts).
        LOCAL_ACCESS_LOG: 'json',
        // No local stand-in for IAM: in AWS, DynamoDB checks a call's grants on its own side, so the in-process HTTP
        // hop that checks them locally (bin/local/iam.ts) is no part of a function's CPU or latency.
        LOCAL_IAM: 'off',
      },
    },
    children,
    /^(Debugger (listening|attached|ending)|For help, see: |Waiting for the debugger)/,
  );
  const accessLog = new AccessLog(gateway);
  await gateway.waitFor(/Press Ctrl-C to stop/, 180_000);
  const gatewayPid = gateway.child.pid!;
  const dynamoPid = procAvailable() ? findChild(gatewayPid, 'java') : undefined;
  connectToStore(dataDir);
  return {
    dataDir,
    upstreamUrl,
    upstream,
    gatewayUrl: `http://127.0.0.1:${port}`,
    gatewayPid,
    dynamoPid,
    inspectorPort,
    accessLog,
    devToken: readFileSync(join(dataDir, 'dev-token.txt'), 'utf8').trim(),
    userTokens: await mintUserTokens(Math.max(16, CPU_CONCURRENCY)),
  };
}

/** Points this process's store clients (ledger, registry) at the gateway's DynamoDB Local and tables. */
function connectToStore(dataDir: string): void {
  const runtime = JSON.parse(readFileSync(join(dataDir, 'runtime.json'), 'utf8')) as { dynamoEndpoint: string; tables: Record<string, string> };
  Object.assign(process.env, { DYNAMODB_ENDPOINT: runtime.dynamoEndpoint, ...runtime.tables, AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' });
}

/** Tokens for users bench-user-1…n of the development project, signed with its secret as a developer's backend would. */
async function mintUserTokens(n: number): Promise<string[]> {
  const project = await getProject(DEV_PROJECT);
  if (!project) throw new Error(`the gateway did not create the development project ${DEV_PROJECT}`);
  return Promise.all(
    Array.from({ length: n }, (_, i) =>
      mintToken({ projectId: project.projectId, userId: `bench-user-${i + 1}`, secret: project.secret, budget: BENCH_BUDGET, expiresInSeconds: 86_400 }),
    ),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Latency at each concurrency level, phases and the added-latency goal (at concurrency 1)
// ---------------------------------------------------------------------------------------------------------------

async function latency(setup: Setup, results: Results): Promise<void> {
  const direct = { url: setup.upstreamUrl, headers: { 'x-api-key': 'sk-bench' } };
  const viaGateway = { url: setup.gatewayUrl, headers: { 'x-api-key': setup.devToken } };
  const scenarios: Scenario[] = [
    { name: 'direct, JSON', ...direct, stream: false },
    { name: 'gateway, JSON', ...viaGateway, stream: false },
    { name: 'direct, SSE', ...direct, stream: true },
    { name: 'gateway, SSE', ...viaGateway, stream: true },
  ];
  for (const concurrency of CONCURRENCY_LEVELS) {
    const level: Record<string, Figures> = {};
    for (const s of scenarios) {
      await run(s, WARMUP, concurrency);
      level[s.name] = await run(s, REQUESTS, concurrency);
    }
    if (concurrency === 1) await pacedGateway(setup, scenarios, level, results);
    const ledger = await ledgerOnly(concurrency);
    level['ledger only'] = ledger.both;
    if (concurrency === 1) {
      results.storeWrite = ledger.reserve;
      // The same write with the paced rows' pause before each: DynamoDB Local answers a write that follows an idle
      // gap more slowly than one that follows another, so the paced goal is held against a paced write.
      results.storeWritePaced = (await ledgerOnly(1, PACE_MS)).reserve;
    }
    // A one-turn /prompt run against one direct model call. At concurrency 1 only: the development developer's
    // tier admits 5 runs at once, and every run charges the development user at least a compute second.
    if (concurrency === 1) {
      for (const stream of [false, true]) {
        const s: Scenario = { name: `/prompt, ${stream ? 'SSE' : 'JSON'}`, url: setup.gatewayUrl, headers: {}, stream, prompt: { token: setup.devToken } };
        await run(s, WARMUP, 1);
        level[s.name] = await run(s, PROMPT_REQUESTS, 1);
      }
    }
    for (const [name, r] of Object.entries(level)) {
      console.log(`c=${concurrency} ${name.padEnd(21)} p50 ${ms(r.p50)} ms  p99 ${ms(r.p99)} ms  first byte p50 ${ms(r.ttfb50)} ms  ${r.rps.toFixed(0)} req/s`);
    }
    results.levels.set(concurrency, level);
  }
  printPhases(results.phases);
  results.goals = addedLatencyGoals(results);
  for (const g of results.goals) {
    console.log(
      `added latency, ${g.what}: p50 +${ms(g.added.p50)} ms (goal ≤ ${ms(g.limit.p50)}), p99 +${ms(g.added.p99)} ms (goal ≤ ${ms(g.limit.p99)}): ${g.met ? 'met' : 'NOT met'}`,
    );
  }
}

/**
 * The ledger's share: reserve + settle against the gateway's own DynamoDB Local, same concurrency, one user. The
 * reservation alone is one conditional write, the store's part of the critical path ("one store write").
 */
async function ledgerOnly(concurrency: number, paceMs = 0): Promise<{ both: Figures; reserve: { p50: number; p99: number } }> {
  const caller = { projectId: 'bench', userId: 'ledger', budget: { ai: Number.MAX_SAFE_INTEGER, compute: 0, window: 'day' as const } };
  const pass = (count: number) =>
    concurrently(count, concurrency, async () => {
      if (paceMs > 0) await sleep(paceMs);
      const t = performance.now();
      const r = await reserve({ caller, amounts: { ai: 100, compute: 0 }, enforce: ['ai'] });
      const reserved = performance.now() - t;
      if (r.ok) await settle(r.reservation, { ai: 66, compute: 0 });
      return { total: performance.now() - t, reserved };
    });
  await pass(WARMUP);
  const { results, seconds } = await pass(REQUESTS);
  const reserveTimes = results.map((r) => r.reserved);
  return {
    both: summarize(
      results.map((r) => ({ total: r.total, firstByte: r.total })),
      seconds,
    ),
    reserve: { p50: percentile(reserveTimes, 50), p99: percentile(reserveTimes, 99) },
  };
}

/**
 * The gateway rows again at concurrency 1, each request PACE_MS after the previous answer. Back to back, a request's
 * reservation queues behind the previous request's settlement, which writes the same ledger item after the answer
 * was delivered; paced, each request's own path is measured, one store write before the upstream call. The gateway's
 * phases come from these runs.
 */
async function pacedGateway(setup: Setup, scenarios: Scenario[], level: Record<string, Figures>, results: Results): Promise<void> {
  for (const s of scenarios.filter((x) => x.url === setup.gatewayUrl)) {
    const paced: Scenario = { ...s, name: `${s.name}, paced`, paceMs: PACE_MS };
    await run(paced, WARMUP, 1);
    let figures: Figures | undefined;
    const records = await setup.accessLog.during(async () => (figures = await run(paced, REQUESTS, 1)), REQUESTS);
    level[paced.name] = figures!;
    results.phases ??= {};
    results.phases[s.stream ? 'SSE' : 'JSON'] = phaseFigures(records);
  }
}

function printPhases(phases: Results['phases']): void {
  if (!phases) return;
  const header = ['phase', ...Object.keys(phases).flatMap((k) => [`${k} p50`, `${k} p99`])];
  console.log(
    `\nphases of the paced runs at concurrency 1 (ms, from the gateway's access lines; "-": not reported)\n${header.map((h) => h.padEnd(12)).join('')}`,
  );
  for (const phase of [...PHASES, 'total'] as const) {
    const cells = Object.values(phases).flatMap((f: PhaseFigures) => [ms(f[phase].p50), ms(f[phase].p99)]);
    console.log([phase, ...cells].map((c) => c.padEnd(12)).join(''));
  }
}

/** Gateway − direct at concurrency 1: the JSON answer's total time and the SSE answer's first byte. */
function addedLatencyGoals(results: Results): LatencyGoal[] {
  const level = results.levels.get(1);
  const store = results.storeWrite;
  const pacedStore = results.storeWritePaced ?? store;
  if (!level || !store || !pacedStore) return [];
  const goal = (what: string, direct: Figures, gateway: Figures, pick: (f: Figures) => { p50: number; p99: number }): LatencyGoal => {
    const added = { p50: pick(gateway).p50 - pick(direct).p50, p99: pick(gateway).p99 - pick(direct).p99 };
    const write = what.endsWith('paced') ? pacedStore : store;
    const limit = { p50: write.p50 + 1, p99: write.p99 + 5 };
    return { what, added, limit, met: added.p50 <= limit.p50 && added.p99 <= limit.p99 };
  };
  const whole = (f: Figures) => ({ p50: f.p50, p99: f.p99 });
  const firstByte = (f: Figures) => ({ p50: f.ttfb50, p99: f.ttfb99 });
  return [
    goal('JSON, whole answer, paced', level['direct, JSON']!, level['gateway, JSON, paced']!, whole),
    goal('SSE, first byte, paced', level['direct, SSE']!, level['gateway, SSE, paced']!, firstByte),
    goal('JSON, whole answer, back to back', level['direct, JSON']!, level['gateway, JSON']!, whole),
    goal('SSE, first byte, back to back', level['direct, SSE']!, level['gateway, SSE']!, firstByte),
  ];
}

// ---------------------------------------------------------------------------------------------------------------
// CPU per request (the gateway, DynamoDB Local, Portkey), measured from /proc over a load run
// ---------------------------------------------------------------------------------------------------------------

async function cpuRuns(setup: Setup, children: ChildProcess[]): Promise<Results['cpu']> {
  if (!procAvailable()) {
    console.log('\nCPU per request: skipped (no /proc on this system)');
    return undefined;
  }
  const users: Scenario[] = setup.userTokens
    .slice(0, CPU_CONCURRENCY)
    .map((token, i) => ({ name: `gateway, user ${i + 1}`, url: setup.gatewayUrl, headers: { 'x-api-key': token }, stream: false }));
  const processes: Record<string, number> = { gateway: setup.gatewayPid };
  if (setup.dynamoPid) processes['DynamoDB Local'] = setup.dynamoPid;
  const idle = await idleCpu(processes);
  const gateway = await cpuLoad('gateway', users, processes);
  gateway.netCpuMsPerRequest = Object.fromEntries(
    Object.entries(gateway.cpuMsPerRequest).map(([label, perRequest]) => [label, perRequest - (idle[label]! * gateway.seconds) / gateway.requests]),
  );
  console.log(
    `  net of the idle background (${Object.entries(idle)
      .map(([l, v]) => `${l} ${ms(v, 1)} ms/s`)
      .join(', ')}): ${Object.entries(gateway.netCpuMsPerRequest)
      .map(([l, v]) => `${l} ${ms(v)} ms`)
      .join(', ')}`,
  );
  const layers = await profiledLayers(setup, users, gateway.netCpuMsPerRequest.gateway!);
  const portkey = runs('portkey') ? await portkeyLoad(setup, children) : { skipped: PORTKEY ? 'not selected (BENCH_ONLY)' : 'BENCH_PORTKEY=0' };
  const cpu: NonNullable<Results['cpu']> = { gateway, idleMsPerSecond: idle, portkey, layers };
  cpu.layerHistory = recordLayers({
    cpuMsPerRequest: gateway.netCpuMsPerRequest.gateway!,
    portkeyMsPerRequest: 'run' in portkey ? portkey.run.cpuMsPerRequest.Portkey : undefined,
    layers,
  });
  if ('run' in cpu.portkey) {
    const portkeyMs = cpu.portkey.run.cpuMsPerRequest.Portkey!;
    const ratio = gateway.cpuMsPerRequest.gateway! / portkeyMs;
    const net = gateway.netCpuMsPerRequest.gateway! / portkeyMs;
    console.log(`gateway / Portkey CPU per request: ${ratio.toFixed(2)}, net of idle ${net.toFixed(2)} (goal ≤ 1: ${ratio <= 1 ? 'met' : 'NOT met'})`);
  } else console.log(`Portkey side-by-side: skipped: ${cpu.portkey.skipped}`);
  return cpu;
}

/**
 * The gateway's net CPU per request split by layer (bench/cpu-layers.ts): the same load again, PROFILE_REQUESTS of
 * it, under the inspector's sampling profiler.
 */
async function profiledLayers(setup: Setup, users: Scenario[], cpuMsPerRequest: number): Promise<LayerShare[]> {
  const inspector = await connectInspector(setup.inspectorPort);
  try {
    const send = (_: number, client: number) => once(users[client]!);
    const profile = await inspector.cpuProfile(async () => {
      await concurrently(PROFILE_REQUESTS, users.length, send);
    });
    if (process.env.BENCH_PROFILE_OUT) writeFileSync(process.env.BENCH_PROFILE_OUT, JSON.stringify(profile));
    const layers = layerShares(profile, cpuMsPerRequest);
    console.log(`\nCPU per request by layer (profile of ${PROFILE_REQUESTS} requests; shares of ${ms(cpuMsPerRequest)} ms):`);
    for (const l of layers) console.log(`  ${l.name.padEnd(24)} ${(100 * l.share).toFixed(1).padStart(5)} %  ${ms(l.msPerRequest)} ms`);
    return layers;
  } finally {
    inspector.close();
  }
}

/**
 * CPU the processes use doing nothing, ms per second, over IDLE_SECONDS: the local runtime's SQS pollers, scheduler
 * and timers, which a Lambda function does not run. Subtracted for the "net" figure.
 */
async function idleCpu(processes: Record<string, number>): Promise<Record<string, number>> {
  const stop = startCpuMeter(processes);
  await sleep(IDLE_SECONDS * 1000);
  return Object.fromEntries(Object.entries(stop()).map(([label, cpu]) => [label, cpu / IDLE_SECONDS]));
}
/**
 * CPU_REQUESTS JSON requests, CPU_CONCURRENCY clients at once, client i always sending as `users[i]`, after a
 * warm-up; CPU of each process from /proc before and after.
 */
async function cpuLoad(name: string, users: Scenario[], processes: Record<string, number>): Promise<CpuRun> {
  const send = (_: number, client: number) => once(users[client]!);
  await concurrently(CPU_WARMUP, users.length, send);
  const stop = startCpuMeter(processes);
  const { results, seconds } = await concurrently(CPU_REQUESTS, users.length, send);
  const cpu = stop();
  const run: CpuRun = {
    name,
    requests: CPU_REQUESTS,
    seconds,
    rps: CPU_REQUESTS / seconds,
    p50: percentile(
      results.map((r) => r.total),
      50,
    ),
    cpuMsPerRequest: Object.fromEntries(Object.entries(cpu).map(([label, total]) => [label, total / CPU_REQUESTS])),
  };
  const perProcess = Object.entries(run.cpuMsPerRequest)
    .map(([label, v]) => `${label} ${ms(v)} ms`)
    .join(', ');
  console.log(
    `\nCPU per request, ${name} (${CPU_REQUESTS} JSON requests, ${users.length} concurrent): ${perProcess}; ${run.rps.toFixed(0)} req/s, p50 ${ms(run.p50)} ms`,
  );
  return run;
}

async function portkeyLoad(setup: Setup, children: ChildProcess[]): Promise<{ run: CpuRun; paced: Figures } | { skipped: string }> {
  console.log('\nInstalling and starting Portkey’s gateway for the side-by-side…');
  const started = await startPortkey(children);
  if (!started.ok) return { skipped: started.reason };
  const { portkey } = started;
  try {
    const s: Scenario = { name: 'Portkey, JSON', url: portkey.url, headers: { ...portkey.headers(setup.upstreamUrl), 'x-api-key': 'sk-bench' }, stream: false };
    // The same answer as the upstream's own, before anything is measured.
    const [viaPortkey, direct] = await Promise.all([answerText(s), answerText({ ...s, url: setup.upstreamUrl })]);
    if (viaPortkey !== direct) return { skipped: `its answer differs from the upstream's: ${viaPortkey.slice(0, 200)}` };
    const cpu = await cpuLoad(
      'Portkey',
      Array.from({ length: CPU_CONCURRENCY }, () => s),
      { Portkey: portkey.pid },
    );
    // What a proxy hop alone adds at concurrency 1, paced as the gateway's paced rows: the latency goal's yardstick.
    const paced: Scenario = { ...s, name: 'Portkey, JSON, paced', paceMs: PACE_MS };
    await run(paced, WARMUP, 1);
    const figures = await run(paced, REQUESTS, 1);
    console.log(`Portkey, JSON, paced, concurrency 1: p50 ${ms(figures.p50)} ms, p99 ${ms(figures.p99)} ms`);
    return { run: cpu, paced: figures };
  } finally {
    await portkey.stop();
  }
}

/** The text content of a JSON answer (ids differ from one answer to the next). */
async function answerText(s: Scenario): Promise<string> {
  const res = await request(s);
  const body = await res.text();
  if (res.status !== 200) return `HTTP ${res.status} ${body}`;
  return (JSON.parse(body) as { content: { text?: string }[] }).content.map((c) => c.text ?? '').join('');
}

// ---------------------------------------------------------------------------------------------------------------
// Memory: the gateway's RSS idle and with STREAMS slow streams in flight
// ---------------------------------------------------------------------------------------------------------------

async function slowStreams(setup: Setup, rssAtStartMb: number): Promise<MemoryFigures | undefined> {
  if (!procAvailable()) return undefined;
  const inspector = await connectInspector(setup.inspectorPort).catch((err: unknown) => {
    console.log(`memory: no live-heap figures (${(err as Error).message})`);
    return undefined;
  });
  try {
    const idleHeapMb = await inspector?.liveHeapMb();
    const idle = memory(setup.gatewayPid);
    let peakRssMb = idle.rssMb;
    const sampler = setInterval(() => (peakRssMb = Math.max(peakRssMb, memory(setup.gatewayPid).rssMb)), 100);
    const started = performance.now();
    let allOpen: { open: number; rssMb: number; heapMb?: number } | undefined;
    try {
      // A second after the last stream opened, all are mid-stream: one full GC there, then the live heap and RSS.
      await runSlowStreams(setup, async (stillOpen) => {
        await sleep(1000);
        const heapMb = await inspector?.liveHeapMb();
        allOpen = { open: stillOpen(), rssMb: memory(setup.gatewayPid).rssMb, heapMb };
      });
    } finally {
      clearInterval(sampler);
    }
    const seconds = (performance.now() - started) / 1000;
    const channeling = await handlerMemory('Channeling').catch((err: unknown) => {
      console.log(`fresh Channeling instance: not measured (${(err as Error).message.split('\n')[0]})`);
      return undefined;
    });
    const figures: MemoryFigures = {
      channeling,
      rssAtStartMb,
      idleRssMb: idle.rssMb,
      allOpenRssMb: allOpen!.rssMb,
      openAtSample: allOpen!.open,
      peakRssMb,
      hwmMb: memory(setup.gatewayPid).hwmMb,
      idleHeapMb,
      allOpenHeapMb: allOpen!.heapMb,
      perStreamRssMb: (allOpen!.rssMb - idle.rssMb) / allOpen!.open,
      perStreamHeapMb: idleHeapMb === undefined || allOpen!.heapMb === undefined ? undefined : (allOpen!.heapMb - idleHeapMb) / allOpen!.open,
      streams: STREAMS,
      seconds,
    };
    printMemory(figures);
    return figures;
  } finally {
    inspector?.close();
  }
}

/**
 * STREAMS slow streams at once through the gateway, users spread over the bench tokens. `whenAllOpen` runs once every
 * stream has its first byte, with a function telling how many are still open; returns when all streams and it ended.
 */
async function runSlowStreams(setup: Setup, whenAllOpen: (stillOpen: () => number) => Promise<void>): Promise<void> {
  const message = `Slow stream [[words:${STREAM_WORDS}]] [[delay:${STREAM_DELAY_MS}]]`;
  let open = 0;
  let opened = 0;
  let measured: Promise<void> | undefined;
  await Promise.all(
    Array.from({ length: STREAMS }, async (_, i) => {
      const s: Scenario = {
        name: 'slow stream',
        url: setup.gatewayUrl,
        headers: { 'x-api-key': setup.userTokens[i % setup.userTokens.length]! },
        stream: true,
        message,
        maxTokens: STREAM_WORDS + 64,
      };
      let mine = false;
      try {
        await once(s, () => {
          mine = true;
          open++;
          if (++opened === STREAMS) measured = whenAllOpen(() => open);
        });
      } finally {
        if (mine) open--;
      }
    }),
  );
  await measured;
}

function printMemory(m: MemoryFigures): void {
  const heap = m.idleHeapMb === undefined ? '' : `; live heap idle ${ms(m.idleHeapMb, 1)} MB, with them ${ms(m.allOpenHeapMb, 1)} MB`;
  console.log(
    `\nmemory: RSS at start ${ms(m.rssAtStartMb, 1)} MB, idle before the streams ${ms(m.idleRssMb, 1)} MB, with ${m.openAtSample} of ${m.streams} streams open ${ms(m.allOpenRssMb, 1)} MB ` +
      `(peak during the run ${ms(m.peakRssMb, 1)} MB, VmHWM ${ms(m.hwmMb, 1)} MB)${heap}; per stream: heap ${ms(m.perStreamHeapMb, 3)} MB, RSS ${ms(m.perStreamRssMb, 3)} MB; ` +
      `streams took ${m.seconds.toFixed(1)} s`,
  );
  if (m.channeling) {
    console.log(
      `fresh Channeling instance (its bundle imported in a new Node process): RSS ${ms(m.channeling.rssMb, 1)} MB (Node alone ${ms(m.channeling.nodeRssMb, 1)} MB), heap used ${ms(m.channeling.heapUsedMb, 1)} MB`,
    );
  }
}

/** The Lambda memory size these figures call for (bench/lambda-cost.ts), printed and recorded. */
function proposeSize(results: Results): Results['size'] {
  const { gateway } = results.cpu!;
  // Net of the local runtime's idle pollers, which a Lambda function does not run.
  const cpuMsPerRequest = gateway.netCpuMsPerRequest?.gateway ?? gateway.cpuMsPerRequest.gateway!;
  const current = functionSpec('Channeling').memoryMb;
  // One fresh instance's resident memory; without it, the local gateway's (every handler in one process) bounds it.
  const residentMb = results.memory!.channeling?.rssMb ?? results.memory!.idleRssMb;
  const perStreamMb = results.memory!.perStreamHeapMb ?? results.memory!.perStreamRssMb;
  const choose = (cpuMs: number) => chooseSize(residentMb, perStreamMb, cpuMs, CPU_BUDGET_MS);
  const choice = choose(cpuMsPerRequest);
  console.log(`\nChanneling memory: ${choice.memoryMb} MB proposed (now ${current} MB): ${choice.reason}`);
  // What the CPU goal would allow: the same choice with Portkey's CPU per request.
  const portkey = 'run' in results.cpu!.portkey ? results.cpu!.portkey.run.cpuMsPerRequest.Portkey : undefined;
  const atCpuGoal = portkey === undefined ? undefined : { cpuMsPerRequest: portkey, memoryMb: choose(portkey).memoryMb };
  if (atCpuGoal) console.log(`  at the CPU goal (Portkey's ${ms(portkey)} ms per request) it would be ${atCpuGoal.memoryMb} MB`);
  return { ...choice, currentMb: current, cpuMsPerRequest, cpuBudgetMs: CPU_BUDGET_MS, atCpuGoal };
}

// ---------------------------------------------------------------------------------------------------------------
// Streaming: the time the gateway adds to each SSE event
// ---------------------------------------------------------------------------------------------------------------

/**
 * EVENT_RUNS streams of EVENTS text events, EVENT_DELAY_MS apart, direct and through the gateway, one at a time.
 * Each text event's latency is its arrival at the client minus the moment the upstream wrote it (the stamped
 * upstream prints those); the gateway's per-event cost is the difference of the two latency distributions.
 */
async function perEvent(setup: Setup): Promise<EventFigures> {
  const message = `Events [[words:${EVENTS}]] [[delay:${EVENT_DELAY_MS}]]`;
  const base = { stream: true, message, maxTokens: EVENTS + 64 };
  const direct: Scenario = { name: 'direct', url: setup.upstreamUrl, headers: { 'x-api-key': 'sk-bench' }, ...base };
  const gateway: Scenario = { name: 'gateway', url: setup.gatewayUrl, headers: { 'x-api-key': setup.userTokens[0]! }, ...base };
  // Warm-up, then the two paths in turn, so a burst of load from elsewhere on the machine hits both alike.
  await eventLatencies(direct, setup.upstream);
  await eventLatencies(gateway, setup.upstream);
  const latencies = { direct: [] as number[], gateway: [] as number[] };
  for (let i = 0; i < EVENT_RUNS; i++) {
    latencies.direct.push(...(await eventLatencies(direct, setup.upstream)));
    latencies.gateway.push(...(await eventLatencies(gateway, setup.upstream)));
  }
  const d = eventStats(latencies.direct);
  const g = eventStats(latencies.gateway);
  const figures: EventFigures = {
    direct: d,
    gateway: g,
    added: { p50: g.p50 - d.p50, p99: g.p99 - d.p99, mean: g.mean - d.mean },
  };
  console.log(
    `\nper SSE event (${EVENTS} text events, ${EVENT_DELAY_MS} ms apart, ${EVENT_RUNS} streams each way, alternating): latency direct p50 ${ms(d.p50, 3)} / p99 ${ms(d.p99, 3)} ms, ` +
      `gateway p50 ${ms(g.p50, 3)} / p99 ${ms(g.p99, 3)} ms; added p50 +${ms(figures.added.p50, 3)} ms, p99 +${ms(figures.added.p99, 3)} ms ` +
      `(goal p99 ≤ 1 ms: ${figures.added.p99 <= 1 ? 'met' : 'NOT met'}); mean +${ms(figures.added.mean, 3)} ms`,
  );
  return figures;
}

function eventStats(latencies: number[]): EventFigures['direct'] {
  const mean = latencies.reduce((a, b) => a + b, 0) / latencies.length;
  return { p50: percentile(latencies, 50), p99: percentile(latencies, 99), max: Math.max(...latencies), mean, events: latencies.length / EVENT_RUNS };
}

/** One stream: each text event's latency (client arrival − upstream send). */
async function eventLatencies(s: Scenario, upstream: OutputLines): Promise<number[]> {
  const stampsLine = upstream.waitFor(/^\{"stamps":/, 60_000).then((m) => m.input!);
  stampsLine.catch(() => {}); // awaited below; a failing request must not leave it unhandled meanwhile
  const arrivals = await eventArrivals(s);
  const sent = (JSON.parse(await stampsLine) as { stamps: Record<string, number> }).stamps;
  const latencies: number[] = [];
  for (const [word, at] of arrivals) if (sent[word] !== undefined) latencies.push(at - sent[word]);
  if (latencies.length < EVENTS) throw new Error(`${s.name}: matched ${latencies.length} of ${EVENTS} events to the upstream's stamps`);
  if (EVENTS_DEBUG) printSlowestEvents(s.name, arrivals, sent);
  return latencies;
}

/** BENCH_EVENTS_DEBUG=1: each stream's 8 slowest events, as `wordN@<sent, ms into the stream>:<latency ms>`. */
function printSlowestEvents(name: string, arrivals: Map<string, number>, sent: Record<string, number>): void {
  const start = Math.min(...Object.values(sent));
  const slowest = [...arrivals]
    .filter(([word]) => sent[word] !== undefined)
    .map(([word, at]) => ({ word, latency: at - sent[word]!, into: sent[word]! - start }))
    .sort((a, b) => b.latency - a.latency)
    .slice(0, 8);
  console.log(`${name}: ${slowest.map((e) => `${e.word}@${e.into.toFixed(0)}:${e.latency.toFixed(1)}`).join(' ')}`);
}

/** Reads a stream, noting when each complete text event (`wordN`) arrived, on the wall clock the upstream stamps with. */
async function eventArrivals(s: Scenario): Promise<Map<string, number>> {
  const res = await request(s);
  if (res.status !== 200) throw new Error(`${s.name}: HTTP ${res.status} ${await res.text()}`);
  const arrivals = new Map<string, number>();
  const decoder = new TextDecoder();
  const reader = res.body!.getReader();
  let buffer = '';
  for (let read = await reader.read(); !read.done; read = await reader.read()) {
    const chunk = read.value;
    const now = performance.timeOrigin + performance.now();
    buffer += decoder.decode(chunk, { stream: true });
    const events = buffer.split('\n\n');
    buffer = events.pop()!;
    for (const event of events) {
      const word = /"text":\s*"(word\d+)/.exec(event)?.[1];
      if (word) arrivals.set(word, now);
    }
  }
  return arrivals;
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
