import { RE2JS } from 're2js';

/**
 * The limits on `outputFormat.schema` (docs/contract.md), checked before anything is compiled or admitted: a schema
 * arrives with a token that may have no budget at all, so what it may cost the gateway is bounded by its text alone.
 * Measured on 2 cores (test/agent/structured-output.test.ts, "the worst cases at the limits"): the worst schemas
 * these limits let through are checked and compiled in tens of milliseconds, and validate an answer of 8,192 output
 * tokens in tens of milliseconds more.
 */
export const SCHEMA_LIMITS = {
  /** Size of the schema as JSON, in UTF-8 bytes. */
  maxBytes: 32_768,
  /** Nesting of objects and arrays: the schema itself is depth 1. */
  maxDepth: 32,
  /** Object members and array items anywhere in the schema (keywords, property names, `enum` values…). */
  maxKeywords: 1_000,
  /** Instructions of one `pattern` (or `patternProperties` key) once compiled by RE2: what matching costs per character. */
  maxPatternSize: 250,
  /**
   * Instructions of all the schema's patterns together: each place a pattern stands counts, and, once `$ref`s are
   * expanded, each place a `$ref` brings it. What matching one string of the answer may cost per character.
   */
  maxPatternsSize: 300,
  /**
   * Keywords once every `$ref` is replaced by what it points at: what validating one value of the answer may cost.
   * `$ref`s that share a definition multiply (a chain of `anyOf: [{$ref: next}, {$ref: next}]` doubles at each step).
   */
  maxExpandedKeywords: 2_000,
} as const;

/** Where a refused schema's message points: `options.outputFormat.schema.properties.a.pattern`. */
export const SCHEMA_PATH = 'options.outputFormat.schema';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
type Obj = { [key: string]: Json };

/** Keywords whose value is one subschema, applied to the same value or to its members. */
const ONE = new Set([
  'additionalProperties',
  'propertyNames',
  'items',
  'contains',
  'not',
  'if',
  'then',
  'else',
  'unevaluatedItems',
  'unevaluatedProperties',
  'additionalItems',
]);
/** Keywords whose value is an object of subschemas. */
const MAP = new Set(['properties', 'patternProperties', '$defs', 'definitions', 'dependentSchemas', 'dependencies']);
/** Keywords whose value is an array of subschemas. */
const LIST = new Set(['allOf', 'anyOf', 'oneOf', 'prefixItems', 'items']);
/** Definitions are applied only where a `$ref` points at them: they add nothing where they stand. */
const DEFINITIONS = new Set(['$defs', 'definitions']);
/** Dynamic references resolve against the evaluation path, which the check below cannot bound: refused. */
const UNSUPPORTED = ['$dynamicRef', '$recursiveRef', '$recursiveAnchor'];

/** A schema within the limits, with its patterns as RE2 compiled them (the validator reuses them). */
export interface CheckedSchema {
  patterns: Map<string, RE2JS>;
}

/**
 * The first limit `schema` breaks, as the message of a 400, or the schema's compiled patterns when it is within all of
 * them. Cheap: one walk of the JSON for depth and size in members, one `JSON.stringify` for its bytes, one walk of its
 * subschemas (each pattern is compiled by RE2, in time linear in the pattern), and one pass over the `$ref` graph,
 * memoized: no validator is compiled.
 */
export function checkSchemaLimits(schema: Record<string, unknown>): { problem: string } | CheckedSchema {
  const L = SCHEMA_LIMITS;
  const shape = measure(schema as Json);
  if ('deepAt' in shape) return { problem: `${SCHEMA_PATH} nests deeper than ${L.maxDepth} levels at ${shape.deepAt}; at most ${L.maxDepth} are allowed` };
  if (shape.keywords > L.maxKeywords) {
    const count = shape.keywords > COUNT_UP_TO ? `more than ${n(COUNT_UP_TO)}` : n(shape.keywords);
    return { problem: `${SCHEMA_PATH} has ${count} keywords and array items; at most ${n(L.maxKeywords)} are allowed` };
  }
  const bytes = Buffer.byteLength(JSON.stringify(schema));
  if (bytes > L.maxBytes) return { problem: `${SCHEMA_PATH} is ${n(bytes)} bytes as JSON; at most ${n(L.maxBytes)} are allowed` };
  return new RefGraph(schema as Obj).checked();
}

