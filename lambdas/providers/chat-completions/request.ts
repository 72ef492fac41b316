import { createHash } from 'node:crypto';
import type OpenAI from 'openai';
import { PROVIDER_LABELS } from '../../routing/provider-ids.ts';
import { TYPICAL_IMAGE_TOKENS } from '../token-estimates.ts';
import type { MessagesRequest } from '../types.ts';
import type { Dialect } from './dialect.ts';
import { TranslationError } from './translation-error.ts';
import { effortForBudget, functionTool, imageUrlOf, openaiToolChoiceMode, toolCallOf, type Effort } from './mapping.ts';

/**
 * Anthropic Messages request → OpenAI Chat Completions request (docs/translation.md has the full table).
 *
 * Pure: no I/O. Whatever cannot be translated without changing what the request means (documents, server tools,
 * file references…) throws a TranslationError, which the provider answers as a 400 invalid_request_error; what only
 * tunes the Anthropic API itself (cache_control, top_k, thinking signatures, service_tier…) is dropped.
 */

/** The Chat Completions body the gateway sends, with the OpenRouter-only fields it may add. */
export type ChatRequest = Omit<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'stream'> & {
  stream?: boolean;
  /** OpenRouter: ask for the cost of the request in the usage (`usage.cost`, USD). */
  usage?: { include: boolean };
  /** OpenRouter's unified reasoning control. */
  reasoning?: { max_tokens?: number; effort?: 'low' | 'medium' | 'high' };
};

// ---------------------------------------------------------------------------------------------------------------
// Tool names
// ---------------------------------------------------------------------------------------------------------------

/** OpenAI's limit on a function name (Anthropic accepts longer ones, e.g. MCP tools named mcp__server__tool). */
export const MAX_TOOL_NAME = 64;
const HASH_CHARS = 10;

/**
 * A name over 64 characters becomes its first 53 characters + `_` + 10 hex characters of its SHA-256: deterministic,
 * so the same long name maps the same way in `tools`, `tool_choice` and earlier `tool_use` blocks, across requests.
 */
export function shortenToolName(name: string): string {
  if (name.length <= MAX_TOOL_NAME) return name;
  const hash = createHash('sha256').update(name).digest('hex').slice(0, HASH_CHARS);
  return `${name.slice(0, MAX_TOOL_NAME - HASH_CHARS - 1)}_${hash}`;
}

/** The shortened names of one request, to restore the client's names in the answer. */
export class ToolNames {
  private readonly original = new Map<string, string>();

  /** The name to send upstream (remembered for `restore`). */
  upstream(name: string): string {
    const short = shortenToolName(name);
    if (short !== name) this.original.set(short, name);
    return short;
  }

