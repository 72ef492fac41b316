import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { BuildOptions } from 'esbuild';
import { FUNCTIONS, type FunctionId } from '../lambdas/handlers/manifest.ts';

/**
 * How every Lambda handler is bundled — one description shared by the stack (lib/constructs/functions.ts), the
 * bundle-size benchmark and the cold-import test, so the three always build the same artefact. Plain data: no CDK
 * import, so the benchmark and tests load it without loading aws-cdk-lib.
 *
 * A handler is a folder, not one file: `index.mjs` (the entry, what Lambda loads as `index.handler`) and the chunks
 * esbuild splits off under `chunks/`. A module the code reaches only through a dynamic `import()` — the JSON Schema
 * validator, RE2 and the MCP client (lambdas/agent/on-demand.ts) — lands in a chunk of its own that a cold start does
 * not load; the run that first needs it loads it then. Code shared between the entry and such a chunk lands in a
 * chunk the entry imports statically, so what a cold start loads is index.mjs plus those (bench/bundle-size.ts).
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
  /**
   * Code splitting (ESM only): each dynamic `import()` target becomes a chunk loaded on first use. The entry is
   * `index.mjs` whatever the handler's file is called (Lambda's handler is `index.handler`); chunks go under
   * `chunks/`, named by esbuild after the module (or `chunk` for shared code) and their content's hash.
   */
  splitting: true,
  entryNames: 'index',
  chunkNames: 'chunks/[name]-[hash]',
  outExtension: '.mjs',
  /** Prefer packages' ESM builds: better tree-shaking in an ESM bundle. */
  mainFields: ['module', 'main'],
  /**
   * Lambda's ESM loader has no `require`; some bundled CommonJS dependencies call it for Node built-ins. esbuild puts
   * the banner at the top of every output file, chunks included: each is a module of its own, with its own `require`.
   */
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

/** The file Lambda loads, in a handler's output folder. */
export const HANDLER_FILE = `${HANDLER_BUNDLE.entryNames}${HANDLER_BUNDLE.outExtension}`;
/** The function's handler setting: HANDLER_FILE's `handler` export. */
export const LAMBDA_HANDLER = `${HANDLER_BUNDLE.entryNames}.handler`;

/**
 * esbuild build options for `entry`, written into the folder `outdir` (HANDLER_FILE, its map, and `chunks/`): what
 * the stack runs for each function (lib/constructs/functions.ts), in esbuild's JS API spelling.
 */
export function esbuildOptions(entry: string, outdir: string): BuildOptions {
  return {
    entryPoints: [entry],
    outdir,
    // Paths in the metafile and in messages are relative to the repository, wherever the build is started from.
    absWorkingDir: PROJECT_ROOT,
    bundle: true,
    splitting: HANDLER_BUNDLE.splitting,
    entryNames: HANDLER_BUNDLE.entryNames,
    chunkNames: HANDLER_BUNDLE.chunkNames,
    outExtension: { '.js': HANDLER_BUNDLE.outExtension },
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