/** `checkSchemaLimits`'s problem alone. */
export function schemaLimitProblem(schema: Record<string, unknown>): string | undefined {
  const checked = checkSchemaLimits(schema);
  return 'problem' in checked ? checked.problem : undefined;
}

/** Counting stops here: the walk of a huge schema ends as soon as the count says it is refused anyway. */
const COUNT_UP_TO = 100 * SCHEMA_LIMITS.maxKeywords;

/** Depth and members (object members and array items) of a JSON value; stops at the first value too deep. */
function measure(root: Json): { keywords: number } | { deepAt: string } {
  let keywords = 0;
  let deepAt: string | undefined;
  const walk = (v: Json, path: string, depth: number): void => {
    if (deepAt !== undefined || keywords > COUNT_UP_TO || v === null || typeof v !== 'object') return;
    if (depth > SCHEMA_LIMITS.maxDepth) {
      deepAt = path;
      return;
    }
    if (Array.isArray(v))
      for (const [i, item] of v.entries()) {
        keywords++;
        walk(item, `${path}[${i}]`, depth + 1);
      }
    else
      for (const [key, item] of Object.entries(v)) {
        keywords++;
        walk(item, child(path, key), depth + 1);
      }
  };
  walk(root, SCHEMA_PATH, 1);
  return deepAt === undefined ? { keywords } : { deepAt };
}

/**
 * The schema's subschemas and the `$ref`s between them. `$ref`s must be local (`#`, `#/json/pointer`, `#anchor`) and
 * must not make the schema recursive: with recursion, `anyOf` branches that recur on the same value multiply at every
 * level of the answer, and no limit on the schema's text bounds the validation. Without it, validating the answer costs
 * at most (keywords once expanded) × (values in the answer), and the answer is bounded by the run's max output tokens.
 */
class RefGraph {
  private readonly paths = new Map<Json, string>();
  private readonly anchors = new Map<string, Json>();
  private readonly cost = new Map<Json, Cost>();
  private readonly open = new Set<Json>();
  private readonly patterns = new Map<string, RE2JS>();
  private patternsSize = 0;
  private found: string | undefined;

  constructor(private readonly root: Obj) {}

  checked(): { problem: string } | CheckedSchema {
    this.check(this.root, SCHEMA_PATH, true);
    if (this.found) return { problem: this.found };
    const total = this.expand(this.root);
    if (this.found) return { problem: this.found };
    const max = SCHEMA_LIMITS.maxExpandedKeywords;
    if (total.keywords > max) return { problem: `${SCHEMA_PATH} has more than ${n(max)} keywords once its $refs are expanded; at most ${n(max)} are allowed` };
    const most = SCHEMA_LIMITS.maxPatternsSize;
    if (total.patterns > most)
      return {
        problem: `the patterns of ${SCHEMA_PATH} compile to more than ${n(most)} RE2 instructions once its $refs are expanded; at most ${n(most)} are allowed`,
      };
    return { patterns: this.patterns };
  }

