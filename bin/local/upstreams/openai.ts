/**
 * Deterministic simulated OpenAI Chat Completions upstream (plain `node:http`); also answers on
 * the OpenRouter-style paths. Routes: POST /v1/chat/completions, /chat/completions,
 * /api/v1/chat/completions (JSON, or SSE with `stream: true`).
 * Behaviour is scripted by directives in the last user message, or in a scripted multi-turn conversation
 * by turn-scoped `[[N> ...]]` directives in the first one (see ./script.ts).
 */
import {
  buildReplyPlan,
  estimateInputTokens,
  openaiConversation,
  scriptConversation,
  simulatorBug,
  sendJson,
  startHttpServer,
  streamScripted,
  waitUnlessClosed,
  wordChunks,
  jsonFragments,
  type IncomingCall,
  type ReplyPlan,
} from './script.ts';
import type { SimulatedUpstream, StartUpstreamOptions } from './types.ts';

export type { SimulatedUpstream, StartUpstreamOptions, RecordedRequest } from './types.ts';

export const OPENAI_CHAT_PATHS = ['/v1/chat/completions', '/chat/completions', '/api/v1/chat/completions'] as const;

/** OpenAI error `type` / `code` for an HTTP status. */
export function openaiErrorKind(status: number): { type: string; code: string } {
  switch (status) {
    case 400:
      return { type: 'invalid_request_error', code: 'invalid_request' };
    case 401:
      return { type: 'authentication_error', code: 'invalid_api_key' };
    case 402:
      return { type: 'insufficient_quota', code: 'insufficient_quota' };
    case 403:
      return { type: 'permission_error', code: 'permission_denied' };
    case 404:
      return { type: 'not_found_error', code: 'not_found' };
    case 413:
      return { type: 'invalid_request_error', code: 'request_too_large' };
    case 429:
      return { type: 'rate_limit_error', code: 'rate_limit_exceeded' };
    default:
      return status >= 500 ? { type: 'server_error', code: 'server_error' } : { type: 'invalid_request_error', code: 'invalid_request' };
  }
}

/** `{ error: { message, type, code, param: null } }` */
export function openaiErrorBody(status: number, message?: string): { error: { message: string; type: string; code: string; param: null } } {
  const { type, code } = openaiErrorKind(status);
  return { error: { message: message ?? `Simulated upstream error (HTTP ${status})`, type, code, param: null } };
}

/** The mid-stream error chunk sent for `[[stream-error-after:N]]`. */
export const OPENAI_STREAM_ERROR_EVENT = 'data: {"error":{"message":"Upstream failure mid-stream","type":"server_error","code":"server_error"}}\n\n';

interface ToolCallOut {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number };
  completion_tokens_details: { reasoning_tokens: number };
  cost?: number;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function isNonNegInt(v: unknown): v is number {
  return typeof v === 'number' && Number.isInteger(v) && v >= 0;
}

function finishReasonOf(plan: ReplyPlan): string {
  if (plan.directives.finish !== undefined) return plan.directives.finish;
  if (plan.truncated) return 'length';
  if (plan.toolCalls.length > 0) return 'tool_calls';
  return 'stop';
}

