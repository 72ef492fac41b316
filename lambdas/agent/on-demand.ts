/**
 * The agent's heavy modules that only some runs use, loaded on first use instead of at a cold start:
 * - `structured-output.ts` (with `schema-limits.ts`): Ajv and RE2 (re2js), ~290 KB minified, for options that carry
 *   `outputFormat.schema` (checked-options.ts, run.ts);
 * - `tools/mcp.ts`: the MCP SDK's client (with Ajv and ajv-formats, which it validates tools' output with), for a run
 *   with `mcpServers` (its loader is in run.ts, its one user: esbuild makes a chunk of every `import()` it finds in
 *   a bundled module, used or not, so a loader here would ship the MCP chunk in every bundle that checks options).
 * The bundler (lib/bundling.ts) splits each dynamic `import()` target into a chunk of its own that loading the handler
 * does not load: a run without a schema or MCP servers — and every proxied request — never parses them. Their callers
 * take the module through a loader and never import it statically (the types alone, `import type`, cost nothing).
 *
 * Each loaded module is held in a plain module-level promise, not an `instanceValue` (instance/state.ts): a module is
 * code, the same for every instance of the process, and keeps nothing tied to an instance's environment or clients
 * (structured-output.ts's compiled validators are keyed, weakly, by the caller's own schema object), so there is
 * nothing for an instance reset to forget. Node keeps an imported module for the process's life anyway; the promise
 * spares each later call the resolution. A load that failed (a chunk that could not be read) is forgotten, so the next
 * run tries again rather than failing for the instance's life.
 */

export function onFirstUse<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () =>
    (loading ??= load().catch((err: unknown) => {
      loading = undefined;
      throw err;
    }));
}

/** The JSON Schema check of `outputFormat` (structured-output.ts): the schema's limits, Ajv, RE2. */
export const structuredOutput = onFirstUse(() => import('./structured-output.ts'));
