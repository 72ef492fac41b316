import { anthropicTool, anthropicToolChoiceType, EFFORT_BUDGETS, imageSourceOf, toolUseOf, type Effort } from '../providers/chat-completions/mapping.ts';
import type { MessagesRequest } from '../providers/types.ts';
import { Refused } from '../refusals/refusal.ts';

/**
 * OpenAI Chat Completions request → Anthropic Messages request, for `POST /v1/chat/completions` with a Claude model
 * (docs/openai.md has the table). Pure: no I/O. The concepts both formats share — roles, tool shapes, tool choice,
 * image sources, reasoning effort — go through the one table of each (providers/chat-completions/mapping.ts) that the
 * other direction uses too. What cannot be carried without changing what the request means is refused with 400
 * naming the field (`param`); what only tunes OpenAI's own service is dropped.
 */

/** `max_tokens` when the client sets neither `max_completion_tokens` nor `max_tokens` (Anthropic requires one). */
export const DEFAULT_MAX_TOKENS = 4096;

/** The JSON-mode instruction (`response_format: {type:"json_object"}`), appended to the system prompt. */
export const JSON_OBJECT_INSTRUCTION = 'Respond with a single valid JSON object and nothing else: no prose, no code fences.';

export interface IngressRequest {
  /** The Anthropic request; `model` is the client's. */
  body: MessagesRequest;
  stream: boolean;
  /** `stream_options.include_usage`: a final usage chunk is sent only when asked. */
  includeUsage: boolean;
}

type Json = Record<string, unknown>;

function refuse(param: string, message: string): Refused {
  return new Refused({ kind: 'invalid_request', param, message: `${param}: ${message}` });
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);
const present = (v: unknown) => v !== undefined && v !== null;

/**
 * Fields Claude cannot honour: sent with a value that asks for something, they are refused (400 naming them) rather
 * than silently dropped, because the answer would not be what the client asked for.
 */
const REFUSED: Record<string, { asks: (v: unknown) => boolean; why: string }> = {
  logprobs: { asks: (v) => v === true, why: 'log probabilities are not available from Claude models' },
  top_logprobs: { asks: present, why: 'log probabilities are not available from Claude models' },
  logit_bias: { asks: (v) => isObject(v) && Object.keys(v).length > 0, why: 'token biases cannot be set on Claude models' },
  audio: { asks: present, why: 'audio output is not available from Claude models' },
  modalities: { asks: (v) => Array.isArray(v) && v.some((m) => m !== 'text'), why: 'Claude models answer with text only' },
  prediction: { asks: present, why: 'predicted outputs are not available for Claude models' },
  web_search_options: { asks: present, why: 'OpenAI web search is not available for Claude models' },
  functions: { asks: present, why: 'the deprecated functions field is not supported; send tools' },
  function_call: { asks: present, why: 'the deprecated function_call field is not supported; send tool_choice' },
  frequency_penalty: { asks: (v) => typeof v === 'number' && v !== 0, why: 'Claude models have no frequency penalty' },
  presence_penalty: { asks: (v) => typeof v === 'number' && v !== 0, why: 'Claude models have no presence penalty' },
};

export function anthropicRequest(chat: unknown): IngressRequest {
  if (!isObject(chat)) throw new Refused({ kind: 'invalid_request', message: 'Request body must be a JSON object' });
  if (typeof chat.model !== 'string' || !chat.model) throw refuse('model', 'model is required and must be a string');
  for (const [field, { asks, why }] of Object.entries(REFUSED)) {
    if (asks(chat[field])) throw refuse(field, `${why} (this field cannot be carried to Anthropic)`);
  }
  if (present(chat.n) && chat.n !== 1) throw refuse('n', 'only n = 1 is supported for Claude models (one choice per request)');
  if (!Array.isArray(chat.messages)) throw refuse('messages', 'messages is required and must be an array of message objects');

  const { system, messages } = translateMessages(chat.messages);
  const body: MessagesRequest = { model: chat.model, max_tokens: DEFAULT_MAX_TOKENS, messages } as MessagesRequest;

  const format = responseFormat(chat.response_format);
  if (format === 'json_object') system.push(JSON_OBJECT_INSTRUCTION);
  else if (format) body.output_config = { format };
  if (system.length) body.system = system.join('\n\n');

  const tools = translateTools(chat.tools);
  const toolChoice = translateToolChoice(chat.tool_choice, chat.parallel_tool_calls);
  if (tools) {
    body.tools = tools as MessagesRequest['tools'];
    // Only with tools, as OpenAI (which refuses a tool_choice alone) and the other direction do.
    if (toolChoice) body.tool_choice = toolChoice as unknown as MessagesRequest['tool_choice'];
  }

  const effort = reasoningEffort(chat.reasoning_effort);
  const asked = maxTokens(chat);
  body.max_tokens = asked ?? DEFAULT_MAX_TOKENS + (effort ? EFFORT_BUDGETS[effort] : 0);
  if (effort) {
    // OpenAI's limit covers reasoning and answer together, as Anthropic's max_tokens covers thinking and text; the
    // thinking budget must stay below it, so a small limit lowers the budget (never below Anthropic's 1,024).
    const budget = Math.min(EFFORT_BUDGETS[effort], body.max_tokens - 1);
    if (budget < EFFORT_BUDGETS.low) {
      throw refuse(
        'reasoning_effort',
        `"${effort}" needs max_completion_tokens above ${EFFORT_BUDGETS.low} (Claude's smallest thinking budget); got ${body.max_tokens}`,
      );
    }
    body.thinking = { type: 'enabled', budget_tokens: budget };
  }

  const stop = chat.stop;
  if (typeof stop === 'string') body.stop_sequences = [stop];
  else if (Array.isArray(stop)) {
    if (!stop.every((s) => typeof s === 'string')) throw refuse('stop', 'stop must be a string or an array of strings');
    if (stop.length) body.stop_sequences = stop as string[];
  } else if (present(stop)) throw refuse('stop', 'stop must be a string or an array of strings');
  for (const field of ['temperature', 'top_p'] as const) {
    if (!present(chat[field])) continue;
    if (typeof chat[field] !== 'number') throw refuse(field, `${field} must be a number`);
    body[field] = chat[field];
  }
  const user = [chat.user, chat.safety_identifier].find((u): u is string => typeof u === 'string' && u !== '');
  if (user) body.metadata = { user_id: user };

  if (present(chat.stream) && typeof chat.stream !== 'boolean') throw refuse('stream', 'stream must be a boolean');
  const stream = chat.stream === true;
  if (stream) body.stream = true;
  const options = chat.stream_options;
  if (present(options) && !isObject(options)) throw refuse('stream_options', 'stream_options must be an object');
  return { body, stream, includeUsage: stream && isObject(options) && options.include_usage === true };
}

