/**
 * Bundle sizes and init times of the Lambda handlers: `npm run bundle-size`.
 *
 * Bundles every function of the manifest (lambdas/handlers/manifest.ts) with the stack's own esbuild options
 * (lib/bundling.ts), prints a table of the sizes (raw and gzip), each bundle's init time (module load to a ready
 * `handler`, in fresh Node processes) and the packages that weigh most, and writes it into docs/benchmarks.md under
 * "## Bundle sizes" (the rest of that file is left alone). Both figures are issue 17's cold-start goal.
 *
 * A bundle is index.mjs and the chunks esbuild split off (lib/bundling.ts). The size that counts is the code a cold
 * start loads: index.mjs and every chunk it imports statically, transitively (the metafile's `import-statement`
 * imports). The chunks reached only through a dynamic `import()` are loaded by the first call that needs them, and
 * are reported apart, with what is in them.
 *
 * Knob: BENCH_INIT_RUNS (fresh processes per handler for the init time, default 7).
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { gzipSync } from 'node:zlib';
import { build, type Metafile, version as esbuildVersion } from 'esbuild';
import { FUNCTIONS, type FunctionSpec } from '../lambdas/handlers/manifest.ts';
import { QUEUES } from '../lambdas/store/queues.ts';
import { TABLES } from '../lambdas/store/tables.ts';
import { bundledHandlers, esbuildOptions, HANDLER_BUNDLE, HANDLER_FILE, LAMBDA_NODE_OPTIONS, PROJECT_ROOT, type HandlerId } from '../lib/bundling.ts';
import { BENCHMARKS_DOC, writeBenchmarkSection } from './report.ts';

const HEADING = '## Bundle sizes';

/** Issue 17, "Cold start": each handler's init ≤ 150 ms and its bundle ≤ 1 MB minified (issue 32: what init loads). */
const TARGET = { initMs: 150, bundleBytes: 1024 * 1024 } as const;

/** Fresh Node processes per handler; the table shows their median and max. */
const INIT_RUNS = Number(process.env.BENCH_INIT_RUNS ?? 7);
if (!Number.isInteger(INIT_RUNS) || INIT_RUNS < 1) throw new Error(`BENCH_INIT_RUNS must be a whole number ≥ 1, not ${process.env.BENCH_INIT_RUNS}`);

/**
 * The Node that loads the bundles: the one running this script. `npm run bundle-size` runs tsx with the project's
 * node_modules/.bin first on PATH, so that is the `node` devDependency (Node 22, the major the stack deploys,
 * nodejs22.x) — not whatever `node` the machine has. The version the children actually ran is recorded in the table.
 */
const NODE = process.execPath;

const execFileAsync = promisify(execFile);

interface Init {
  /** Milliseconds from just before `import()` to the import resolved with a `handler` function, one per process. */
  runs: number[];
  medianMs: number;
  maxMs: number;
  /**
   * CPU time (user + system, all of the process's threads) over the same span, one per process: what the load
   * costs, which a busy machine inflates far less than the elapsed time.
   */
  cpuMedianMs: number;
}

/** Output files of one bundle, summed. */
interface Files {
  count: number;
  /** Minified bytes. */
  raw: number;
  gzip: number;
  /** Their source maps' bytes (Node reads the map of each module it loads: NODE_OPTIONS=--enable-source-maps). */
  map: number;
  /** The packages that weigh most in them (minified bytes). */
  heaviest: Array<[string, number]>;
}

