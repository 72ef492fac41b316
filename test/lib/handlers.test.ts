import { execFile } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { build, type Metafile } from 'esbuild';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TABLES } from '../../lambdas/store/tables.ts';
import { bundledHandlers, esbuildOptions, HANDLER_FILE, PROJECT_ROOT } from '../../lib/bundling.ts';

const run = promisify(execFile);
const NODE = join(PROJECT_ROOT, 'node_modules/.bin/node');
const handlers = bundledHandlers();
const outdir = mkdtempSync(join(tmpdir(), 'gateway-bundles-'));
const preload = join(outdir, 'offline-preload.mjs');

/** What the stack gives a deployed function, with stand-in values; no AWS credentials at all. */
const lambdaEnv: NodeJS.ProcessEnv = {
  PATH: process.env.PATH,
  AWS_REGION: 'eu-west-1',
  STAGE: 'test',
  NODE_OPTIONS: '--enable-source-maps --experimental-async-context-frame',
  POWERTOOLS_SERVICE_NAME: 'prompt-gateway-dev',
  POWERTOOLS_METRICS_NAMESPACE: 'PromptGateway',
  POWERTOOLS_LOG_LEVEL: 'INFO',
  PROVIDER_KEYS_KMS_KEY_ID: 'arn:aws:kms:eu-west-1:123456789012:key/00000000-0000-0000-0000-000000000000',
  ANTHROPIC_API_KEY_SECRET_ARN: 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:anthropic-AbCdEf',
  ...Object.fromEntries(TABLES.map((spec) => [spec.envVar, `test-${spec.id}`])),
};

/** Each handler's build, by id: what each output file holds and imports. */
const metafiles = new Map<string, Metafile>();

beforeAll(async () => {
  await Promise.all([
    // The handlers exactly as the stack bundles them (lib/bundling.ts): a folder each, index.mjs and its chunks.
    ...handlers.map(async ({ id, entry }) => metafiles.set(id, (await build({ ...esbuildOptions(entry, join(outdir, id)), metafile: true })).metafile)),
    build({
      entryPoints: [join(PROJECT_ROOT, 'test/lib/offline-preload.ts')],
      outfile: preload,
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node22',
      logLevel: 'error',
    }),
  ]);
}, 120_000);

afterAll(() => rmSync(outdir, { recursive: true, force: true }));

/** Runs an ES module script in a fresh Node with the function's environment and the runtime client's preload. */
async function inLambdaNode(script: string): Promise<{ stdout: string; stderr: string }> {
  return run(NODE, ['--import', pathToFileURL(preload).href, '--input-type=module', '-e', script], { env: lambdaEnv, cwd: outdir, timeout: 30_000 }).catch(
    (err: { code?: number; stdout?: string; stderr?: string }) => {
      throw new Error(`exit ${err.code}\n${err.stderr ?? ''}${err.stdout ?? ''}`);
    },
  );
}

describe('handler bundles', () => {
  it('cover the channeling and conjure handlers', () => {
    expect(handlers.map((h) => h.id)).toEqual(expect.arrayContaining(['Channeling', 'ConjureApi']));
  });

  it.each([
    ['a socket', "import net from 'node:net'; net.connect(443, '192.0.2.1');"],
    ['a DNS lookup', "import { lookup } from 'node:dns'; lookup('example.com', () => {});"],
    ['fetch', "await fetch('https://example.com').catch(() => {});"],
  ])(
    'the guard itself works: %s at import fails the process',
    async (_what, code) => {
      const probe = join(outdir, `probe-${Math.random().toString(36).slice(2)}.mjs`);
      writeFileSync(probe, code);
      const result = await run(NODE, ['--import', pathToFileURL(preload).href, probe], { env: lambdaEnv, timeout: 30_000 }).then(
        () => ({ code: 0, stderr: '' }),
        (err: { code?: number; stderr?: string }) => ({ code: err.code, stderr: err.stderr ?? '' }),
      );
      expect(result.code).not.toBe(0);
      expect(result.stderr).toMatch(/network access while importing a handler/);
    },
    60_000,
  );

  it.each(handlers.map((h) => [h.id] as const))(
    '%s initialises in a fresh Node process without touching the network',
    async (id) => {
      const bundle = pathToFileURL(join(outdir, id, HANDLER_FILE)).href;
      const script = `const m = await import(${JSON.stringify(bundle)});
if (typeof m.handler !== 'function') { console.error('the bundle exports no handler function'); process.exit(2); }`;
      const { stdout, stderr } = await inLambdaNode(script);
      expect(stderr).not.toMatch(/network access/);
      expect(stdout + stderr).not.toMatch(/Error/);
    },
    60_000,
  );
});

