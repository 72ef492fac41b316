import { Ajv2020 } from 'ajv/dist/2020.js';
import type { ErrorObject } from 'ajv';

/**
 * `outputFormat: {type: "json_schema", schema}`: the final answer must be a JSON value valid against the schema.
 * Validated with Ajv (a maintained JSON Schema validator, draft 2020-12), never by hand. A schema Ajv cannot compile
 * is the caller's mistake: `compileSchema` reports it before the run starts.
 */
export type OutputCheck = (text: string) => { ok: true; value: unknown } | { ok: false; problem: string };

const ajv = new Ajv2020({ strict: false, allErrors: true });

/** Compiles the schema once per run; throws with Ajv's reason when it is not a usable JSON Schema. */
export function structuredOutputCheck(schema: Record<string, unknown>): OutputCheck {
  const validate = ajv.compile(schema);
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

/** A schema problem for a 400, or undefined when Ajv compiles it. */
export function schemaProblem(schema: Record<string, unknown>): string | undefined {
  try {
    ajv.compile(schema);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  }
}

/** Models often wrap JSON in a Markdown code fence; the value inside is what counts. */
function stripFence(text: string): string {
  const fenced = /^\s*```(?:json)?\s*\n([\s\S]*?)\n\s*```\s*$/.exec(text);
  return fenced ? fenced[1]! : text;
}

function describe(errors: ErrorObject[]): string {
  return errors
    .slice(0, 5)
    .map((e) => `${e.instancePath || '(root)'} ${e.message ?? 'is invalid'}`)
    .join('; ');
}