interface Row {
  id: HandlerId;
  entry: string;
  /** The built bundle's entry: HANDLER_FILE in the handler's output folder, its map and `chunks/` beside it. */
  file: string;
  /** What a cold start loads: index.mjs and the chunks it imports statically. */
  initLoaded: Files;
  /** The chunks loaded on first use only (dynamic `import()`). */
  lazy: Files;
  /** The project's modules that are the targets of those `import()`s (on-demand loaders), e.g. lambdas/agent/structured-output.ts. */
  lazyEntries: string[];
  /** What Lambda stores and downloads on a cold start: every file of the folder, maps included, zipped. */
  packageZip: number;
  init?: Init;
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;
const ms = (value: number) => value.toFixed(0);

/** `node_modules/@scope/name/...` → `@scope/name`; the generated price table → `(price catalog)`; project files → `(project)`. */
function packageOf(input: string): string {
  // The price table generated from @pydantic/genai-prices (lambdas/pricing/generate-catalog.ts) is data, not code.
  if (input.endsWith('lambdas/pricing/catalog.generated.ts')) return '(price catalog)';
  const at = input.lastIndexOf('node_modules/');
  if (at < 0) return '(project)';
  const parts = input.slice(at + 'node_modules/'.length).split('/');
  return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

// --- Size: the bundle as the stack builds it -------------------------------------------------------------------

/**
 * The code files of a build that `entry` loads as it is imported: itself and, transitively, every chunk it imports
 * statically. Node built-ins (external) are not files of the bundle. Paths as the metafile gives them.
 */
function loadedAtInit(metafile: Metafile, entry: string): Set<string> {
  const loaded = new Set<string>();
  const pending = [entry];
  for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
    if (loaded.has(file)) continue;
    loaded.add(file);
    const output = metafile.outputs[file];
    if (!output) throw new Error(`${file} is not an output of the build`);
    for (const imported of output.imports) if (imported.kind === 'import-statement' && !imported.external) pending.push(imported.path);
  }
  return loaded;
}

/** Sizes of the output files `files` (metafile paths, relative to the project) and what is in them. */
function filesOf(metafile: Metafile, files: string[]): Files {
  const sum = { count: files.length, raw: 0, gzip: 0, map: 0 };
  const weights = new Map<string, number>();
  for (const file of files) {
    const code = readFileSync(resolve(PROJECT_ROOT, file));
    sum.raw += code.length;
    sum.gzip += gzipSync(code, { level: 9 }).length;
    sum.map += readFileSync(resolve(PROJECT_ROOT, `${file}.map`)).length;
    for (const [input, { bytesInOutput }] of Object.entries(metafile.outputs[file]!.inputs)) {
      weights.set(packageOf(input), (weights.get(packageOf(input)) ?? 0) + bytesInOutput);
    }
  }
  return { ...sum, heaviest: [...weights.entries()].filter(([, bytes]) => bytes > 0).sort((a, b) => b[1] - a[1]) };
}

async function measureSize(id: HandlerId, entry: string, outdir: string): Promise<Row> {
  const folder = join(outdir, id);
  const result = await build({ ...esbuildOptions(entry, folder), metafile: true });
  const { metafile } = result;
  if (!metafile) throw new Error('esbuild returned no metafile');
  // The metafile's paths are relative to the build's working directory (the project).
  const outputs = Object.keys(metafile.outputs);
  const code = outputs.filter((file) => !file.endsWith('.map'));
  const entryFile = code.find((file) => resolve(PROJECT_ROOT, file) === join(folder, HANDLER_FILE));
  if (!entryFile) throw new Error(`${id}: the build wrote no ${HANDLER_FILE}`);
  const atInit = loadedAtInit(metafile, entryFile);
  const lazy = code.filter((file) => !atInit.has(file));
  return {
    id,
    entry: entry.slice(PROJECT_ROOT.length + 1),
    file: join(folder, HANDLER_FILE),
    initLoaded: filesOf(metafile, [...atInit]),
    lazy: filesOf(metafile, lazy),
    lazyEntries: lazy.flatMap((file) => metafile.outputs[file]!.entryPoint ?? []).filter((input) => packageOf(input) === '(project)'),
    // The zip Lambda stores: every file of the folder, maps included (deflate ≈ gzip).
    packageZip: outputs.reduce((sum, file) => sum + gzipSync(readFileSync(resolve(PROJECT_ROOT, file)), { level: 9 }).length, 0),
  };
}

// --- Init: module load to a ready handler, in a fresh Node process ---------------------------------------------

/**
 * The environment the stack gives `spec`'s function (lib/gateway-stack.ts, lib/constructs/*.ts), with stand-in
 * values, plus what Lambda's runtime sets itself. A module that read a missing variable at load would throw here as
 * it would in AWS; none does today (configuration is parsed on first use), but the loaded code is the deployed code
 * only if its environment is the deployed one: NODE_OPTIONS=--enable-source-maps in particular makes Node read and
 * index index.mjs.map while loading the bundle, which is part of a real cold start.
 *
 * Deliberately absent: AWS credentials (the SDK resolves them on its first call, not at load; were it to do so at
 * load it would look for them on the network, which the preload refuses) and anything from this shell's
 * environment (NODE_COMPILE_CACHE would let V8 skip compiling the bundle, which Lambda does not).
 */
function lambdaEnvironment(spec: FunctionSpec): NodeJS.ProcessEnv {
  const region = 'eu-west-1';
  const account = '123456789012';
  const stage = 'bench';
  const arn = (service: string, resource: string) => `arn:aws:${service}:${region}:${account}:${resource}`;
  const keyArn = arn('kms', 'key/00000000-0000-0000-0000-000000000000');
  const { access } = spec;
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    // Set by Lambda's runtime.
    AWS_REGION: region,
    AWS_DEFAULT_REGION: region,
    AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs22.x',
    AWS_LAMBDA_FUNCTION_NAME: `prompt-gateway-${stage}-${spec.id}`,
    AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(spec.memoryMb),
    AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
    AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
    TZ: ':UTC',
    // Every function (lib/constructs/functions.ts).
    STAGE: stage,
    NODE_OPTIONS: LAMBDA_NODE_OPTIONS,
    POWERTOOLS_SERVICE_NAME: `prompt-gateway-${stage}`,
    POWERTOOLS_METRICS_NAMESPACE: 'PromptGateway',
    POWERTOOLS_LOG_LEVEL: 'INFO',
    // Every function is told every table's name.
    ...Object.fromEntries(TABLES.map((table) => [table.envVar, `prompt-gateway-${stage}-${table.id}`])),
  };
  const queue = (name: string) => ({
    url: `https://sqs.${region}.amazonaws.com/${account}/prompt-gateway-${stage}-${name}`,
    arn: arn('sqs', `prompt-gateway-${stage}-${name}`),
  });
  for (const q of QUEUES.filter((q) => (access.queues as readonly string[]).includes(q.name))) {
    env[q.envVar] = queue(q.name).url;
    env[q.arnEnvVar] = queue(q.name).arn;
  }
  for (const q of QUEUES.filter((q) => ((access.deadLetters ?? []) as readonly string[]).includes(q.name))) {
    env[q.deadLetterEnvVar] = queue(`${q.name}-dlq`).url;
  }
  if (access.providers) {
    env.PROVIDER_KEYS_KMS_KEY_ID = keyArn;
    env.ANTHROPIC_API_KEY_SECRET_ARN = arn('secretsmanager', 'secret:anthropic-AbCdEf');
  }
  if (access.encrypts || access.decrypts) env.PROVIDER_KEYS_KMS_KEY_ID = keyArn;
  if (access.scheduler) {
    env.SCHEDULE_GROUP_NAME = `prompt-gateway-${stage}`;
    env.SCHEDULER_ROLE_ARN = `arn:aws:iam::${account}:role/prompt-gateway-${stage}-scheduler`;
  }
  if (access.connections) env.WEBSOCKET_CALLBACK_URL = `https://abcdef1234.execute-api.${region}.amazonaws.com/${stage}`;
  return env;
}

