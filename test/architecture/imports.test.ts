import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

/**
 * The folders of lambdas/ form layers (docs/architecture.md, "Folders form layers"): a folder imports from the folders
 * below it and never from one that imports it back, not even a type. A cycle means two folders share a concept that
 * one of them should own; the failure names the file-level imports that close it, which are what to move.
 */

const LAMBDAS = fileURLToPath(new URL('../../lambdas/', import.meta.url));

/** One import of a file from another folder: `from` imports `to` (both paths under lambdas/) at `line`. */
interface Edge {
  from: string;
  to: string;
  line: number;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/**
 * The relative imports of a source text, by TypeScript's own pre-processor: static imports, `import type`,
 * `export … from`, `import()` calls and `import('…')` types, and not the words "import … from" inside a comment or a
 * string.
 */
function relativeImports(text: string): Array<{ specifier: string; line: number }> {
  return ts
    .preProcessFile(text, true, true)
    .importedFiles.filter(({ fileName }) => fileName.startsWith('.'))
    .map(({ fileName, pos }) => ({ specifier: fileName, line: text.slice(0, pos).split('\n').length }));
}

const underLambdas = (path: string) => relative(LAMBDAS, path).split(sep).join(posix.sep);
const folderOf = (path: string) => path.split('/')[0]!;

/** Every import under lambdas/ from one folder into another. */
function crossFolderEdges(): Edge[] {
  return sourceFiles(LAMBDAS).flatMap((file) => {
    const from = underLambdas(file);
    return relativeImports(readFileSync(file, 'utf8')).flatMap(({ specifier, line }) => {
      const to = underLambdas(join(dirname(file), specifier));
      return to.startsWith('..') || folderOf(to) === folderOf(from) ? [] : [{ from, to, line }];
    });
  });
}

/** The strongly connected components of the folder graph that hold more than one folder (Tarjan's algorithm). */
function folderCycles(edges: Edge[]): string[][] {
  const next = new Map<string, Set<string>>();
  for (const { from, to } of edges) next.set(folderOf(from), (next.get(folderOf(from)) ?? new Set()).add(folderOf(to)));
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const components: string[][] = [];
  const visit = (folder: string) => {
    index.set(folder, index.size);
    low.set(folder, index.get(folder)!);
    stack.push(folder);
    for (const target of next.get(folder) ?? []) {
      if (!index.has(target)) visit(target);
      if (stack.includes(target)) low.set(folder, Math.min(low.get(folder)!, low.get(target)!));
    }
    if (low.get(folder) !== index.get(folder)) return;
    const component = stack.splice(stack.indexOf(folder));
    if (component.length > 1) components.push(component.sort());
  };
  for (const folder of [...next.keys()].sort()) if (!index.has(folder)) visit(folder);
  return components.sort((a, b) => a[0]!.localeCompare(b[0]!));
}

/** A cycle as its folders and, one a line, the imports between them. */
function describeCycle(folders: string[], edges: Edge[]): string {
  const inside = edges
    .filter((e) => folders.includes(folderOf(e.from)) && folders.includes(folderOf(e.to)))
    .sort((a, b) => a.from.localeCompare(b.from) || a.line - b.line)
    .map((e) => `  ${e.from}:${e.line} → ${e.to}`);
  return [`cycle among ${folders.join(', ')}:`, ...inside].join('\n');
}

describe('the folders of lambdas/', () => {
  it('every kind of import is read, none in a comment or a string', () => {
    const text = [
      "import { a } from './a.ts';",
      "import type { B } from '../b/b.ts';",
      'import {',
      '  c,',
      "} from '../c/c.ts';",
      "export { d } from '../d/d.ts';",
      "export type * from '../e/e.ts';",
      "const f = () => import('../f/f.ts');",
      "type G = import('../g/g.ts').G;",
      "import { z } from 'zod';",
      "// import { h } from '../h/h.ts';",
      'const i = "import { i } from \'../i/i.ts\'";',
    ].join('\n');
    expect(relativeImports(text)).toEqual([
      { specifier: './a.ts', line: 1 },
      { specifier: '../b/b.ts', line: 2 },
      { specifier: '../c/c.ts', line: 5 },
      { specifier: '../d/d.ts', line: 6 },
      { specifier: '../e/e.ts', line: 7 },
      { specifier: '../f/f.ts', line: 8 },
      { specifier: '../g/g.ts', line: 9 },
    ]);
    // A reader that found nothing would find no cycle either: it sees imports the code is known to have.
    const edges = crossFolderEdges();
    expect(edges).toContainEqual(expect.objectContaining({ from: 'metering/call.ts', to: 'providers/index.ts' }));
    expect(edges.some((e) => e.from.startsWith('handlers/') && folderOf(e.to) === 'http')).toBe(true);
  });

  it('a cycle is found with all its imports, however long', () => {
    const edges = [
      { from: 'a/x.ts', to: 'b/y.ts', line: 1 },
      { from: 'b/y.ts', to: 'c/z.ts', line: 2 },
      { from: 'c/z.ts', to: 'a/w.ts', line: 3 },
      { from: 'c/z.ts', to: 'd/v.ts', line: 4 },
      { from: 'e/u.ts', to: 'a/x.ts', line: 5 },
    ];
    expect(folderCycles(edges)).toEqual([['a', 'b', 'c']]);
    expect(describeCycle(['a', 'b', 'c'], edges)).toBe('cycle among a, b, c:\n  a/x.ts:1 → b/y.ts\n  b/y.ts:2 → c/z.ts\n  c/z.ts:3 → a/w.ts');
    expect(folderCycles(edges.slice(0, 2))).toEqual([]);
  });

  it('import each other without a cycle', () => {
    const edges = crossFolderEdges();
    expect(folderCycles(edges).map((folders) => describeCycle(folders, edges))).toEqual([]);
  });
});
