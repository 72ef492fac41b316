import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { build } from 'esbuild';
import { functionSpec, type FunctionId } from '../lambdas/handlers/manifest.ts';
import { esbuildOptions, HANDLER_FILE, LAMBDA_NODE_OPTIONS, PROJECT_ROOT } from '../lib/bundling.ts';

/**
 * The resident memory of one fresh instance of a function: its bundle, built as the stack builds it, imported in a
 * new Node process (with Lambda's NODE_OPTIONS and its `awslambda` globals), then a full GC. The local gateway's RSS
 * holds every handler, tsx and the local runtime, so it overstates what one Lambda instance holds; this does not.
 * Lambda's own runtime client (a few MB) is not in it.
 */
export interface HandlerMemory {
  /** RSS of the same process before importing the bundle: Node itself. */
  nodeRssMb: number;
  /** RSS after the import and a GC. */
  rssMb: number;
  heapUsedMb: number;
}

const execFileAsync = promisify(execFile);
const MB = 1024 * 1024;

export async function handlerMemory(id: FunctionId): Promise<HandlerMemory> {
  const dir = mkdtempSync(join(tmpdir(), 'gateway-bench-handler-'));
  try {
    const bundle = join(dir, HANDLER_FILE);
    await build(esbuildOptions(join(PROJECT_ROOT, functionSpec(id).entry), dir));
    const shim = join(dir, 'awslambda-shim.mjs');
    await build({
      stdin: {
        contents: "import { installAwsLambdaShim } from './bin/local/awslambda-shim.ts'; installAwsLambdaShim();",
        resolveDir: PROJECT_ROOT,
        loader: 'ts',
      },
      outfile: shim,
      bundle: true,
      platform: 'node',
      format: 'esm',
      logLevel: 'error',
    });
    const script = `const mb = (b) => b / ${MB};
globalThis.gc(); const before = process.memoryUsage().rss;
const mod = await import(${JSON.stringify(pathToFileURL(bundle).href)});
if (typeof mod.handler !== 'function') throw new Error('the bundle exports no handler');
globalThis.gc(); const m = process.memoryUsage();
console.log(JSON.stringify({ nodeRssMb: mb(before), rssMb: mb(m.rss), heapUsedMb: mb(m.heapUsed) }));`;
    const { stdout } = await execFileAsync(process.execPath, ['--expose-gc', '--import', pathToFileURL(shim).href, '--input-type=module', '-e', script], {
      // No credentials and nothing of this shell's: loading a handler reads no configuration (it is parsed on first use).
      env: { PATH: process.env.PATH, AWS_REGION: 'eu-west-1', NODE_OPTIONS: LAMBDA_NODE_OPTIONS },
      cwd: dir,
      timeout: 60_000,
    });
    return JSON.parse(stdout.trim().split('\n').pop()!) as HandlerMemory;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
