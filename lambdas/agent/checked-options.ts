import { env } from '../config/env.ts';
import { Refused } from '../refusals/refusal.ts';
import { routeModel } from '../routing/route.ts';
import { isServerTool, type SessionOptions } from './options.ts';
import { structuredOutput } from './on-demand.ts';

/**
 * What the schema alone cannot see in a run's options, checked before anything is admitted or queued: Anthropic
 * server tools need a Claude model, and `outputFormat.schema` must be within its limits and compile. Returns the options with the model the
 * run will use (the gateway's default when none is given); throws an `invalid_request` refusal otherwise.
 */
export async function checkedRunOptions<O extends SessionOptions>(options: O): Promise<O & { model: string }> {
  const model = options.model ?? env().DEFAULT_MODEL;
  if (options.tools?.some(isServerTool) && routeModel(model).provider !== 'anthropic') {
    throw new Refused({
      kind: 'invalid_request',
      message: `options.tools: Anthropic server tools (a tool with a "type") run only with Claude models, not ${model}`,
    });
  }
  // Within the limits (schema-limits.ts) and compiled, before admission: a token with no budget can send a schema.
  // The validator is loaded for the first run that has a schema (on-demand.ts), never for one without.
  if (options.outputFormat) {
    const problem = (await structuredOutput()).schemaProblem(options.outputFormat.schema);
    if (problem) throw new Refused({ kind: 'invalid_request', message: problem });
  }
  return { ...options, model };
}