function maxTokens(chat: Json): number | undefined {
  for (const field of ['max_completion_tokens', 'max_tokens'] as const) {
    const v = chat[field];
    if (!present(v)) continue;
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw refuse(field, `${field} must be a positive integer`);
    return v;
  }
  return undefined;
}

/** `none` and `minimal` ask for no reasoning; `low`…`high` for a thinking budget (mapping.ts, EFFORT_BUDGETS). */
function reasoningEffort(value: unknown): Effort | undefined {
  if (!present(value) || value === 'none' || value === 'minimal') return undefined;
  if (value === 'low' || value === 'medium' || value === 'high') return value;
  if (value === 'xhigh') return 'high';
  throw refuse('reasoning_effort', 'reasoning_effort must be one of none, minimal, low, medium, high');
}

function responseFormat(value: unknown): 'json_object' | { type: 'json_schema'; schema: Json } | undefined {
  if (!present(value)) return undefined;
  if (!isObject(value)) throw refuse('response_format', 'response_format must be an object');
  switch (value.type) {
    case 'text':
      return undefined;
    case 'json_object':
      return 'json_object';
    case 'json_schema': {
      const schema = isObject(value.json_schema) ? value.json_schema.schema : undefined;
      if (!isObject(schema)) throw refuse('response_format.json_schema.schema', 'a json_schema response format needs a JSON schema object');
      return { type: 'json_schema', schema };
    }
    default:
      throw refuse('response_format.type', `"${String(value.type)}" is not a response format; use text, json_object or json_schema`);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------------------------

type Block = Json & { type: string };
type AnthropicMessage = { role: string; content: string | Block[] };

/** The text of a system/developer/tool message: a string, or its text parts joined. */
function textContent(content: unknown, where: string): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw refuse(where, 'content must be a string or an array of text parts');
  return content
    .map((part: unknown, j) => {
      if (isObject(part) && part.type === 'text' && typeof part.text === 'string') return part.text;
      throw refuse(`${where}[${j}]`, 'only text parts are allowed here');
    })
    .join('\n\n');
}

function userBlocks(content: unknown, where: string): string | Block[] {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) throw refuse(where, 'content must be a string or an array of content parts');
  return content.map((part: unknown, j): Block => {
    const at = `${where}[${j}]`;
    if (!isObject(part)) throw refuse(at, 'each content part must be an object');
    switch (part.type) {
      case 'text':
        if (typeof part.text !== 'string') throw refuse(`${at}.text`, 'a text part needs a string "text"');
        return { type: 'text', text: part.text };
      case 'image_url': {
        const url = isObject(part.image_url) ? part.image_url.url : undefined;
        const source = typeof url === 'string' ? imageSourceOf(url) : undefined;
        if (!source) throw refuse(`${at}.image_url.url`, 'an image must be a base64 data: URL or an http(s) URL');
        return { type: 'image', source };
      }
      default:
        throw refuse(`${at}.type`, `"${String(part.type)}" content parts cannot be sent to Claude models (text and image_url can)`);
    }
  });
}