describe('chunks loaded on first use', () => {
  const chunksOf = (id: string) => readdirSync(join(outdir, id, 'chunks')).filter((file) => file.endsWith('.mjs'));

  it.each(['Prompt', 'VesselExecutor', 'SessionTurn'])('%s keeps the schema validator and the MCP client in chunks of their own', (id) => {
    const chunks = chunksOf(id);
    expect(chunks).toContainEqual(expect.stringMatching(/^structured-output-.*\.mjs$/));
    expect(chunks).toContainEqual(expect.stringMatching(/^mcp-.*\.mjs$/));
  });

  /** The packages in the output files a cold start loads: index.mjs and the chunks it imports statically, transitively. */
  const packagesAtInit = (id: string): Set<string> => {
    const { outputs } = metafiles.get(id)!;
    const entry = Object.keys(outputs).find((file) => join(PROJECT_ROOT, file) === join(outdir, id, HANDLER_FILE))!;
    const loaded = new Set<string>();
    const pending = [entry];
    for (let file = pending.pop(); file !== undefined; file = pending.pop()) {
      if (loaded.has(file)) continue;
      loaded.add(file);
      for (const imported of outputs[file]!.imports) if (imported.kind === 'import-statement' && !imported.external) pending.push(imported.path);
    }
    const packages = new Set<string>();
    for (const file of loaded)
      for (const input of Object.keys(outputs[file]!.inputs)) {
        const at = input.lastIndexOf('node_modules/');
        if (at < 0) continue;
        const [scope, name] = input.slice(at + 'node_modules/'.length).split('/');
        packages.add(scope!.startsWith('@') ? `${scope}/${name}` : scope!);
      }
    return packages;
  };

  it.each(handlers.map((h) => [h.id] as const))('%s: a cold start loads neither Ajv, RE2 nor the MCP SDK (lambdas/agent/on-demand.ts)', (id) => {
    const atInit = packagesAtInit(id);
    expect(atInit.size).toBeGreaterThan(0);
    for (const name of ['ajv', 'ajv-formats', 're2js', '@modelcontextprotocol/sdk']) expect(atInit.has(name), name).toBe(false);
  });

  it.each(['Prompt', 'ConjureApi'])(
    "%s: every chunk loads after the handler, in Lambda's ESM without a global require and without the network",
    async (id) => {
      // Each chunk carries the banner's own `require` (lib/bundling.ts): a bundled CommonJS module's require of a Node
      // built-in works in a chunk as in index.mjs. Loading them all runs every chunk's top level, Ajv's and the MCP
      // SDK's included.
      const files = [HANDLER_FILE, ...chunksOf(id).map((file) => `chunks/${file}`)].map((file) => pathToFileURL(join(outdir, id, file)).href);
      const script = `for (const file of ${JSON.stringify(files)}) await import(file);
console.log('LOADED ' + ${files.length});`;
      const { stdout, stderr } = await inLambdaNode(script);
      expect(stdout).toContain(`LOADED ${files.length}`);
      expect(stdout + stderr).not.toMatch(/Error/);
    },
    60_000,
  );
});

describe('access log in Lambda', () => {
  it('one structured JSON line per request: method, path, status, error, request id, latency — never the token', async () => {
    const bundle = pathToFileURL(join(outdir, 'ConjureApi', HANDLER_FILE)).href;
    const token = 'eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJ4In0.c2VjcmV0LXNpZ25hdHVyZQ';
    const event = { httpMethod: 'GET', path: '/usage', headers: { authorization: `Bearer ${token}` }, body: null, isBase64Encoded: false, requestContext: {} };
    const context = {
      awsRequestId: 'req-1',
      functionName: 'conjure',
      functionVersion: '1',
      invokedFunctionArn: 'arn',
      memoryLimitInMB: '128',
      getRemainingTimeInMillis: () => 1000,
    };
    const script = `const m = await import(${JSON.stringify(bundle)});
const res = await m.handler(${JSON.stringify(event)}, { ...${JSON.stringify(context)}, getRemainingTimeInMillis: () => 1000 });
console.error('RESULT ' + JSON.stringify(res));`;
    const { stdout, stderr } = await run(NODE, ['--import', pathToFileURL(preload).href, '--input-type=module', '-e', script], {
      env: lambdaEnv,
      cwd: outdir,
      timeout: 30_000,
    });
    const result = JSON.parse(/RESULT (.*)/.exec(stderr)![1]!) as { statusCode: number; headers: Record<string, string> };
    expect(result.statusCode).toBe(401);
    const lines = stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>);
    const access = lines.filter((l) => l.message === 'request');
    expect(access).toHaveLength(1);
    expect(access[0]).toMatchObject({
      level: 'INFO',
      service: 'prompt-gateway-dev',
      method: 'GET',
      path: '/usage',
      status: 401,
      // the payload has no sub: refused before any store access (there is no store here)
      error: 'invalid_token',
      requestId: result.headers['request-id'],
      totalMs: expect.any(Number),
    });
    expect(stdout + stderr).not.toContain(token.split('.')[2]!);
  }, 60_000);
});
