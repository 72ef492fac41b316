/**
 * Bundle sizes of the Lambda handlers: `npm run bundle-size`.
 *
 * Bundles every function of the manifest (lambdas/handlers/manifest.ts) with the stack's own esbuild options
 * (lib/bundling.ts), prints a table of the sizes (raw and gzip) and the packages that weigh most, and writes it into
 * docs/benchmarks.md under "## Bundle sizes" (the rest of that file is left alone).
 */
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build, version as esbuildVersion } from 'esbuild';
import { bundledHandlers, esbuildOptions, HANDLER_BUNDLE, PROJECT_ROOT } from '../lib/bundling.ts';
import { BENCHMARKS_DOC, writeBenchmarkSection } from './report.ts';

const HEADING = '## Bundle sizes';

interface Row {
  id: string;
  entry: string;
  raw: number;
  gzip: number;
  map: number;
  packageZip: number;
  heaviest: Array<[string, number]>;
}

const kb = (bytes: number) => `${(bytes / 1024).toFixed(1)} KB`;

/** `node_modules/@scope/name/...` → `@scope/name`; project files → `(project)`. */
function packageOf(input: string): string {
  const at = input.lastIndexOf('node_modules/');
  if (at < 0) return '(project)';
  const parts = input.slice(at + 'node_modules/'.length).split('/');
  return parts[0]!.startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]!;
}

async function measure(id: string, entry: string, outdir: string): Promise<Row> {
  const outfile = join(outdir, id, 'index.mjs');
  const result = await build({ ...esbuildOptions(entry, outfile), metafile: true });
  const code = readFileSync(outfile);
  const map = readFileSync(`${outfile}.map`);
  if (!result.metafile) throw new Error('esbuild returned no metafile');
  const weights = new Map<string, number>();
  for (const output of Object.values(result.metafile.outputs)) {
    for (const [input, { bytesInOutput }] of Object.entries(output.inputs)) {
      weights.set(packageOf(input), (weights.get(packageOf(input)) ?? 0) + bytesInOutput);
    }
  }
  return {
    id,
    entry: entry.slice(PROJECT_ROOT.length + 1),
    raw: code.length,
    gzip: gzipSync(code, { level: 9 }).length,
    map: map.length,
    // What Lambda stores and downloads on a cold start: the zip of index.mjs and its map (deflate ≈ gzip).
    packageZip: gzipSync(code, { level: 9 }).length + gzipSync(map, { level: 9 }).length,
    heaviest: [...weights.entries()].sort((a, b) => b[1] - a[1]).slice(0, 5),
  };
}

function section(rows: Row[]): string {
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
    '| Handler | Entry | index.mjs | gzip | index.mjs.map | Deployment package (≈ zip) |',
    '|---|---|---:|---:|---:|---:|',
    ...rows.map((r) => `| ${r.id} | \`${r.entry}\` | ${kb(r.raw)} | ${kb(r.gzip)} | ${kb(r.map)} | ${kb(r.packageZip)} |`),
    '',
    'Heaviest packages in each bundle (minified bytes):',
    '',
    ...rows.map((r) => `- ${r.id}: ${r.heaviest.map(([name, bytes]) => `${name} ${kb(bytes)}`).join(', ')}`),
    '',
  ].join('\n');
}

const outdir = mkdtempSync(join(tmpdir(), 'bundle-size-'));
try {
  const rows: Row[] = [];
  for (const { id, entry } of bundledHandlers()) rows.push(await measure(id, entry, outdir));
  const text = section(rows);
  console.log(text);
  writeBenchmarkSection(HEADING, text);
  console.log(`Written to ${BENCHMARKS_DOC.slice(PROJECT_ROOT.length + 1)}`);
} finally {
  rmSync(outdir, { recursive: true, force: true });
}