  /** The rules each subschema must follow where it stands; notes its path and anchors for `$ref`s. */
  private check(node: Json, path: string, isRoot = false): void {
    if (this.found || node === null || typeof node !== 'object' || Array.isArray(node) || this.paths.has(node)) return;
    this.paths.set(node, path);
    if ('$id' in node && !isRoot) {
      this.fail(`${child(path, '$id')}: $id is allowed only at the root of the schema`);
      return;
    }
    for (const keyword of UNSUPPORTED)
      if (keyword in node) {
        this.fail(`${child(path, keyword)}: ${keyword} is not supported`);
        return;
      }
    for (const keyword of ['$anchor', '$dynamicAnchor']) if (typeof node[keyword] === 'string') this.anchors.set(node[keyword], node);
    if ('$ref' in node) {
      const ref = node.$ref;
      if (typeof ref !== 'string' || !ref.startsWith('#')) {
        this.fail(`${child(path, '$ref')} is ${JSON.stringify(ref)}: only local references (starting with #) are allowed`);
        return;
      }
    }
    if (typeof node.pattern === 'string') this.regex(node.pattern, child(path, 'pattern'));
    const props = node.patternProperties;
    if (props && typeof props === 'object' && !Array.isArray(props))
      for (const p of Object.keys(props)) this.regex(p, child(child(path, 'patternProperties'), p));
    for (const [, sub, subPath] of subschemas(node, path, true)) this.check(sub, subPath);
  }

  private regex(pattern: string, path: string): void {
    if (this.found) return;
    const known = this.patterns.get(pattern);
    if (known) {
      this.count(known.programSize());
      return;
    }
    let compiled: RE2JS;
    try {
      compiled = RE2JS.compile(toRe2(pattern));
    } catch (err) {
      this.fail(
        `${path} ${JSON.stringify(pattern)} is not a regular expression the gateway can match in linear time (RE2 syntax: no backreferences or lookaround): ${(err as Error).message}`,
      );
      return;
    }
    const size = compiled.programSize();
    const max = SCHEMA_LIMITS.maxPatternSize;
    if (size > max) {
      this.fail(`${path} ${JSON.stringify(pattern)} compiles to ${n(size)} RE2 instructions; at most ${n(max)} are allowed`);
      return;
    }
    this.patterns.set(pattern, compiled);
    this.count(size);
  }

  /** Adds a pattern's size to the schema's; stops the check (and the compiling of patterns) past the limit. */
  private count(size: number): void {
    this.patternsSize += size;
    const most = SCHEMA_LIMITS.maxPatternsSize;
    if (this.patternsSize > most)
      this.fail(`the patterns of ${SCHEMA_PATH} compile to more than ${n(most)} RE2 instructions in all; at most ${n(most)} are allowed`);
  }

  /** What matching `node`'s own patterns costs per character of a value. */
  private patternCost(node: Obj): number {
    let cost = 0;
    if (typeof node.pattern === 'string') cost += this.patterns.get(node.pattern)?.programSize() ?? 0;
    const props = node.patternProperties;
    if (props && typeof props === 'object' && !Array.isArray(props)) for (const p of Object.keys(props)) cost += this.patterns.get(p)?.programSize() ?? 0;
    return cost;
  }

  /** Keywords applied to one value when `node` is (its own, its subschemas', and its `$ref`'s, recursively). */
  private expand(node: Json): Cost {
    if (this.found || node === null || typeof node !== 'object' || Array.isArray(node)) return { keywords: 1, patterns: 0 };
    const known = this.cost.get(node);
    if (known !== undefined) return known;
    this.open.add(node);
    const total = { keywords: ownCost(node), patterns: this.patternCost(node) };
    const add = (more: Cost) => {
      total.keywords = Math.min(SCHEMA_LIMITS.maxExpandedKeywords + 1, total.keywords + more.keywords);
      total.patterns = Math.min(SCHEMA_LIMITS.maxPatternsSize + 1, total.patterns + more.patterns);
    };
    for (const [keyword, sub] of subschemas(node, '', false)) if (!DEFINITIONS.has(keyword)) add(this.expand(sub));
    if (typeof node.$ref === 'string') {
      const path = this.paths.get(node) ?? SCHEMA_PATH;
      const target = this.resolve(node.$ref);
      if (target === undefined || target === null || (typeof target !== 'object' && typeof target !== 'boolean') || Array.isArray(target))
        this.fail(`${child(path, '$ref')} ${JSON.stringify(node.$ref)} points at no subschema of the schema`);
      else if (this.open.has(target))
        this.fail(`${child(path, '$ref')} ${JSON.stringify(node.$ref)} points back at a schema that contains it: recursive schemas are not allowed`);
      else {
        if (typeof target === 'object') this.check(target, pointerPath(node.$ref));
        add(this.expand(target));
      }
    }
    this.open.delete(node);
    this.cost.set(node, total);
    return total;
  }

