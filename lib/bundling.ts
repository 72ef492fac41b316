import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BuildOptions } from 'esbuild';
import { FUNCTIONS, type FunctionId } from '../lambdas/handlers/manifest.ts';

/**
 * How every Lambda handler is bundled — one description shared by the stack (NodejsFunction), the bundle-size
 * benchmark and the cold-import test, so the three always build the same artefact. Plain data: no CDK import, so
 * the benchmark and tests load it without loading aws-cdk-lib.
 */

/** The repository root (this file lives in `lib/`). */
export const PROJECT_ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');

export const HANDLER_BUNDLE = {
  format: 'esm',
  target: 'node22',
  platform: 'node',
  minify: true,
  sourcemap: true,
  /**
   * Maps without the sources' text: stack traces still resolve to file, line and name (NODE_OPTIONS
   * --enable-source-maps), at a fraction of the map size Lambda must load on a cold start.
   */
  sourcesContent: false,
  /** Prefer packages' ESM builds: better tree-shaking in an ESM bundle. */
  mainFields: ['module', 'main'],
  /** Lambda's ESM loader has no `require`; some bundled CommonJS dependencies call it for Node built-ins. */
  banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
  /**
   * Nothing is external, not even `@aws-sdk/*`: the bundle carries the SDK versions the tests ran against instead
   * of whatever the Lambda runtime ships, and a single minified file loads faster than the runtime's node_modules.
   */
  externalModules: [] as string[],
} as const;

/**
 * The Node options every function runs with (its NODE_OPTIONS), shared with the bundle-size benchmark and the
 * cold-import test so they measure what is deployed:
 * - `--enable-source-maps`: stack traces in the logs name our files and lines (the maps above).
 * - `--experimental-async-context-frame`: AsyncLocalStorage (the request's access record) without async_hooks. On
 *   Node 22 the hooks run on every promise the gateway makes, a measurable share of its CPU per request
 *   (docs/benchmarks.md, "CPU per request"); Node 24 uses the context frame by default. `npm start` runs with it too.
 */
export const LAMBDA_NODE_OPTIONS = '--enable-source-maps --experimental-async-context-frame';

/**
 * The Lambda entry points, by function id: the function manifest's entries (lambdas/handlers/manifest.ts), so the
 * stack, the benchmark and the tests bundle exactly the functions that are deployed.
 */
export const HANDLERS = Object.fromEntries(FUNCTIONS.map((f) => [f.id, f.entry])) as Readonly<Record<FunctionId, string>>;

export type HandlerId = FunctionId;

/** Absolute path of a handler's entry file. */
export function handlerEntry(id: HandlerId, root = PROJECT_ROOT): string {
  return join(root, HANDLERS[id]);
}

/** Every handler to bundle, in manifest order, with its absolute entry path. */
export function bundledHandlers(root = PROJECT_ROOT): Array<{ id: HandlerId; entry: string }> {
  return FUNCTIONS.map((f) => ({ id: f.id, entry: join(root, f.entry) }));
}

/** esbuild build options equal to what NodejsFunction runs for `entry` (esbuild's JS API spelling). */
export function esbuildOptions(entry: string, outfile: string): BuildOptions {
  return {
    entryPoints: [entry],
    outfile,
    bundle: true,
    platform: HANDLER_BUNDLE.platform,
    format: HANDLER_BUNDLE.format,
    target: HANDLER_BUNDLE.target,
    minify: HANDLER_BUNDLE.minify,
    sourcemap: HANDLER_BUNDLE.sourcemap,
    sourcesContent: HANDLER_BUNDLE.sourcesContent,
    mainFields: [...HANDLER_BUNDLE.mainFields],
    banner: { js: HANDLER_BUNDLE.banner },
    external: [...HANDLER_BUNDLE.externalModules],
    logLevel: 'error',
  };
}
