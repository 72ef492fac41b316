/**
 * Deterministic simulated Anthropic Messages API upstream (plain `node:http`).
 *
 * Routes: POST /v1/messages (JSON or SSE with `stream: true`), POST /v1/messages/count_tokens,
 * GET /v1/models, GET /v1/models/:id. Behaviour is scripted by directives in the last user
 * message, or in a scripted multi-turn conversation by turn-scoped `[[N> ...]]` directives in the
 * first one (see ./script.ts for the directive language and the token counting rules).
 */
import {
  buildReplyPlan,
  estimateInputTokens,
  anthropicConversation,
  scriptConversation,
  simulatorBug,
  sendJson,
  startHttpServer,
  streamScripted,
  waitUnlessClosed,
  wordChunks,
  jsonFragments,
  THINKING_SIGNATURE,
  type IncomingCall,
  type ReplyPlan,
} from './script.ts';
import type { SimulatedUpstream, StartUpstreamOptions } from './types.ts';

export type { SimulatedUpstream, StartUpstreamOptions, RecordedRequest } from './types.ts';

/** Anthropic error `type` for an HTTP status. */
export function anthropicErrorType(status: number): string {
  switch (status) {
    case 400:
      return 'invalid_request_error';
    case 401:
      return 'authentication_error';
    case 402:
      return 'billing_error';
    case 403:
      return 'permission_error';
    case 404:
      return 'not_found_error';
    case 413:
      return 'request_too_large';
    case 429:
      return 'rate_limit_error';
    case 500:
      return 'api_error';
    case 504:
      return 'timeout_error';
    case 529:
      return 'overloaded_error';
    default:
      return status >= 500 ? 'api_error' : 'invalid_request_error';
  }
}

const DEFAULT_ERROR_MESSAGES: Record<string, string> = {
  invalid_request_error: 'Simulated invalid request',
  authentication_error: 'invalid x-api-key',
  billing_error: 'Simulated billing error',
  permission_error: 'Simulated permission error',
  not_found_error: 'Simulated not found',
  request_too_large: 'Request exceeds the maximum allowed number of bytes.',
  rate_limit_error: 'Simulated rate limit exceeded',
  api_error: 'Internal server error',
  timeout_error: 'Simulated timeout',
  overloaded_error: 'Overloaded',
};

/** `{ type: "error", error: { type, message } }` */
export function anthropicErrorBody(status: number, message?: string): { type: 'error'; error: { type: string; message: string } } {
  const type = anthropicErrorType(status);
  return { type: 'error', error: { type, message: message ?? DEFAULT_ERROR_MESSAGES[type] ?? 'Simulated error' } };
}

/** The mid-stream error event sent for `[[stream-error-after:N]]`. */
export const ANTHROPIC_STREAM_ERROR_EVENT = 'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n';

export const SIMULATED_ANTHROPIC_MODELS = [
  { id: 'claude-opus-4-1-20250805', display_name: 'Claude Opus 4.1', created_at: '2025-08-05T00:00:00Z' },
  { id: 'claude-sonnet-4-6', display_name: 'Claude Sonnet 4.6', created_at: '2025-09-29T00:00:00Z' },
  { id: 'claude-haiku-4-5-20251001', display_name: 'Claude Haiku 4.5', created_at: '2025-10-01T00:00:00Z' },
  { id: 'claude-3-5-haiku-20241022', display_name: 'Claude Haiku 3.5', created_at: '2024-10-22T00:00:00Z' },
] as const;

type ContentBlock =
  | { type: 'thinking'; thinking: string; signature: string }
  | { type: 'text'; text: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

interface AnthropicUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
  server_tool_use?: { web_search_requests: number };
}