/**
 * Builds the modules every measuring process loads with `--import` before the bundle, before the clock starts:
 *
 * 1. The cold-import test's preload (test/lib/offline-preload.ts). It installs the `awslambda` globals Lambda's
 *    runtime provides (streaming handlers call `awslambda.streamifyResponse` at load) and makes any socket connect or
 *    DNS lookup fail the process — so each measurement also verifies that loading a handler makes no network call (an
 *    SDK client resolving credentials or an endpoint at load would both fail the run and distort the figure).
 * 2. What Lambda's Node.js runtime interface client has loaded before it imports the handler: `node:http`, with the
 *    keep-alive Agent it talks to the Runtime API through (RUNTIME_CLIENT_PRELOAD). Without it, the first `node:http`
 *    import — which the AWS SDK's request handler makes — would be charged to our module although on Lambda it is
 *    already done (about 40 ms on Node 22: it also loads Node's internal undici).
 */
async function buildPreloads(outdir: string): Promise<string[]> {
  const offline = join(outdir, 'offline-preload.mjs');
  await build({
    entryPoints: [join(PROJECT_ROOT, 'test/lib/offline-preload.ts')],
    outfile: offline,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: HANDLER_BUNDLE.target,
    logLevel: 'error',
  });
  const runtimeClient = join(outdir, 'runtime-client-preload.mjs');
  writeFileSync(runtimeClient, RUNTIME_CLIENT_PRELOAD);
  return [offline, runtimeClient];
}

/**
 * The part of Lambda's runtime start that precedes our import, as far as it shapes our module's load: the runtime
 * interface client (github.com/aws/aws-lambda-nodejs-runtime-interface-client) creates its Runtime API client before
 * it loads the handler (`createRuntime` in src/utils/runtime-setup.ts awaits `RAPIDClient.create` and only then
 * `UserFunctionLoader.load`; in the older releases, src/index.mjs builds `new RAPIDClient(…)` before
 * `UserFunction.load`), and that client loads `node:http` (`cjsRequire("node:http")` at the top of
 * src/client/rapid-client.ts; `require('http')` in the older src/RAPIDClient.js constructor) and makes a keep-alive
 * `Agent` with `maxSockets: 1` for its requests. Only that is reproduced: nothing the runtime does not demonstrably
 * load.
 */