export async function startOpenAIUpstream(opts?: StartUpstreamOptions): Promise<SimulatedUpstream> {
  let requestCounter = 0;
  let completionCounter = 0;
  let callCounter = 0;

  const handle = async ({ req, res, record, invalidJson }: IncomingCall): Promise<void> => {
    const requestId = `req_sim_${++requestCounter}`;
    const baseHeaders = { 'x-request-id': requestId };
    const fail = (status: number, message?: string): void => sendJson(res, status, openaiErrorBody(status, message), baseHeaders);

    const auth = /^Bearer\s+(\S.*)$/i.exec(record.headers.authorization ?? '');
    if (!auth) return fail(401, 'Missing or invalid Authorization bearer token');

    const { method, path } = record;
    if (!(OPENAI_CHAT_PATHS as readonly string[]).includes(path)) return fail(404, `Not found: ${method} ${path}`);
    if (method !== 'POST') return fail(405, `Method not allowed: ${method}`);
    if (invalidJson) return fail(400, 'Request body is not valid JSON');
    const body = record.body;
    if (!isRecord(body)) return fail(400, 'Request body must be a JSON object');
    if (typeof body.model !== 'string' || body.model === '') return fail(400, "Missing required parameter: 'model'.");
    if (!Array.isArray(body.messages)) return fail(400, "Missing required parameter: 'messages'.");
    for (const field of ['max_completion_tokens', 'max_tokens'] as const) {
      if (body[field] !== undefined && body[field] !== null && !isNonNegInt(body[field])) {
        return fail(400, `Invalid type for '${field}': expected an integer.`);
      }
    }
    const maxTokens = isNonNegInt(body.max_completion_tokens) ? body.max_completion_tokens : isNonNegInt(body.max_tokens) ? body.max_tokens : undefined;

    const script = scriptConversation(openaiConversation(body));
    if (script.errors.length > 0) return fail(400, script.errors.join('; '));
    const d = script.directives;
    if (d.hang) return; // never answer; close() or the client aborting ends the socket
    if (d.latencyMs !== undefined && d.latencyMs > 0 && !(await waitUnlessClosed(res, d.latencyMs))) return;
    if (d.error !== undefined) return fail(d.error);

    const plan = buildReplyPlan(script, maxTokens);
    const model = body.model;
    const id = `chatcmpl-sim-${++completionCounter}`;
    const created = Math.floor(Date.now() / 1000);
    const toolCalls: ToolCallOut[] = plan.toolCalls.map((c) => ({
      id: `call_sim_${++callCounter}`,
      type: 'function',
      function: { name: c.name, arguments: c.arguments },
    }));
    const finishReason = finishReasonOf(plan);
    // `n` choices: each the same scripted answer (the prompt is billed once, the completion once per choice).
    const choices = isNonNegInt(body.n) && body.n > 1 ? body.n : 1;
    const promptTokens = Math.max(estimateInputTokens(body), d.cacheRead);
    const usage: OpenAIUsage = {
      prompt_tokens: promptTokens,
      completion_tokens: plan.outputTokens * choices,
      total_tokens: promptTokens + plan.outputTokens * choices,
      prompt_tokens_details: { cached_tokens: d.cacheRead },
      completion_tokens_details: { reasoning_tokens: plan.reasoningTokens * choices },
    };
    if (d.cost !== undefined) usage.cost = d.cost;

    if (body.stream !== true) {
      const message: Record<string, unknown> = {
        role: 'assistant',
        content: plan.text !== '' ? plan.text : toolCalls.length > 0 ? null : '',
        refusal: null,
      };
      if (plan.reasoning !== null) {
        message.reasoning_content = plan.reasoning;
        message.reasoning = plan.reasoning;
      }
      if (toolCalls.length > 0) message.tool_calls = toolCalls;
      return sendJson(
        res,
        200,
        {
          id,
          object: 'chat.completion',
          created,
          model,
          choices: Array.from({ length: choices }, (_, index) => ({ index, message, logprobs: null, finish_reason: finishReason })),
          usage,
        },
        baseHeaders,
      );
    }

    const streamOptions = isRecord(body.stream_options) ? body.stream_options : {};
    const includeUsage = streamOptions.include_usage === true;
    const events: string[] = [];
    let choiceIndex = 0;
    const chunk = (delta: Record<string, unknown>, finish: string | null = null): void => {
      const c: Record<string, unknown> = {
        id,
        object: 'chat.completion.chunk',
        created,
        model,
        choices: [{ index: choiceIndex, delta, logprobs: null, finish_reason: finish }],
      };
      if (includeUsage) c.usage = null;
      events.push(`data: ${JSON.stringify(c)}\n\n`);
    };
    for (; choiceIndex < choices; choiceIndex++) {
      chunk({ role: 'assistant', content: '' });
      if (plan.reasoning !== null) {
        for (const w of wordChunks(plan.reasoning)) chunk({ reasoning_content: w, reasoning: w });
      }
      for (const w of wordChunks(plan.text)) chunk({ content: w });
      toolCalls.forEach((call, index) => {
        const [first = '', ...rest] = jsonFragments(call.function.arguments);
        chunk({
          tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.function.name, arguments: first } }],
        });
        for (const part of rest) chunk({ tool_calls: [{ index, function: { arguments: part } }] });
      });
      chunk({}, finishReason);
    }
    if (includeUsage) {
      events.push(`data: ${JSON.stringify({ id, object: 'chat.completion.chunk', created, model, choices: [], usage })}\n\n`);
    }
    events.push('data: [DONE]\n\n');

    await streamScripted({ req, res }, baseHeaders, events, d, OPENAI_STREAM_ERROR_EVENT);
  };

  return startHttpServer(opts, handle, simulatorBug(openaiErrorBody));
}
