import { readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { build } from 'esbuild';
import ts from 'typescript';
import { esbuildOptions, PROJECT_ROOT } from '../../lib/bundling.ts';

/**
 * What a deployed function's code can read and send, found in the source files of its bundle: the cross-checks of
 * test/lib/deployed-access.test.ts read these instead of a hand-kept list per function.
 */

/**
 * The files under lambdas/ that esbuild puts in the bundle of `entry`: every output file's, index.mjs and the chunks
 * loaded on first use alike (the metafile's inputs are those of the whole build; nothing is written).
 */
export async function bundledSources(entry: string): Promise<string[]> {
  const result = await build({
    ...esbuildOptions(join(PROJECT_ROOT, entry), join(PROJECT_ROOT, 'cdk.out', 'unused')),
    write: false,
    metafile: true,
    minify: false,
    sourcemap: false,
  });
  return Object.keys(result.metafile.inputs)
    .filter((path) => path.startsWith('lambdas/'))
    .sort();
}

/** One read of the environment found in a file. */
export type EnvRead =
  /** `env().NAME`, `const { NAME } = env()`, `const e = env(); e.NAME`, or `process.env.NAME`. */
  | { readonly kind: 'key'; readonly key: string; readonly via: 'env()' | 'process.env'; readonly file: string }
  /** `env()[expression]` (or `e[expression]` of `const e = env()`): which key is only known at run time. */
  | { readonly kind: 'dynamic'; readonly file: string; readonly text: string }
  /** Any other use of env() or process.env: the scan cannot say what it reads. */
  | { readonly kind: 'unrecognised'; readonly file: string; readonly text: string; readonly line: number };

const ENV_MODULE = 'lambdas/config/env.ts';

const sourceCache = new Map<string, ts.SourceFile>();
function sourceOf(file: string): ts.SourceFile {
  let source = sourceCache.get(file);
  if (!source) {
    source = ts.createSourceFile(file, readFileSync(join(PROJECT_ROOT, file), 'utf8'), ts.ScriptTarget.Latest, true);
    sourceCache.set(file, source);
  }
  return source;
}

function walk(node: ts.Node, visit: (node: ts.Node) => void): void {
  visit(node);
  node.forEachChild((child) => walk(child, visit));
}

/** Whether `file` binds the name `env` to lambdas/config/env.ts's env (imported, or declared there). */
function importsEnv(source: ts.SourceFile, file: string): boolean {
  if (file === ENV_MODULE) return true;
  return source.statements.some(
    (s) =>
      ts.isImportDeclaration(s) &&
      ts.isStringLiteral(s.moduleSpecifier) &&
      /(^|\/)config\/env\.ts$|^\.\/env\.ts$/.test(s.moduleSpecifier.text) &&
      s.importClause?.namedBindings !== undefined &&
      ts.isNamedImports(s.importClause.namedBindings) &&
      s.importClause.namedBindings.elements.some((e) => e.name.text === 'env' && (e.propertyName?.text ?? 'env') === 'env'),
  );
}

/** Every read of the environment in `file` (a path relative to the repository root). */
export function envReads(file: string): EnvRead[] {
  const source = sourceOf(file);
  const reads: EnvRead[] = [];
  const unrecognised = (node: ts.Node) =>
    reads.push({
      kind: 'unrecognised',
      file,
      text: node.getText(source),
      line: source.getLineAndCharacterOfPosition(node.getStart(source)).line + 1,
    });
  const keysOfBinding = (pattern: ts.ObjectBindingPattern, at: ts.Node) => {
    for (const element of pattern.elements) {
      const name = element.propertyName ?? element.name;
      if (element.dotDotDotToken || !(ts.isIdentifier(name) || ts.isStringLiteral(name))) unrecognised(at);
      else reads.push({ kind: 'key', key: name.text, via: 'env()', file });
    }
  };
  /** What `value` (an env() call, or a variable holding its result) is used for. */
  const classify = (value: ts.Expression, name: string) => {
    const parent = value.parent;
    if (ts.isPropertyAccessExpression(parent) && parent.expression === value) {
      reads.push({ kind: 'key', key: parent.name.text, via: 'env()', file });
    } else if (ts.isElementAccessExpression(parent) && parent.expression === value) {
      if (ts.isStringLiteral(parent.argumentExpression)) reads.push({ kind: 'key', key: parent.argumentExpression.text, via: 'env()', file });
      else reads.push({ kind: 'dynamic', file, text: `${name}[${parent.argumentExpression.getText(source)}]` });
    } else if (ts.isVariableDeclaration(parent) && parent.initializer === value && ts.isObjectBindingPattern(parent.name)) {
      keysOfBinding(parent.name, parent);
    } else if (ts.isVariableDeclaration(parent) && parent.initializer === value && ts.isIdentifier(parent.name) && name === 'env()') {
      // `const config = env()`: every use of `config` in the scope that declares it.
      const variable = parent.name.text;
      const scope = ts.findAncestor(parent, (n) => ts.isBlock(n) || ts.isSourceFile(n))!;
      walk(scope, (node) => {
        if (ts.isIdentifier(node) && node.text === variable && node !== parent.name) {
          if (ts.isPropertyAccessExpression(node.parent) && node.parent.name === node) return; // `x.config`
          if (ts.isPropertyAssignment(node.parent) && node.parent.name === node) return; // `{ config: … }`
          if (ts.isBindingElement(node.parent) && node.parent.propertyName === node) return; // `{ config: x } = …`
          classify(node, variable);
        }
      });
    } else {
      unrecognised(parent);
    }
  };
  const usesEnv = importsEnv(source, file);
  walk(source, (node) => {
    // env() of lambdas/config/env.ts
    if (usesEnv && ts.isIdentifier(node) && node.text === 'env') {
      const parent = node.parent;
      if (ts.isCallExpression(parent) && parent.expression === node) {
        if (parent.arguments.length) unrecognised(parent);
        else classify(parent, 'env()');
        return;
      }
      const declaration =
        ts.isImportSpecifier(parent) ||
        (ts.isPropertyAccessExpression(parent) && parent.name === node) ||
        ((ts.isPropertyAssignment(parent) || ts.isPropertySignature(parent) || ts.isPropertyDeclaration(parent)) && parent.name === node) ||
        (file === ENV_MODULE && ts.isVariableDeclaration(parent) && parent.name === node);
      if (!declaration) unrecognised(parent);
    }
    // process.env
    if (ts.isPropertyAccessExpression(node) && ts.isIdentifier(node.expression) && node.expression.text === 'process' && node.name.text === 'env') {
      const parent = node.parent;
      if (ts.isPropertyAccessExpression(parent) && parent.expression === node) reads.push({ kind: 'key', key: parent.name.text, via: 'process.env', file });
      else if (file === ENV_MODULE && ts.isCallExpression(parent) && parent.getText(source) === 'EnvSchema.parse(process.env)')
        return; // the schema itself
      else unrecognised(parent);
    }
  });
  return reads;
}

/**
 * The keys of lambdas/config/env.ts's schema (`EnvSchema = z.object({...})`), each with whether it has a
 * `.default(…)`: a key with a default is never missing, whatever the stack sets.
 */
export function envSchemaKeys(): Map<string, { readonly hasDefault: boolean }> {
  const source = sourceOf(ENV_MODULE);
  const keys = new Map<string, { hasDefault: boolean }>();
  walk(source, (node) => {
    if (!ts.isVariableDeclaration(node) || !ts.isIdentifier(node.name) || node.name.text !== 'EnvSchema') return;
    const call = node.initializer;
    const shape = call && ts.isCallExpression(call) ? call.arguments[0] : undefined;
    if (!shape || !ts.isObjectLiteralExpression(shape)) throw new Error(`${ENV_MODULE}: EnvSchema is no longer z.object({...}); update the scan`);
    for (const property of shape.properties) {
      if (!ts.isPropertyAssignment(property) || !ts.isIdentifier(property.name)) throw new Error(`${ENV_MODULE}: unexpected EnvSchema member`);
      let hasDefault = false;
      walk(property.initializer, (n) => {
        if (ts.isPropertyAccessExpression(n) && n.name.text === 'default') hasDefault = true;
      });
      keys.set(property.name.text, { hasDefault });
    }
  });
  if (!keys.size) throw new Error(`${ENV_MODULE}: no EnvSchema found; update the scan`);
  return keys;
}

/**
 * The queues `file` sends to, by name: `queue.send('turn', …)`, `sendToDeadLetter('webhook', …)` (a dead-letter
 * send) and `deliverAt({ queue: 'run', … })`, the forms lambdas/ hands a message to a queue with.
 */
export function queueSends(file: string): Array<{ readonly queue: string; readonly deadLetter: boolean }> {
  const source = sourceOf(file);
  const sends: Array<{ queue: string; deadLetter: boolean }> = [];
  walk(source, (node) => {
    if (!ts.isCallExpression(node)) return;
    const callee = node.expression;
    const name = ts.isPropertyAccessExpression(callee) ? callee.name.text : ts.isIdentifier(callee) ? callee.text : undefined;
    const first = node.arguments[0];
    if ((name === 'send' || name === 'sendToDeadLetter') && first && ts.isStringLiteral(first)) {
      sends.push({ queue: first.text, deadLetter: name === 'sendToDeadLetter' });
    }
    if (name === 'deliverAt' && first && ts.isObjectLiteralExpression(first)) {
      for (const p of first.properties) {
        if (ts.isPropertyAssignment(p) && ts.isIdentifier(p.name) && p.name.text === 'queue' && ts.isStringLiteral(p.initializer)) {
          sends.push({ queue: p.initializer.text, deadLetter: false });
        }
      }
    }
  });
  return sends;
}

/**
 * Every `new XCommand(` of the AWS SDK under lambdas/, by command name, and every write the store wire sends
 * (store/wire.ts, `.write('UpdateItem', …)`) as the command it stands for (`UpdateItemCommand`).
 */
export function sdkCommands(files: readonly string[]): Set<string> {
  const commands = new Set<string>();
  for (const file of files) {
    walk(sourceOf(file), (node) => {
      if (ts.isNewExpression(node) && ts.isIdentifier(node.expression) && /Command$/.test(node.expression.text)) commands.add(node.expression.text);
      if (
        ts.isCallExpression(node) &&
        ts.isPropertyAccessExpression(node.expression) &&
        node.expression.name.text === 'write' &&
        node.arguments[0] &&
        ts.isStringLiteral(node.arguments[0]) &&
        /^(UpdateItem|PutItem)$/.test(node.arguments[0].text)
      ) {
        commands.add(`${node.arguments[0].text}Command`);
      }
    });
  }
  return commands;
}

export const relativeToRoot = (path: string) => relative(PROJECT_ROOT, path);
