import type { ErrorObject, KeywordDefinition, ValidateFunction } from 'ajv';
import type { RegExpEngine } from 'ajv/dist/types/index.js';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { RE2JS } from 're2js';
import stringify from 'safe-stable-stringify';
import { checkSchemaLimits, toRe2 } from './schema-limits.ts';

/**
 * `outputFormat: {type: "json_schema", schema}`: the final answer must be a JSON value valid against the schema.
 * Validated with Ajv (a maintained JSON Schema validator, draft 2020-12), never by hand. A schema outside the limits
 * (schema-limits.ts) or that Ajv cannot compile is the caller's mistake: `schemaProblem` reports it before the run
 * is admitted.
 *
 * Each schema is compiled by an Ajv instance of its own, dropped with the run: an Ajv instance keeps every schema it
 * compiled (and registers its `$id`) for its lifetime, so one shared instance grew without bound and let one tenant's
 * `$id` collide with, or be `$ref`ed by, another's. Creating an instance without its meta-schema costs ~0.1 ms;
 * compiling the draft 2020-12 meta-schema costs ~20 ms, so that is done once, by `metaAjv`, which only validates
 * schemas as data and never compiles or keeps a caller's schema.
 *
 * Validation is bounded. `inlineRefs: false` compiles each `$ref`ed subschema once, as a function of its own, so
 * compilation is linear in the schema (inlining copied a shared definition at each use: exponential in a chain).
 * Patterns run on RE2 (re2js), whose matching is linear in the string whatever the pattern (the ECMAScript engine
 * backtracks: `^(a+)+$` took 39 s on 29 characters). `uniqueItems` and `enum` are checked by hashing each item's canonical JSON,
 * linear where Ajv compares every pair of items (or every allowed value). With `allErrors: false`, a failing answer stops at its first error
 * (all errors of a large answer against a large schema could be millions of objects). And the limits forbid
 * recursive `$ref`s and bound the keywords applied to any one value (`maxExpandedKeywords`), so validating an answer
 * costs at most that bound times the values in the answer, and the answer is bounded by the run's max output tokens.
 */
export type OutputCheck = (text: string) => { ok: true; value: unknown } | { ok: false; problem: string };

const metaAjv = new Ajv2020({ strict: false, allErrors: false });

/** Patterns run on RE2; the limits' check compiled each already. */
function re2(compiled: Map<string, RE2JS>): RegExpEngine {
  return Object.assign((pattern: string) => compiled.get(pattern) ?? RE2JS.compile(toRe2(pattern)), { code: 're2js' });
}

const uniqueItems: KeywordDefinition = {
  keyword: 'uniqueItems',
  type: 'array',
  schemaType: 'boolean',
  error: { message: 'must NOT have duplicate items' },
  validate: (unique: boolean, items: unknown[]) => {
    if (!unique) return true;
    const seen = new Set<string | undefined>();
    for (const item of items) {
      const key = stringify(item);
      if (seen.has(key)) return false;
      seen.add(key);
    }
    return true;
  },
};

/**
 * `enum` by lookup: Ajv compares the value with every allowed value in turn, so an array of 4,000 items against an
 * enum of 990 values made 4 million comparisons (~70 ms alone, past 100 ms on a loaded machine). Equal JSON values
 * have equal canonical JSON (keys sorted), so the allowed values are the keys of a set and a value is looked up in one
 * step. (An `enum` of objects met by an object costs that object's encoding: within the keywords × values bound.)
 */
const enumKeyword: KeywordDefinition = {
  keyword: 'enum',
  schemaType: 'array',
  error: { message: 'must be equal to one of the allowed values' },
  compile: (allowed: unknown[]) => {
    const keys = new Set(allowed.map((value) => stringify(value)));
    return (value: unknown) => keys.has(stringify(value));
  },
};

/**
 * Validators by the schema object they were compiled from: `/prompt` and `/ws` check the options (checked-options.ts)
 * and then run with the same object, which is compiled once. Weak, and by identity: an entry lives as long as its
 * request's options, and no other request can reach it (a vessel's run reads its options anew, and compiles them).
 */
const compiled = new WeakMap<object, ValidateFunction>();

/** Compiles `schema` by an Ajv instance of its own; throws with the reason when it is not a usable JSON Schema. */
function compile(schema: Record<string, unknown>): ValidateFunction {
  const known = compiled.get(schema);
  if (known) return known;
  const checked = checkSchemaLimits(schema);
  if ('problem' in checked) throw new SchemaLimitError(checked.problem);
  if (!metaAjv.validateSchema(schema)) throw new Error(`schema is invalid: ${metaAjv.errorsText(metaAjv.errors)}`);
  const ajv = new Ajv2020({
    strict: false,
    allErrors: false,
    meta: false,
    validateSchema: false,
    inlineRefs: false,
    logger: false,
    // optimize: Ajv's pass that tidies the generated code costs more to run than the code it saves.
    code: { regExp: re2(checked.patterns), optimize: false },
  });
  ajv.removeKeyword('uniqueItems');
  ajv.addKeyword(uniqueItems);
  ajv.removeKeyword('enum');
  ajv.addKeyword(enumKeyword);
  const validate = ajv.compile(schema);
  compiled.set(schema, validate);
  return validate;
}

/** A schema outside the limits: its message stands alone (it names the limit and the path). */
class SchemaLimitError extends Error {}

/** Compiles the schema once per run; throws with the reason when it is not a usable JSON Schema. */
export function structuredOutputCheck(schema: Record<string, unknown>): OutputCheck {
  const validate = compile(schema);
  return (text) => {
    let value: unknown;
    try {
      value = JSON.parse(stripFence(text));
    } catch {
      return { ok: false, problem: 'the answer is not valid JSON' };
    }
    if (validate(value)) return { ok: true, value };
    return { ok: false, problem: describe(validate.errors ?? []) };
  };
}

/**
 * A schema problem for a 400, or undefined when the schema is within the limits and compiles. The message names what
 * is wrong: a limit and where it is broken, or Ajv's reason after `options.outputFormat.schema is not a usable JSON
 * Schema`.
 */
export function schemaProblem(schema: Record<string, unknown>): string | undefined {
  try {
    compile(schema);
    return undefined;
  } catch (err) {
    if (err instanceof SchemaLimitError) return err.message;
    return `options.outputFormat.schema is not a usable JSON Schema: ${(err as Error).message}`;
  }
}

/**
 * Models often wrap JSON in a Markdown code fence (```` ```json ````, or a bare ```` ``` ````, on a line of its own, and
 * a closing ```` ``` ```` line): the value inside is what counts. By index, not by a regex: a lazy regex that looks for
 * the closing fence after every newline is quadratic on an answer of many newlines.
 */
function stripFence(text: string): string {
  const trimmed = text.trim();
  if (!trimmed.startsWith('```')) return text;
  const open = trimmed.indexOf('\n');
  const close = trimmed.lastIndexOf('\n');
  if (open < 0 || close <= open) return text;
  const info = trimmed.slice(3, open).trim();
  if ((info !== '' && info !== 'json') || trimmed.slice(close + 1).trim() !== '```') return text;
  return trimmed.slice(open + 1, close);
}

function describe(errors: ErrorObject[]): string {
  return errors
    .slice(0, 5)
    .map((e) => `${e.instancePath || '(root)'} ${e.message ?? 'is invalid'}`)
    .join('; ');
}