const RUNTIME_CLIENT_PRELOAD = `import { Agent } from 'node:http';
globalThis.__runtimeApiAgent = new Agent({ keepAlive: true, maxSockets: 1 });
`;

/**
 * What each measuring process runs: the clock starts after Node itself has started (Lambda's runtime start, its
 * bootstrap and the runtime interface client, is not ours to shrink and is not in the figure) and stops when
 * `import()` of the bundle has resolved — parse and compile of index.mjs, source map indexing, every top-level
 * statement of every bundled module — and `handler` is a function, which is when Lambda could invoke it.
 */
function initScript(bundle: string): string {
  return `const cpu = process.cpuUsage();
const start = performance.now();
const mod = await import(${JSON.stringify(pathToFileURL(bundle).href)});
const elapsed = performance.now() - start;
const used = process.cpuUsage(cpu);
if (typeof mod.handler !== 'function') { console.error('the bundle exports no handler function'); process.exit(2); }
console.log('INIT ' + JSON.stringify({ ms: elapsed, cpuMs: (used.user + used.system) / 1000, node: process.versions.node }));`;
}

/** One fresh process loading one bundle: its init time, the CPU time it took and the Node version it ran. */
async function initOnce(row: Row, env: NodeJS.ProcessEnv, preloads: string[]): Promise<{ ms: number; cpuMs: number; node: string }> {
  const imports = preloads.flatMap((file) => ['--import', pathToFileURL(file).href]);
  const args = [...imports, '--input-type=module', '-e', initScript(row.file)];
  // cwd is the bundle's folder, as /var/task is on Lambda: nothing outside the bundle can be resolved from there.
  const result = await execFileAsync(NODE, args, { env, cwd: join(row.file, '..'), timeout: 60_000 }).catch(
    (err: { code?: number | string; stdout?: string; stderr?: string }) => {
      throw new Error(`${row.id}: loading its bundle failed (exit ${err.code})\n${err.stderr ?? ''}${err.stdout ?? ''}`);
    },
  );
  const line = /^INIT (.*)$/m.exec(result.stdout);
  if (!line) throw new Error(`${row.id}: no init time reported\n${result.stderr}${result.stdout}`);
  return JSON.parse(line[1]!) as { ms: number; cpuMs: number; node: string };
}

/**
 * The init time of every bundle, BENCH_INIT_RUNS fresh processes each. Runs are sequential (parallel processes
 * would measure the machine's contention) and round-robin over the handlers (round 1 of each, then round 2 …), so a
 * burst of other work on the machine lands on all handlers alike instead of on one handler's every run. The median
 * is the figure; the max shows how noisy the machine was. Returns the Node version the processes ran.
 */
async function measureInit(rows: Row[], preloads: string[]): Promise<string> {
  const runs = new Map<HandlerId, number[]>(rows.map((r) => [r.id, []]));
  const cpu = new Map<HandlerId, number[]>(rows.map((r) => [r.id, []]));
  const envs = new Map(rows.map((r) => [r.id, lambdaEnvironment(FUNCTIONS.find((f) => f.id === r.id)!)]));
  let node = '';
  for (let round = 0; round < INIT_RUNS; round++) {
    maxLoad = Math.max(maxLoad, loadavg()[0]!);
    for (const row of rows) {
      const once = await initOnce(row, envs.get(row.id)!, preloads);
      runs.get(row.id)!.push(once.ms);
      cpu.get(row.id)!.push(once.cpuMs);
      node = once.node;
    }
  }
  for (const row of rows) {
    const times = runs.get(row.id)!;
    row.init = { runs: times, medianMs: median(times), maxMs: Math.max(...times), cpuMedianMs: median(cpu.get(row.id)!) };
  }
  return node;
}

// --- Report ----------------------------------------------------------------------------------------------------

/** The highest 1-minute load average seen at the start of an init round. */
let maxLoad = 0;

const meetsInit = (r: Row) => r.init !== undefined && r.init.medianMs <= TARGET.initMs;
const meetsSize = (r: Row) => r.initLoaded.raw <= TARGET.bundleBytes;

function targetLine(rows: Row[]): string {
  const list = (xs: Row[]) => (xs.length ? xs.map((r) => r.id).join(', ') : 'none');
  return (
    `Target (issues 17 and 32): init ≤ ${TARGET.initMs} ms (median) and the code loaded at init ≤ 1 MB (${kb(TARGET.bundleBytes)}) minified. ` +
    `Meeting both: ${list(rows.filter((r) => meetsInit(r) && meetsSize(r)))}. ` +
    `Init within target: ${list(rows.filter(meetsInit))}. Size within target: ${list(rows.filter(meetsSize))}.`
  );
}