  private resolve(ref: string): Json | undefined {
    let fragment: string;
    try {
      fragment = decodeURIComponent(ref.slice(1));
    } catch {
      return undefined;
    }
    if (fragment === '') return this.root;
    if (!fragment.startsWith('/')) return this.anchors.get(fragment);
    let at: Json | undefined = this.root;
    for (const raw of fragment.slice(1).split('/')) {
      const key = raw.replaceAll('~1', '/').replaceAll('~0', '~');
      if (at === null || typeof at !== 'object') return undefined;
      at = Array.isArray(at) ? at[Number(key)] : Object.hasOwn(at, key) ? at[key] : undefined;
    }
    return at;
  }

  private fail(message: string): void {
    this.found ??= message;
  }
}

/**
 * What `node`'s own keywords cost on one value: one per keyword, plus one per member of the values that are not
 * subschemas (an `enum` of 900 values is compared 900 times), plus one per property name of a map of subschemas.
 */
function ownCost(node: Obj): number {
  let cost = 1;
  for (const [keyword, value] of Object.entries(node)) {
    cost++;
    if (value === null || typeof value !== 'object' || ONE.has(keyword) || (Array.isArray(value) && LIST.has(keyword))) continue;
    if (MAP.has(keyword)) cost += Object.keys(value).length;
    else cost += members(value);
  }
  return cost;
}

function members(v: Json): number {
  if (v === null || typeof v !== 'object') return 0;
  let count = 0;
  for (const item of Array.isArray(v) ? v : Object.values(v)) count += 1 + members(item);
  return count;
}

/** What applying a subschema to one value costs: keywords checked, and RE2 instructions run per character. */
interface Cost {
  keywords: number;
  patterns: number;
}

/** The subschemas `node` holds, with their paths (paths are built only when asked for). */
function* subschemas(node: Obj, path: string, withPaths: boolean): Generator<[string, Json, string]> {
  for (const [keyword, value] of Object.entries(node)) {
    if (value === null || typeof value !== 'object') continue;
    const at = withPaths ? child(path, keyword) : '';
    if (Array.isArray(value)) {
      if (LIST.has(keyword)) for (const [i, sub] of value.entries()) yield [keyword, sub, withPaths ? `${at}[${i}]` : ''];
    } else if (MAP.has(keyword)) {
      for (const [name, sub] of Object.entries(value))
        if (sub !== null && typeof sub === 'object' && !Array.isArray(sub)) yield [keyword, sub, withPaths ? child(at, name) : ''];
    } else if (ONE.has(keyword)) yield [keyword, value, at];
  }
}

/**
 * JSON Schema patterns are ECMAScript regexes; RE2 writes a code point `\x{…}` where ECMAScript writes `\uXXXX` or
 * `\u{…}`. Everything else RE2 accepts means the same (classes, quantifiers, `\d`, `\w`, `\p{…}`, anchors without
 * the multiline flag); what it refuses (backreferences, lookaround, `\c`) is what makes matching nonlinear.
 */
export function toRe2(pattern: string): string {
  return pattern.replace(/\\(?:u\{([0-9a-fA-F]+)\}|u([0-9a-fA-F]{4})|([\s\S]))/g, (whole, braced?: string, four?: string) =>
    braced !== undefined || four !== undefined ? `\\x{${braced ?? four}}` : whole,
  );
}

function child(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

function pointerPath(ref: string): string {
  if (ref === '#') return SCHEMA_PATH;
  if (!ref.startsWith('#/')) return `${SCHEMA_PATH} (${ref})`;
  return ref
    .slice(2)
    .split('/')
    .reduce((path, raw) => child(path, raw.replaceAll('~1', '/').replaceAll('~0', '~')), SCHEMA_PATH);
}

function n(value: number): string {
  return value.toLocaleString('en-US');
}