  /** The client's name for a name the upstream used. */
  restore(name: string): string {
    return this.original.get(name) ?? name;
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Reasoning (the dialects turn these into their own controls)
// ---------------------------------------------------------------------------------------------------------------

export { effortForBudget, type Effort } from './mapping.ts';

/** Anthropic's `output_config.effort` (low…max) → OpenAI's three levels. */
function effortOf(value: unknown): Effort | undefined {
  if (value === 'low' || value === 'medium' || value === 'high') return value;
  if (value === 'xhigh' || value === 'max') return 'high';
  return undefined;
}

/** Thinking budget of `thinking: {type:"enabled", budget_tokens}`, if any. */
export function thinkingBudget(body: MessagesRequest): number | undefined {
  const t = body.thinking as { type?: string; budget_tokens?: unknown } | undefined;
  return t?.type === 'enabled' && typeof t.budget_tokens === 'number' ? t.budget_tokens : undefined;
}

/** The effort the client asked for: from the thinking budget, else from `output_config.effort`. */
export function requestedEffort(body: MessagesRequest): Effort | undefined {
  const budget = thinkingBudget(body);
  if (budget !== undefined) return effortForBudget(budget);
  return effortOf((body.output_config as { effort?: unknown } | undefined)?.effort);
}

// ---------------------------------------------------------------------------------------------------------------
// Messages
// ---------------------------------------------------------------------------------------------------------------

type Block = Record<string, unknown> & { type: string };
type Message = OpenAI.Chat.ChatCompletionMessageParam;
type UserPart = OpenAI.Chat.ChatCompletionContentPartText | OpenAI.Chat.ChatCompletionContentPartImage;
type ToolCall = OpenAI.Chat.ChatCompletionMessageFunctionToolCall;

function blocksOf(content: unknown): Block[] {
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  return Array.isArray(content) ? (content as Block[]) : [];
}

function textOf(block: Block, where: string): string {
  if (typeof block.text !== 'string') throw new TranslationError(`${where}: a text block needs a string "text"`);
  return block.text;
}

/** Blocks whose meaning OpenAI's Chat Completions cannot carry. */
const UNSUPPORTED: Record<string, string> = {
  document: 'document (PDF / plain-text document) blocks',
  search_result: 'search_result blocks',
  container_upload: 'container_upload blocks',
  server_tool_use: 'server tool blocks (server_tool_use)',
  web_search_tool_result: 'server tool results (web_search_tool_result)',
  web_fetch_tool_result: 'server tool results (web_fetch_tool_result)',
  code_execution_tool_result: 'server tool results (code_execution_tool_result)',
  bash_code_execution_tool_result: 'server tool results (bash_code_execution_tool_result)',
  text_editor_code_execution_tool_result: 'server tool results (text_editor_code_execution_tool_result)',
  tool_search_tool_result: 'server tool results (tool_search_tool_result)',
  mcp_tool_use: 'MCP connector blocks (mcp_tool_use)',
  mcp_tool_result: 'MCP connector blocks (mcp_tool_result)',
  tool_addition: 'mid-conversation tool changes (tool_addition)',
  tool_removal: 'mid-conversation tool changes (tool_removal)',
};

function unsupported(type: string, where: string, label: string): TranslationError {
  const what = UNSUPPORTED[type] ?? `"${type}" blocks`;
  return new TranslationError(`${where}: ${what} cannot be sent to ${label}, which serves this model; use a Claude model for them`);
}

function imagePart(block: Block, where: string, label: string): OpenAI.Chat.ChatCompletionContentPartImage {
  const url = imageUrlOf(block.source);
  if (url) return { type: 'image_url', image_url: { url } };
  const source = block.source as { type?: string } | undefined;
  throw new TranslationError(`${where}: image source "${source?.type ?? 'missing'}" cannot be sent to ${label} (use base64 or url images)`);
}

/**
 * Deferred tools (`defer_loading: true`) the conversation has loaded so far: a client-side tool search (Claude Code's
 * ToolSearch) answers with `tool_reference` blocks naming them, which Anthropic's API expands into the tool.
 */
type LoadedTools = Set<string>;

/**
 * A tool result's content as the text of a `tool` message; its images go to the user message that follows. A
 * `tool_reference` (a tool search's answer) becomes a line naming the loaded tool, under the name the upstream knows
 * it by: the tool itself is then in the request's `tools` (see translateTools), which is what loading it means.
 */
function toolResultContent(
  block: Block,
  where: string,
  label: string,
  names: ToolNames,
  loaded: LoadedTools,
): { text: string; images: OpenAI.Chat.ChatCompletionContentPartImage[] } {
  const texts: string[] = [];
  const images: OpenAI.Chat.ChatCompletionContentPartImage[] = [];
  const content = block.content;
  if (typeof content === 'string') texts.push(content);
  else if (Array.isArray(content)) {
    (content as Block[]).forEach((inner, j) => {
      const at = `${where}.content.${j}`;
      if (inner.type === 'text') texts.push(textOf(inner, at));
      else if (inner.type === 'image') images.push(imagePart(inner, at, label));
      else if (inner.type === 'tool_reference' && typeof inner.tool_name === 'string' && inner.tool_name) {
        loaded.add(inner.tool_name);
        texts.push(`Tool loaded: ${names.upstream(inner.tool_name)}`);
      } else throw unsupported(inner.type, at, label);
    });
  }
  const text = texts.join('\n');
  return { text: block.is_error === true ? (text ? `Error: ${text}` : 'Error') : text, images };
}

/**
 * Why a tool result's content cannot reach a Chat Completions model (undefined when it can), by the same translation
 * the request gets: /ws checks a client's tool result before it is stored in the session's conversation.
 */
export function toolResultProblem(content: unknown, label: string): string | undefined {
  try {
    toolResultContent({ type: 'tool_result', content }, 'tool_result', label, new ToolNames(), new Set());
    return undefined;
  } catch (err) {
    if (err instanceof TranslationError) return err.message;
    throw err;
  }
}

function userContent(parts: UserPart[]): string | UserPart[] {
  const only = parts[0];
  return parts.length === 1 && only?.type === 'text' ? only.text : parts;
}

/**
 * A user turn: its tool results become `tool` messages — in the order of the calls of the assistant turn before it,
 * because OpenAI wants them right after that turn — and the rest (text, images, images from tool results) one user
 * message after them.
 */
function translateUser(content: unknown, index: number, previousCalls: string[], label: string, names: ToolNames, loaded: LoadedTools): Message[] {
  if (typeof content === 'string') return [{ role: 'user', content }];
  const toolMessages: { id: string; text: string }[] = [];
  const toolImages: UserPart[] = [];
  const parts: UserPart[] = [];
  blocksOf(content).forEach((block, j) => {
    const where = `messages.${index}.content.${j}`;
    switch (block.type) {
      case 'text':
        parts.push({ type: 'text', text: textOf(block, where) });
        break;
      case 'image':
        parts.push(imagePart(block, where, label));
        break;
      case 'tool_result': {
        const id = String(block.tool_use_id ?? '');
        const { text, images } = toolResultContent(block, where, label, names, loaded);
        toolMessages.push({ id, text });
        if (images.length) toolImages.push({ type: 'text', text: `Image output of tool call ${id}:` }, ...images);
        break;
      }
      default:
        throw unsupported(block.type, where, label);
    }
  });
  const rank = (id: string) => {
    const at = previousCalls.indexOf(id);
    return at === -1 ? previousCalls.length : at;
  };
  const ordered = toolMessages.map((m, i) => ({ m, i })).sort((a, b) => rank(a.m.id) - rank(b.m.id) || a.i - b.i);
  const out: Message[] = ordered.map(({ m }) => ({ role: 'tool', tool_call_id: m.id, content: m.text }));
  const rest = [...toolImages, ...parts];
  if (rest.length) out.push({ role: 'user', content: userContent(rest) });
  return out;
}

/** An assistant turn: text → content, tool_use → tool_calls; thinking blocks are dropped (no signature to carry). */
function translateAssistant(content: unknown, index: number, names: ToolNames, label: string): { message: Message; callIds: string[] } {
  if (typeof content === 'string') return { message: { role: 'assistant', content }, callIds: [] };
  const texts: string[] = [];
  const calls: ToolCall[] = [];
  blocksOf(content).forEach((block, j) => {
    const where = `messages.${index}.content.${j}`;
    switch (block.type) {
      case 'text':
        texts.push(textOf(block, where));
        break;
      case 'tool_use':
        calls.push(toolCallOf({ id: String(block.id ?? ''), name: names.upstream(String(block.name ?? '')), input: block.input }));
        break;
      case 'thinking':
      case 'redacted_thinking':
        break;
      default:
        throw unsupported(block.type, where, label);
    }
  });
  const message: OpenAI.Chat.ChatCompletionAssistantMessageParam = {
    role: 'assistant',
    content: texts.length ? texts.join('\n\n') : calls.length ? null : '',
  };
  if (calls.length) message.tool_calls = calls;
  return { message, callIds: calls.map((c) => c.id) };
}

/**
 * A system prompt — the top-level `system`, or a `role:"system"` message in `messages` (`where` names which) — as
 * ONE `system` message: text blocks joined with a blank line, cache_control dropped, empty text sends nothing. Both
 * go the same way so a model sees a mid-conversation instruction exactly as it would see the opening one. The role is
 * `system` for every model, reasoning models included: OpenAI takes `system` as `developer` for those, and many
 * models behind OpenRouter know no `developer` role.
 */
function translateSystem(system: unknown, where: string, label: string): Message[] {
  if (system === undefined || system === null) return [];
  if (typeof system === 'string') return system ? [{ role: 'system', content: system }] : [];
  const texts = blocksOf(system).map((block, j) => {
    if (block.type === 'text') return textOf(block, `${where}.${j}`);
    if (UNSUPPORTED[block.type]) throw unsupported(block.type, `${where}.${j}`, label);
    throw new TranslationError(`${where}.${j}: only text blocks are allowed in a system prompt`);
  });
  return texts.length ? [{ role: 'system', content: texts.join('\n\n') }] : [];
}

/**
 * OpenAI's `user` identifies an end user for abuse detection, and upstreams refuse long ones (OpenRouter above 128
 * characters; OpenAI documents 128 for `safety_identifier`, the field replacing `user`, and is stricter on some
 * fields). Claude Code sends a JSON object of device, account and session ids (about 150 characters) as
 * `metadata.user_id`, so an id over 64 characters goes as its SHA-256 (64 hex characters): still stable per id and
 * opaque, and a whole request is not refused over a field that only helps abuse detection.
 */
export const MAX_USER_ID = 64;

export function upstreamUserId(userId: string): string {
  return userId.length <= MAX_USER_ID ? userId : createHash('sha256').update(userId).digest('hex');
}

// ---------------------------------------------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------------------------------------------

/**
 * Custom tools → functions. A deferred tool (`defer_loading: true`) is kept out of the model's view by Anthropic until a
 * `tool_reference` loads it, so it is sent only once loaded: offering it earlier would let the model call a tool its
 * client has not loaded (Claude Code refuses such a call) and spend the context the client deferred it to save.
 */
function translateTools(tools: unknown, names: ToolNames, label: string, loaded: LoadedTools): OpenAI.Chat.ChatCompletionFunctionTool[] | undefined {
  if (!Array.isArray(tools) || tools.length === 0) return undefined;
  const offered = (tools as Record<string, unknown>[])
    .map((tool, i) => ({ tool, i }))
    .filter(({ tool }) => tool.defer_loading !== true || (typeof tool.name === 'string' && loaded.has(tool.name)));
  if (offered.length === 0) return undefined;
  return offered.map(({ tool, i }) => {
    const type = tool.type;
    if (type !== undefined && type !== null && type !== 'custom') {
      throw new TranslationError(
        `tools.${i}: the server / Anthropic-defined tool "${String(type)}" cannot be sent to ${label}, which serves this model; declare it as a custom tool with an input_schema`,
      );
    }
    if (typeof tool.name !== 'string' || !tool.name) throw new TranslationError(`tools.${i}: a tool needs a "name"`);
    return functionTool({
      name: names.upstream(tool.name),
      input_schema: (tool.input_schema ?? { type: 'object', properties: {} }) as Record<string, unknown>,
      ...(typeof tool.description === 'string' ? { description: tool.description } : {}),
    });
  });
}

function translateToolChoice(choice: unknown, names: ToolNames): Pick<ChatRequest, 'tool_choice' | 'parallel_tool_calls'> {
  const c = choice as { type?: string; name?: string; disable_parallel_tool_use?: boolean } | undefined;
  if (!c?.type) return {};
  const out: Pick<ChatRequest, 'tool_choice' | 'parallel_tool_calls'> = {};
  const mode = openaiToolChoiceMode(c.type);
  if (mode) out.tool_choice = mode;
  else if (c.type === 'tool') out.tool_choice = { type: 'function', function: { name: names.upstream(String(c.name ?? '')) } };
  if (c.disable_parallel_tool_use === true && c.type !== 'none') out.parallel_tool_calls = false;
  return out;
}

// ---------------------------------------------------------------------------------------------------------------
// The request
// ---------------------------------------------------------------------------------------------------------------

export interface TranslatedRequest {
  params: ChatRequest;
  names: ToolNames;
  /** The client's stop sequences (to recognise one in a finish reason that names it). */
  stopSequences: string[];
}

/** Fields that would change what the request does and have no Chat Completions equivalent. */
const REFUSED_FIELDS: Record<string, string> = {
  mcp_servers: 'the MCP connector (mcp_servers)',
};

export function translateRequest(body: MessagesRequest, opts: { upstreamModel: string; dialect: Dialect; stream: boolean }): TranslatedRequest {
  const { dialect, upstreamModel } = opts;
  const label = PROVIDER_LABELS[dialect.id];
  for (const [field, what] of Object.entries(REFUSED_FIELDS)) {
    if (body[field] !== undefined && body[field] !== null) {
      throw new TranslationError(`${what} cannot be used with ${label}, which serves this model; use a Claude model for it`);
    }
  }
  const names = new ToolNames();
  const loaded: LoadedTools = new Set();
  const messages: Message[] = translateSystem(body.system, 'system', label);
  let previousCalls: string[] = [];
  // System messages met between an assistant turn's tool calls and the user turn holding their results: OpenAI
  // wants the tool messages right after the calls, so these wait until the tool messages are placed.
  let heldSystem: Message[] = [];
  const placeHeld = () => {
    messages.push(...heldSystem);
    heldSystem = [];
  };
  (body.messages ?? []).forEach((m, i) => {
    // The schema lets any string role through (the upstream judges it); here only what Chat Completions can carry.
    const role: unknown = m.role;
    switch (role) {
      case 'assistant': {
        placeHeld();
        const { message, callIds } = translateAssistant(m.content, i, names, label);
        messages.push(message);
        previousCalls = callIds;
        break;
      }
      case 'user': {
        const translated = translateUser(m.content, i, previousCalls, label, names, loaded);
        const tools = translated.filter((t) => t.role === 'tool');
        messages.push(...tools);
        placeHeld();
        messages.push(...translated.slice(tools.length));
        previousCalls = [];
        break;
      }
      case 'system': {
        // `clear_at: "next_user_message"`: Anthropic shows the message only until a later user message exists.
        const cleared = (m as { clear_at?: unknown }).clear_at === 'next_user_message' && body.messages.slice(i + 1).some((later) => later.role === 'user');
        if (cleared) break;
        const system = translateSystem(m.content, `messages.${i}.content`, label);
        if (previousCalls.length) heldSystem.push(...system);
        else messages.push(...system);
        break;
      }
      default:
        throw new TranslationError(
          `messages.${i}.role: ${JSON.stringify(role)} cannot be sent to ${label}, which serves this model; a message's role must be "user", "assistant" or "system"`,
        );
    }
  });
  placeHeld();

  const params: ChatRequest = { model: upstreamModel, messages };
  const tools = translateTools(body.tools, names, label, loaded);
  if (tools) {
    params.tools = tools;
    Object.assign(params, translateToolChoice(body.tool_choice, names));
  }
  const stopSequences = Array.isArray(body.stop_sequences) ? body.stop_sequences.filter((s): s is string => typeof s === 'string') : [];
  if (stopSequences.length) params.stop = stopSequences;
  if (typeof body.temperature === 'number') params.temperature = body.temperature;
  if (typeof body.top_p === 'number') params.top_p = body.top_p;
  const userId = (body.metadata as { user_id?: unknown } | undefined)?.user_id;
  if (typeof userId === 'string' && userId) params.user = upstreamUserId(userId);

  const format = (body.output_config as { format?: { type?: string; schema?: unknown } } | undefined)?.format;
  if (format?.type === 'json_schema' && format.schema && typeof format.schema === 'object') {
    params.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: format.schema as Record<string, unknown> } };
  }

  dialect.limits(params, body, upstreamModel);
  if (dialect.extraParams) Object.assign(params, dialect.extraParams);
  if (opts.stream) {
    params.stream = true;
    params.stream_options = { include_usage: true };
  }
  return { params, names, stopSequences };
}

/**
 * count_tokens for a translated provider, and the input figure of a stream until the upstream reports its own:
 * about four characters a token of the translated messages and tools (as JSON), each image counted as
 * TYPICAL_IMAGE_TOKENS instead of the length of its data URL.
 */
export function estimateTokens(params: ChatRequest): number {
  let images = 0;
  const json = JSON.stringify({ messages: params.messages, tools: params.tools }, (_key, value: unknown) => {
    if ((value as { type?: unknown } | null)?.type === 'image_url') {
      images++;
      return { type: 'image_url' };
    }
    return value;
  });
  return Math.ceil(json.length / 4) + images * TYPICAL_IMAGE_TOKENS;
}