const weights = (list: Array<[string, number]>) => list.map(([name, bytes]) => `${name} ${kb(bytes)}`).join(', ');

function section(rows: Row[], initNode: string): string {
  const [load1] = loadavg();
  return [
    HEADING,
    '',
    'Each Lambda handler bundled exactly as the stack bundles it (`lib/bundling.ts`: esbuild, ESM, minified, ' +
      `target ${HANDLER_BUNDLE.target}, external source map without sources, nothing external — the AWS SDK is inside).`,
    '',
    'Reproduce with:',
    '',
    '```sh',
    'npm run bundle-size',
    '```',
    '',
    `Measured ${new Date().toISOString().slice(0, 10)} with esbuild ${esbuildVersion} on Node ${process.versions.node}.`,
    '',
    '"Loaded at init" is what a cold start loads: `index.mjs` and the chunks it imports statically (files in ' +
      'brackets), with their gzip size and their source maps (which Node reads with each module it loads). "Loaded on ' +
      'first use" are the chunks reached only through a dynamic `import()`: a call that needs one loads it then (the ' +
      "agent's JSON Schema validator and MCP client, lambdas/agent/on-demand.ts; the AWS SDK's own credential " +
      'providers other than the environment’s). The deployment package is every file, maps included.',
    '',
    '| Handler | Entry | Loaded at init | gzip | maps | Loaded on first use | Deployment package (≈ zip) | init (median / max ms) | init CPU (median ms) |',
    '|---|---|---:|---:|---:|---:|---:|---:|---:|',
    ...rows.map(
      (r) =>
        `| ${r.id} | \`${r.entry}\` | ${kb(r.initLoaded.raw)} (${r.initLoaded.count}) | ${kb(r.initLoaded.gzip)} | ${kb(r.initLoaded.map)} | ` +
        `${kb(r.lazy.raw)} (${r.lazy.count}) | ${kb(r.packageZip)} | ` +
        `${r.init ? `${ms(r.init.medianMs)} / ${ms(r.init.maxMs)}` : '–'} | ${r.init ? ms(r.init.cpuMedianMs) : '–'} |`,
    ),
    '',
    targetLine(rows),
    '',
    `Init: from just before \`import()\` of the bundle to the import resolved with a \`handler\` function, in ` +
      `${INIT_RUNS} fresh \`node\` processes per handler (Node ${initNode}), with the function's deployed environment ` +
      `(\`NODE_OPTIONS=${LAMBDA_NODE_OPTIONS}\` included) and no network. Only our module’s load: it excludes Lambda’s ` +
      'own runtime start (starting Node, the runtime interface client) and the download of the package. Each process ' +
      'first loads, before the clock starts, what the runtime interface client has loaded when it imports a handler: ' +
      '`node:http` and the keep-alive Agent it reaches the Runtime API with (the client creates it before loading the ' +
      'handler; in Node 22 that import alone takes ~40 ms, as it loads Node’s internal undici) — nothing else. ' +
      '"init CPU" is the CPU time of the same span (all threads of the process): it varies far less than the elapsed ' +
      `time when the machine is busy. Measured on this machine (${cpus().length} CPUs, load average ` +
      `${load1!.toFixed(1)} when the report was written, at most ${maxLoad.toFixed(1)} during the init runs); Lambda ` +
      'allots CPU in proportion to memory size, so the same load can take longer there, especially at 256 MB.',
    '',
    'Heaviest packages in what each cold start loads (minified bytes):',
    '',
    ...rows.map((r) => `- ${r.id}: ${weights(r.initLoaded.heaviest.slice(0, 5))}`),
    '',
    'Loaded on first use, heaviest packages (minified bytes), and the project modules loaded on demand:',
    '',
    ...rows.map(
      (r) =>
        `- ${r.id}: ${weights(r.lazy.heaviest.slice(0, 6))}` +
        (r.lazyEntries.length ? `; on demand: ${r.lazyEntries.map((file) => `\`${file}\``).join(', ')}` : ''),
    ),
    '',
  ].join('\n');
}

const outdir = mkdtempSync(join(tmpdir(), 'bundle-size-'));
try {
  const rows: Row[] = [];
  for (const { id, entry } of bundledHandlers()) rows.push(await measureSize(id, entry, outdir));
  const initNode = await measureInit(rows, await buildPreloads(outdir));
  const text = section(rows, initNode);
  console.log(text);
  writeBenchmarkSection(HEADING, text);
  console.log(`Written to ${BENCHMARKS_DOC.slice(PROJECT_ROOT.length + 1)}`);
} finally {
  rmSync(outdir, { recursive: true, force: true });
}