function assistantBlocks(m: Json, where: string): string | Block[] {
  const blocks: Block[] = [];
  const content = m.content;
  if (typeof content === 'string') {
    if (content) blocks.push({ type: 'text', text: content });
  } else if (Array.isArray(content)) {
    content.forEach((part: unknown, j) => {
      const at = `${where}.content[${j}]`;
      if (isObject(part) && part.type === 'text' && typeof part.text === 'string') {
        if (part.text) blocks.push({ type: 'text', text: part.text });
      } else if (isObject(part) && part.type === 'refusal' && typeof part.refusal === 'string') {
        if (part.refusal) blocks.push({ type: 'text', text: part.refusal });
      } else throw refuse(at, 'an assistant message holds text and refusal parts only');
    });
  } else if (present(content)) throw refuse(`${where}.content`, 'content must be a string, an array of text parts, or null');
  if (present(m.function_call)) throw refuse(`${where}.function_call`, 'the deprecated function_call is not supported; send tool_calls');
  if (present(m.tool_calls)) {
    if (!Array.isArray(m.tool_calls)) throw refuse(`${where}.tool_calls`, 'tool_calls must be an array');
    m.tool_calls.forEach((call: unknown, k) => {
      const at = `${where}.tool_calls[${k}]`;
      if (!isObject(call) || call.type !== 'function' || !isObject(call.function) || typeof call.function.name !== 'string' || typeof call.id !== 'string') {
        throw refuse(at, 'a tool call needs an id and a function with a name (type "function")');
      }
      const args = call.function.arguments;
      blocks.push(toolUseOf({ id: call.id, function: { name: call.function.name, arguments: typeof args === 'string' ? args : undefined } }));
    });
  }
  return blocks.length === 1 && blocks[0]!.type === 'text' ? (blocks[0]!.text as string) : blocks;
}

/**
 * Messages: system and developer messages before the first other message are the `system` prompt; later ones stay
 * where they are as `role:"system"` messages (as the Anthropic route carries Claude Code's). Consecutive `tool`
 * messages are one user message of tool_result blocks, in their order.
 */
function translateMessages(input: unknown[]): { system: string[]; messages: AnthropicMessage[] } {
  const system: string[] = [];
  const messages: AnthropicMessage[] = [];
  let toolResults: Block[] | undefined;
  input.forEach((raw, i) => {
    const where = `messages[${i}]`;
    if (!isObject(raw) || typeof raw.role !== 'string') throw refuse(`${where}.role`, 'each message must be an object with a string role');
    if (raw.role !== 'tool') toolResults = undefined;
    switch (raw.role) {
      case 'system':
      case 'developer': {
        const text = textContent(raw.content, `${where}.content`);
        if (messages.length === 0) {
          if (text) system.push(text);
        } else if (text) messages.push({ role: 'system', content: text });
        break;
      }
      case 'user':
        messages.push({ role: 'user', content: userBlocks(raw.content, `${where}.content`) });
        break;
      case 'assistant':
        messages.push({ role: 'assistant', content: assistantBlocks(raw, where) });
        break;
      case 'tool': {
        if (typeof raw.tool_call_id !== 'string' || !raw.tool_call_id)
          throw refuse(`${where}.tool_call_id`, 'a tool message needs the tool_call_id it answers');
        const result: Block = { type: 'tool_result', tool_use_id: raw.tool_call_id, content: textContent(raw.content, `${where}.content`) };
        if (toolResults) toolResults.push(result);
        else {
          toolResults = [result];
          messages.push({ role: 'user', content: toolResults });
        }
        break;
      }
      default:
        throw refuse(`${where}.role`, `"${raw.role}" messages cannot be sent to Claude models (system, developer, user, assistant and tool can)`);
    }
  });
  return { system, messages };
}

// ---------------------------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------------------------

function translateTools(tools: unknown): unknown[] | undefined {
  if (!present(tools)) return undefined;
  if (!Array.isArray(tools)) throw refuse('tools', 'tools must be an array');
  if (tools.length === 0) return undefined;
  return tools.map((tool: unknown, i) => {
    if (!isObject(tool) || tool.type !== 'function') throw refuse(`tools[${i}].type`, 'only function tools can be sent to Claude models');
    const fn = tool.function;
    if (!isObject(fn) || typeof fn.name !== 'string' || !fn.name) throw refuse(`tools[${i}].function.name`, 'a function tool needs a name');
    return anthropicTool({ name: fn.name, description: typeof fn.description === 'string' ? fn.description : undefined, parameters: fn.parameters });
  });
}

function translateToolChoice(choice: unknown, parallel: unknown): Json | undefined {
  let out: Json | undefined;
  if (typeof choice === 'string') {
    const type = anthropicToolChoiceType(choice);
    if (!type) throw refuse('tool_choice', `"${choice}" is not a tool choice; use auto, none, required or a named function`);
    out = { type };
  } else if (isObject(choice)) {
    const name = isObject(choice.function) ? choice.function.name : undefined;
    if (choice.type !== 'function' || typeof name !== 'string') throw refuse('tool_choice', 'a named tool choice is {type:"function", function:{name}}');
    out = { type: 'tool', name };
  } else if (present(choice)) throw refuse('tool_choice', 'tool_choice must be a string or an object');
  if (parallel === false && out?.type !== 'none') out = { ...(out ?? { type: 'auto' }), disable_parallel_tool_use: true };
  return out;
}