function frame(type: string, data: unknown): string {
  return `event: ${type}\ndata: ${JSON.stringify(data)}\n\n`;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

export async function startAnthropicUpstream(opts?: StartUpstreamOptions): Promise<SimulatedUpstream> {
  let requestCounter = 0;
  let messageCounter = 0;
  let toolCounter = 0;

  const handle = async ({ req, res, record, invalidJson }: IncomingCall): Promise<void> => {
    const requestId = `req_sim_${++requestCounter}`;
    const baseHeaders = { 'request-id': requestId };
    const fail = (status: number, message?: string): void => sendJson(res, status, anthropicErrorBody(status, message), baseHeaders);

    // Auth: a non-empty `x-api-key`, or `Authorization: Bearer <non-empty>` (which is how
    // @anthropic-ai/sdk v1.x sends `apiKey`).
    const apiKey = record.headers['x-api-key'] ?? '';
    const bearer = /^Bearer\s+\S/i.test(record.headers.authorization ?? '');
    if (apiKey.trim() === '' && !bearer) return fail(401, 'x-api-key header is required');

    const { method, path } = record;
    if (method === 'GET' && path === '/v1/models') {
      const data = SIMULATED_ANTHROPIC_MODELS.map((m) => ({ type: 'model', ...m }));
      return sendJson(res, 200, { data, has_more: false, first_id: data[0]?.id ?? null, last_id: data[data.length - 1]?.id ?? null }, baseHeaders);
    }
    if (method === 'GET' && path.startsWith('/v1/models/')) {
      const id = decodeURIComponent(path.slice('/v1/models/'.length));
      const model = SIMULATED_ANTHROPIC_MODELS.find((m) => m.id === id);
      if (!model) return fail(404, `model: ${id}`);
      return sendJson(res, 200, { type: 'model', ...model }, baseHeaders);
    }
    const isMessages = path === '/v1/messages';
    const isCount = path === '/v1/messages/count_tokens';
    if (!isMessages && !isCount) return fail(404, `Not found: ${method} ${path}`);
    if (method !== 'POST') return fail(405, `Method not allowed: ${method}`);
    if (invalidJson) return fail(400, 'Request body is not valid JSON');

    const body = record.body;
    if (!isRecord(body)) return fail(400, 'Request body must be a JSON object');
    if (typeof body.model !== 'string' || body.model === '') return fail(400, 'model: Field required (string)');
    if (!Array.isArray(body.messages)) return fail(400, 'messages: Field required (array)');
    if (isCount) return sendJson(res, 200, { input_tokens: estimateInputTokens(body) }, baseHeaders);
    if (typeof body.max_tokens !== 'number' || !Number.isInteger(body.max_tokens) || body.max_tokens < 0) {
      return fail(400, 'max_tokens: Field required (integer)');
    }

    const script = scriptConversation(anthropicConversation(body));
    if (script.errors.length > 0) return fail(400, script.errors.join('; '));
    const d = script.directives;
    if (d.hang) return; // never answer; close() or the client aborting ends the socket
    if (d.latencyMs !== undefined && d.latencyMs > 0 && !(await waitUnlessClosed(res, d.latencyMs))) return;
    if (d.error !== undefined) return fail(d.error);

    const plan = buildReplyPlan(script, body.max_tokens);
    const model = body.model;
    const id = `msg_sim_${++messageCounter}`;
    const content: ContentBlock[] = [];
    if (plan.reasoning !== null) content.push({ type: 'thinking', thinking: plan.reasoning, signature: THINKING_SIGNATURE });
    if (plan.text !== '') content.push({ type: 'text', text: plan.text });
    for (const call of plan.toolCalls) {
      content.push({ type: 'tool_use', id: `toolu_sim_${++toolCounter}`, name: call.name, input: call.input });
    }
    const stopReason = stopReasonOf(plan);
    const estimate = estimateInputTokens(body);
    const usage: AnthropicUsage = {
      input_tokens: d.reportedInput ?? Math.max(0, estimate - d.cacheRead - d.cacheWrite),
      output_tokens: plan.outputTokens,
      cache_creation_input_tokens: d.cacheWrite,
      cache_read_input_tokens: d.cacheRead,
      ...(d.webSearches !== undefined ? { server_tool_use: { web_search_requests: d.webSearches } } : {}),
    };
    const reported = misreported(usage, d.usageMode);

    if (body.stream !== true) {
      const message = { id, type: 'message', role: 'assistant', model, content, stop_reason: stopReason, stop_sequence: null, usage: reported };
      if (reported === undefined) delete (message as { usage?: unknown }).usage;
      return sendJson(res, 200, message, baseHeaders);
    }

    await streamScripted({ req, res }, baseHeaders, streamEvents(id, model, content, stopReason, usage, d.usageMode), d, ANTHROPIC_STREAM_ERROR_EVENT);
  };

  return startHttpServer(opts, handle, simulatorBug(anthropicErrorBody));
}

/** The usage as `[[usage:MODE]]` misreports it (undefined: no usage field at all). */
function misreported(usage: AnthropicUsage, mode: 'missing' | 'absurd' | 'empty' | undefined): Record<string, unknown> | undefined {
  if (mode === 'missing') return undefined;
  if (mode === 'empty') return {};
  if (mode === 'absurd') return Object.fromEntries(Object.keys(usage).map((k) => [k, k === 'server_tool_use' ? { web_search_requests: 1e301 } : 1e301]));
  return usage as unknown as Record<string, unknown>;
}

function stopReasonOf(plan: ReplyPlan): 'end_turn' | 'tool_use' | 'max_tokens' {
  if (plan.truncated) return 'max_tokens';
  if (plan.toolCalls.length > 0) return 'tool_use';
  return 'end_turn';
}

/** Builds the framed SSE events of a streamed message (Anthropic's exact event sequence). */
function streamEvents(
  id: string,
  model: string,
  content: ContentBlock[],
  stopReason: string,
  usage: AnthropicUsage,
  usageMode?: 'missing' | 'absurd' | 'empty',
): string[] {
  const events: string[] = [];
  const startUsage = misreported(
    {
      input_tokens: usage.input_tokens,
      output_tokens: 1,
      cache_creation_input_tokens: usage.cache_creation_input_tokens,
      cache_read_input_tokens: usage.cache_read_input_tokens,
    },
    usageMode,
  );
  const finalUsage = misreported(
    {
      output_tokens: usage.output_tokens,
      input_tokens: usage.input_tokens,
      cache_creation_input_tokens: usage.cache_creation_input_tokens,
      cache_read_input_tokens: usage.cache_read_input_tokens,
      ...(usage.server_tool_use ? { server_tool_use: usage.server_tool_use } : {}),
    },
    usageMode,
  );
  events.push(
    frame('message_start', {
      type: 'message_start',
      message: {
        id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        ...(startUsage ? { usage: startUsage } : {}),
      },
    }),
  );
  events.push(frame('ping', { type: 'ping' }));
  content.forEach((block, index) => {
    const delta = (d: unknown): void => {
      events.push(frame('content_block_delta', { type: 'content_block_delta', index, delta: d }));
    };
    switch (block.type) {
      case 'thinking':
        events.push(
          frame('content_block_start', {
            type: 'content_block_start',
            index,
            content_block: { type: 'thinking', thinking: '', signature: '' },
          }),
        );
        for (const chunk of wordChunks(block.thinking)) delta({ type: 'thinking_delta', thinking: chunk });
        delta({ type: 'signature_delta', signature: block.signature });
        break;
      case 'text':
        events.push(frame('content_block_start', { type: 'content_block_start', index, content_block: { type: 'text', text: '' } }));
        for (const chunk of wordChunks(block.text)) delta({ type: 'text_delta', text: chunk });
        break;
      case 'tool_use':
        events.push(
          frame('content_block_start', {
            type: 'content_block_start',
            index,
            content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} },
          }),
        );
        for (const part of jsonFragments(JSON.stringify(block.input))) {
          delta({ type: 'input_json_delta', partial_json: part });
        }
        break;
    }
    events.push(frame('content_block_stop', { type: 'content_block_stop', index }));
  });
  events.push(
    frame('message_delta', {
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      ...(finalUsage ? { usage: finalUsage } : {}),
    }),
  );
  events.push(frame('message_stop', { type: 'message_stop' }));
  return events;
}
