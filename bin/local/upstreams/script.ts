/**
 * Deterministic "script" shared by the simulated Anthropic and OpenAI upstreams.
 *
 * The behaviour of a simulated upstream is driven by *directives* embedded in the text of the
 * LAST user message of the request. Syntax: `[[name]]` or `[[name:arg]]`; several may appear
 * anywhere in the text. Recognised directives are removed from the text (the remainder is
 * trimmed) before it is echoed; unknown `[[...]]` sequences are left untouched.
 *
 *   [[words:N]]               reply text is exactly N words: `word1 word2 ... wordN`
 *                             (with tool directives it replaces the "Calling tools." preamble;
 *                             `[[words:0]]` means "no text at all")
 *   [[json:VALUE]]            reply text is exactly the JSON text VALUE (trimmed, verbatim; it must
 *                             parse as JSON); replaces the echo / preamble like `[[words:N]]`
 *   [[json-invalid]]          reply text is `not json` (INVALID_JSON_TEXT), for structured-output
 *                             retry tests; replaces the echo / preamble like `[[words:N]]`
 *                             (words / json / json-invalid: the last one applying to the turn wins)
 *   (no text directive)       reply text is `Echo: <user text without directives>`, or
 *                             `Hello from the simulated upstream.` when that text is empty;
 *                             with tool directives it is `Calling tools.`; in a scripted
 *                             conversation whose last user turn carries tool results it is
 *                             `Tool results: <r1> | <r2>` (see below)
 *   [[tool:NAME {json}]]      one tool call NAME with that JSON object as input (`{}` when
 *                             omitted); repeat for parallel tool calls (kept in order)
 *   [[thinking]]              a reasoning/thinking part (THINKING_TEXT) before the text
 *   [[cache:read=R,write=W]]  cache token counts (either key optional, default 0)
 *   [[error:STATUS]]          reply with that HTTP status and the provider's error envelope
 *   [[latency:MS]]            wait MS milliseconds before sending anything
 *   [[delay:MS]]              streams: wait MS milliseconds between consecutive SSE events
 *   [[hang]]                  never answer (until the client gives up or the server closes)
 *   [[reset-after:N]]         streams: destroy the socket abruptly after N SSE events
 *   [[stream-error-after:N]]  streams: send a provider mid-stream error after N events, then end
 *   [[finish:REASON]]         OpenAI only: force `finish_reason`
 *   [[cost:USD]]              OpenAI only: add `usage.cost` (OpenRouter style)
 *   [[web-searches:N]]        Anthropic only: report N server-side web searches
 *                             (`usage.server_tool_use.web_search_requests`, JSON and final SSE usage)
 *   [[usage:MODE]]            Anthropic only: misreport usage, to test the gateway's distrust —
 *                             `missing` (no usage at all), `absurd` (every count 1e301),
 *                             `empty` (usage objects with no fields), or `input=N` (report N input
 *                             tokens: a provider counting more than the gateway's bound)
 *
 * Scripted multi-turn conversations (agent loops):
 *   [[N> directive]]          any directive above, prefixed by `N>` (N ≥ 1, spaces after `>`
 *                             optional), applies only on turn N, where turn = 1 + the number of
 *                             `assistant` messages in the request. E.g. `[[1> tool:get {"a":1}]]`,
 *                             `[[2> words:3]]`, `[[3> json:{"ok":true}]]`, `[[2> error:529]]`.
 *   A request is a *scripted conversation* when its first or last user message contains at least
 *   one turn-scoped directive. Then:
 *     - directives come from the last user message if it has any recognised directive of its own
 *       (scoped or not), otherwise from the FIRST user message (the prompt);
 *     - of those, the unscoped ones apply on every turn, then the ones scoped to this turn (so for
 *       single-valued directives — words/json, error, latency, ... — the turn's own value wins;
 *       tool calls are unscoped ones first, then the turn's);
 *     - when the last user turn carries tool results (Anthropic `tool_result` blocks of the last
 *       user message; OpenAI `role: "tool"` / `"function"` messages after the last assistant
 *       message) and no text directive applies, the reply text is `Tool results: <r1> | <r2>`
 *       (each result's text content — string, or text blocks joined with `\n` — in order).
 *   Without any turn-scoped directive nothing changes: only the last user message is read, and a
 *   last user message holding only tool results has no text (→ `Hello from the simulated upstream.`,
 *   which ends a tool loop). Malformed directives in the messages read are 400s on every turn,
 *   whatever their turn.
 *
 * A directive with a malformed argument (e.g. `[[words:abc]]`, invalid tool JSON, `[[0> hang]]`)
 * makes the upstream answer 400 invalid_request_error naming the directive.
 *
 * Token counting (deterministic; mirrors nothing real, but is easy to predict in tests):
 *   - output tokens = words(thinking/reasoning text) + words(reply text)
 *                     + Σ over tool calls of ceil(JSON.stringify(input).length / 4)
 *     where words(s) = number of whitespace-separated words of s (see `countWords`); this holds
 *     for every reply text: echo, words, json, json-invalid, tool results.
 *   - input estimate = ceil(JSON.stringify({ system, messages, tools }).length / 4) over the
 *     request body fields (`estimateInputTokens`; absent fields are omitted by JSON.stringify).
 *     Anthropic: usage.input_tokens = max(0, estimate - cache_read - cache_write), because
 *     Anthropic's input_tokens excludes cache tokens.
 *     OpenAI: prompt_tokens = max(estimate, cached) and includes the cached tokens.
 *   - max tokens (Anthropic `max_tokens`; OpenAI `max_completion_tokens` ?? `max_tokens`): when
 *     the output tokens above exceed the limit, the reply is truncated (thinking words first,
 *     then text words, then whole tool calls while they still fit), the stop reason becomes
 *     `max_tokens` / `length`, and the reported output tokens equal the limit exactly.
 */
import http from 'node:http';
import type { Socket } from 'node:net';
import type { RecordedRequest, SimulatedUpstream, StartUpstreamOptions } from './types.ts';

export type { RecordedRequest, SimulatedUpstream, StartUpstreamOptions } from './types.ts';

/** The thinking / reasoning text produced by `[[thinking]]`. */
export const THINKING_TEXT = 'Let me think step by step.';
/** Signature attached to the Anthropic thinking block produced by `[[thinking]]`. */
export const THINKING_SIGNATURE = 'sig_sim';
/** Text preamble used when tool directives are present (and no `[[words:N]]`). */
export const TOOL_PREAMBLE = 'Calling tools.';
/** Reply text when there is nothing to echo. */
export const EMPTY_ECHO_TEXT = 'Hello from the simulated upstream.';
/** Reply text produced by `[[json-invalid]]` (not valid JSON). */
export const INVALID_JSON_TEXT = 'not json';
/** Prefix of the reply text echoing tool results in a scripted conversation. */
export const TOOL_RESULTS_PREFIX = 'Tool results: ';
/** Separator between the tool results echoed after TOOL_RESULTS_PREFIX. */
export const TOOL_RESULTS_SEPARATOR = ' | ';

export interface ToolDirective {
  name: string;
  input: Record<string, unknown>;
}

export interface Directives {
  words?: number;
  /** Exact reply text from `[[json:VALUE]]` (or INVALID_JSON_TEXT from `[[json-invalid]]`); exclusive with `words`. */
  json?: string;
  tools: ToolDirective[];
  thinking: boolean;
  cacheRead: number;
  cacheWrite: number;
  error?: number;
  latencyMs?: number;
  delayMs?: number;
  hang: boolean;
  resetAfter?: number;
  streamErrorAfter?: number;
  finish?: string;
  cost?: number;
  webSearches?: number;
  usageMode?: 'missing' | 'absurd' | 'empty';
  reportedInput?: number;
}

/** One recognised directive occurrence, as written. */
export interface DirectiveEntry {
  /** The turn of a turn-scoped `[[N> ...]]` directive; undefined = every turn. */
  turn?: number;
  name: string;
  arg?: string;
  /** The directive as written, e.g. `[[2> words:3]]`. */
  raw: string;
}

export interface ParsedScript {
  directives: Directives;
  /** The text with recognised directives removed, trimmed. */
  text: string;
  /** Problems with malformed directives (non-empty → the upstream answers 400). */
  errors: string[];
  /** Every recognised directive of the text, in order (whatever its turn). */
  entries?: DirectiveEntry[];
  /** The conversation turn the directives were resolved for (1 + assistant messages). */
  turn?: number;
  /**
   * Tool results echoed as `Tool results: r1 | r2` when no text directive applies
   * (set only for scripted conversations whose last user turn carries tool results).
   */
  toolResults?: string[];
}

const KNOWN_DIRECTIVES = new Set([
  'words',
  'json',
  'json-invalid',
  'tool',
  'thinking',
  'cache',
  'error',
  'latency',
  'delay',
  'hang',
  'reset-after',
  'stream-error-after',
  'finish',
  'cost',
  'web-searches',
  'usage',
]);

export function emptyDirectives(): Directives {
  return { tools: [], thinking: false, cacheRead: 0, cacheWrite: 0, hang: false };
}

/**
 * Finds the end of a directive argument starting at `start`: the index of the closing `]]`
 * at bracket depth 0, skipping over JSON strings (so `{"a":[[1]]}` or `"]]"` are fine).
 * Returns -1 when there is no closing `]]`.
 */
function findDirectiveEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const ch = text[i];
    if (inString) {
      if (ch === '\\') i++;
      else if (ch === '"') inString = false;
      continue;
    }
    if (ch === '"') inString = true;
    else if (ch === '{' || ch === '[') depth++;
    else if ((ch === '}' || ch === ']') && depth > 0) depth--;
    else if (ch === ']' && text[i + 1] === ']') return i;
  }
  return -1;
}

function parseNonNegativeInt(arg: string | undefined): number | undefined {
  if (arg === undefined || !/^\s*\d+\s*$/.test(arg)) return undefined;
  return Number.parseInt(arg, 10);
}

function applyDirective(d: Directives, name: string, arg: string | undefined, raw: string, errors: string[]): void {
  const bad = (why: string): void => {
    errors.push(`Invalid directive ${raw}: ${why}`);
  };
  const intArg = (): number | undefined => {
    const n = parseNonNegativeInt(arg);
    if (n === undefined) bad('expected a non-negative integer argument');
    return n;
  };
  switch (name) {
    case 'words': {
      const n = intArg();
      if (n !== undefined) {
        d.words = n;
        delete d.json;
      }
      return;
    }
    case 'json': {
      const json = (arg ?? '').trim();
      if (json === '') {
        bad('expected [[json:VALUE]]');
        return;
      }
      try {
        JSON.parse(json);
      } catch {
        bad('not valid JSON');
        return;
      }
      d.json = json;
      delete d.words;
      return;
    }
    case 'json-invalid':
      d.json = INVALID_JSON_TEXT;
      delete d.words;
      return;
    case 'tool': {
      const m = /^\s*([A-Za-z0-9_.-]+)\s*([\s\S]*)$/.exec(arg ?? '');
      if (!m || m[1] === undefined) {
        bad('expected [[tool:NAME {json}]]');
        return;
      }
      const json = (m[2] ?? '').trim();
      let input: unknown = {};
      if (json !== '') {
        try {
          input = JSON.parse(json);
        } catch {
          bad('tool input is not valid JSON');
          return;
        }
      }
      if (input === null || typeof input !== 'object' || Array.isArray(input)) {
        bad('tool input must be a JSON object');
        return;
      }
      d.tools.push({ name: m[1], input: input as Record<string, unknown> });
      return;
    }
    case 'thinking':
      d.thinking = true;
      return;
    case 'hang':
      d.hang = true;
      return;
    case 'cache': {
      for (const part of (arg ?? '').split(',')) {
        if (part.trim() === '') continue;
        const m = /^\s*(read|write)\s*=\s*(\d+)\s*$/.exec(part);
        if (!m || m[2] === undefined) {
          bad('expected [[cache:read=R,write=W]]');
          return;
        }
        if (m[1] === 'read') d.cacheRead = Number.parseInt(m[2], 10);
        else d.cacheWrite = Number.parseInt(m[2], 10);
      }
      return;
    }
    case 'error': {
      const n = intArg();
      if (n === undefined) return;
      if (n < 400 || n > 599) {
        bad('status must be 400-599');
        return;
      }
      d.error = n;
      return;
    }
    case 'latency': {
      const n = intArg();
      if (n !== undefined) d.latencyMs = n;
      return;
    }
    case 'delay': {
      const n = intArg();
      if (n !== undefined) d.delayMs = n;
      return;
    }
    case 'reset-after': {
      const n = intArg();
      if (n !== undefined) d.resetAfter = n;
      return;
    }
    case 'stream-error-after': {
      const n = intArg();
      if (n !== undefined) d.streamErrorAfter = n;
      return;
    }
    case 'finish': {
      const reason = (arg ?? '').trim();
      if (reason === '') {
        bad('expected [[finish:REASON]]');
        return;
      }
      d.finish = reason;
      return;
    }
    case 'cost': {
      const v = Number((arg ?? '').trim());
      if ((arg ?? '').trim() === '' || !Number.isFinite(v) || v < 0) {
        bad('expected a non-negative number');
        return;
      }
      d.cost = v;
      return;
    }
    case 'web-searches': {
      const n = intArg();
      if (n !== undefined) d.webSearches = n;
      return;
    }
    case 'usage': {
      const mode = (arg ?? '').trim();
      const input = /^input=(\d+)$/.exec(mode);
      if (input) {
        d.reportedInput = Number(input[1]);
        return;
      }
      if (mode !== 'missing' && mode !== 'absurd' && mode !== 'empty') {
        bad('expected [[usage:missing|absurd|empty|input=N]]');
        return;
      }
      d.usageMode = mode;
      return;
    }
  }
}

export interface ScannedText {
  /** Recognised directives, in order. */
  entries: DirectiveEntry[];
  /** The text with recognised directives removed, trimmed. */
  text: string;
  /** Problems with malformed directives, whatever their turn. */
  errors: string[];
}

/**
 * Finds the recognised directives of `text` (`[[name]]`, `[[name:arg]]`, optionally turn-scoped
 * as `[[N> name...]]`) and validates every one of them, whatever its turn.
 */
export function scanDirectives(text: string): ScannedText {
  const entries: DirectiveEntry[] = [];
  const errors: string[] = [];
  const scratch = emptyDirectives();
  let out = '';
  let pos = 0;
  const headRe = /(?:(\d+)>\s*)?([a-z][a-z-]*)/y;
  while (pos < text.length) {
    const open = text.indexOf('[[', pos);
    if (open < 0) break;
    headRe.lastIndex = open + 2;
    const m = headRe.exec(text);
    const name = m?.[2];
    if (m === null || name === undefined || !KNOWN_DIRECTIVES.has(name)) {
      out += text.slice(pos, open + 1);
      pos = open + 1;
      continue;
    }
    const afterName = open + 2 + m[0].length;
    let arg: string | undefined;
    let end: number;
    if (text.startsWith(']]', afterName)) {
      end = afterName;
    } else if (text[afterName] === ':') {
      end = findDirectiveEnd(text, afterName + 1);
      if (end < 0) {
        out += text.slice(pos, open + 1);
        pos = open + 1;
        continue;
      }
      arg = text.slice(afterName + 1, end);
    } else {
      out += text.slice(pos, open + 1);
      pos = open + 1;
      continue;
    }
    const raw = text.slice(open, end + 2);
    const entry: DirectiveEntry = { name, raw };
    if (arg !== undefined) entry.arg = arg;
    if (m[1] !== undefined) {
      entry.turn = Number.parseInt(m[1], 10);
      if (!(entry.turn >= 1)) errors.push(`Invalid directive ${raw}: the turn must be 1 or more`);
    }
    applyDirective(scratch, name, arg, raw, errors);
    entries.push(entry);
    out += text.slice(pos, open);
    pos = end + 2;
  }
  out += text.slice(pos);
  return { entries, text: out.trim(), errors };
}

/**
 * The directives in effect on `turn`: the unscoped entries first, then those scoped to `turn`,
 * each group in written order (so for single-valued directives the turn's own value wins).
 */
export function directivesForTurn(entries: readonly DirectiveEntry[], turn: number): Directives {
  const d = emptyDirectives();
  const ignored: string[] = [];
  for (const e of entries) if (e.turn === undefined) applyDirective(d, e.name, e.arg, e.raw, ignored);
  for (const e of entries) if (e.turn === turn) applyDirective(d, e.name, e.arg, e.raw, ignored);
  return d;
}

/**
 * Extracts the directives from `text` as they apply on `turn` (default 1), returning them with
 * the cleaned (trimmed) text.
 */
export function parseDirectives(text: string, turn = 1): ParsedScript {
  const scanned = scanDirectives(text);
  return {
    directives: directivesForTurn(scanned.entries, turn),
    text: scanned.text,
    errors: scanned.errors,
    entries: scanned.entries,
    turn,
  };
}

// ---------------------------------------------------------------------------------------------
// Extracting the last user message text
// ---------------------------------------------------------------------------------------------

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function textOfContent(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  const parts: string[] = [];
  for (const block of content) {
    if (isRecord(block) && block.type === 'text' && typeof block.text === 'string') parts.push(block.text);
  }
  return parts.join('\n');
}

/**
 * Text of the last `user` message of an Anthropic Messages request (string content, or the
 * text blocks of array content joined with `\n`). Tool results are not text, so a last user
 * message made only of `tool_result` blocks yields `''` (→ a plain text reply, ending a tool loop).
 */
export function lastUserTextAnthropic(body: unknown): string {
  if (!isRecord(body) || !Array.isArray(body.messages)) return '';
  for (let i = body.messages.length - 1; i >= 0; i--) {
    const msg: unknown = body.messages[i];
    if (isRecord(msg) && msg.role === 'user') return textOfContent(msg.content);
  }
  return '';
}

/**
 * Text of the last `user` message of an OpenAI Chat Completions request (string content, or
 * the `text` parts joined with `\n`). If a `tool` message comes after the last user message,
 * the text is `''`: this mirrors Anthropic, where tool results live inside the last user
 * message, so a translated tool loop behaves the same on both upstreams.
 */
export function lastUserTextOpenAI(body: unknown): string {
  if (!isRecord(body) || !Array.isArray(body.messages)) return '';
  for (let i = body.messages.length - 1; i >= 0; i--) {
    const msg: unknown = body.messages[i];
    if (!isRecord(msg)) continue;
    if (msg.role === 'tool' || msg.role === 'function') return '';
    if (msg.role === 'user') return textOfContent(msg.content);
  }
  return '';
}

/** What the script reads from a request's conversation (see `scriptConversation`). */
export interface ConversationView {
  /** Text of the first `user` message (the prompt). */
  firstUserText: string;
  /** Text of the last user turn (`lastUserTextAnthropic` / `lastUserTextOpenAI`). */
  lastUserText: string;
  /** Number of `assistant` messages in the conversation (turn = 1 + this). */
  assistantMessages: number;
  /** Text content of each tool result of the last user turn, in order. */
  toolResults: string[];
}

function firstUserText(messages: unknown[]): string {
  for (const msg of messages) {
    if (isRecord(msg) && msg.role === 'user') return textOfContent(msg.content);
  }
  return '';
}

function countAssistantMessages(messages: unknown[]): number {
  return messages.filter((m) => isRecord(m) && m.role === 'assistant').length;
}

/** The conversation of an Anthropic Messages request; tool results are the last user message's `tool_result` blocks. */
export function anthropicConversation(body: unknown): ConversationView {
  const messages = isRecord(body) && Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
  const toolResults: string[] = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const msg = messages[i];
    if (!isRecord(msg) || msg.role !== 'user') continue;
    if (Array.isArray(msg.content)) {
      for (const block of msg.content) {
        if (isRecord(block) && block.type === 'tool_result') toolResults.push(textOfContent(block.content));
      }
    }
    break;
  }
  return {
    firstUserText: firstUserText(messages),
    lastUserText: lastUserTextAnthropic(body),
    assistantMessages: countAssistantMessages(messages),
    toolResults,
  };
}

/** The conversation of an OpenAI Chat Completions request; tool results are the `tool` / `function` messages after the last assistant message. */
export function openaiConversation(body: unknown): ConversationView {
  const messages = isRecord(body) && Array.isArray(body.messages) ? (body.messages as unknown[]) : [];
  const toolResults: string[] = [];
  for (let i = messages.length - 1; i >= 0; i--) {
    const msg = messages[i];
    if (!isRecord(msg)) continue;
    if (msg.role === 'assistant') break;
    if (msg.role === 'tool' || msg.role === 'function') toolResults.unshift(textOfContent(msg.content));
  }
  return {
    firstUserText: firstUserText(messages),
    lastUserText: lastUserTextOpenAI(body),
    assistantMessages: countAssistantMessages(messages),
    toolResults,
  };
}

/**
 * The script of one request in its conversation (see the header comment): the last user
 * message's directives, or — in a scripted conversation (some directive of the first or last user
 * message is turn-scoped) whose last user message has none of its own — the first user message's,
 * resolved for turn = 1 + assistant messages. The echoed text is always the last user message's.
 */
export function scriptConversation(view: ConversationView): ParsedScript {
  const turn = view.assistantMessages + 1;
  const last = scanDirectives(view.lastUserText);
  const first = scanDirectives(view.firstUserText);
  const scoped = (s: ScannedText): boolean => s.entries.some((e) => e.turn !== undefined);
  const scripted = scoped(first) || scoped(last);
  const source = scripted && last.entries.length === 0 ? first : last;
  const script: ParsedScript = {
    directives: directivesForTurn(source.entries, turn),
    text: last.text,
    errors: source.errors,
    entries: source.entries,
    turn,
  };
  if (scripted && view.toolResults.length > 0) script.toolResults = view.toolResults;
  return script;
}

// ---------------------------------------------------------------------------------------------
// Token counting
// ---------------------------------------------------------------------------------------------

/** Number of whitespace-separated words in `text`. */
export function countWords(text: string): number {
  const m = text.match(/\S+/g);
  return m ? m.length : 0;
}

/** Output tokens charged for one tool call: ceil(JSON.stringify(input).length / 4). */
export function toolCallTokens(input: unknown): number {
  return Math.ceil(JSON.stringify(input).length / 4);
}

/** Input token estimate: ceil(JSON.stringify({ system, messages, tools }).length / 4). */
export function estimateInputTokens(body: unknown): number {
  const b = isRecord(body) ? body : {};
  return Math.ceil(JSON.stringify({ system: b.system, messages: b.messages, tools: b.tools }).length / 4);
}

/** `word1 word2 ... wordN` */
export function makeWords(n: number): string {
  const words: string[] = [];
  for (let i = 1; i <= n; i++) words.push(`word${i}`);
  return words.join(' ');
}

/**
 * Splits text into stream chunks of one word each, every chunk carrying the whitespace that
 * follows its word (so the last chunk has none); concatenating the chunks gives back `text`.
 */
export function wordChunks(text: string): string[] {
  const chunks = text.match(/\s*\S+\s*/g);
  return chunks ?? (text === '' ? [] : [text]);
}

/** First `n` words of `text`, keeping the original spacing between them. */
export function firstWords(text: string, n: number): string {
  if (n <= 0) return '';
  return wordChunks(text).slice(0, n).join('').trimEnd();
}

/** Splits a JSON string into up to 3 non-empty fragments (fewer for very short strings). */
export function jsonFragments(json: string, parts = 3): string[] {
  if (json.length === 0) return [];
  const n = Math.max(1, Math.min(parts, json.length));
  const size = Math.ceil(json.length / n);
  const out: string[] = [];
  for (let i = 0; i < json.length; i += size) out.push(json.slice(i, i + size));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reply plan
// ---------------------------------------------------------------------------------------------

export interface PlannedToolCall {
  name: string;
  input: Record<string, unknown>;
  /** `JSON.stringify(input)` */
  arguments: string;
  tokens: number;
}

export interface ReplyPlan {
  directives: Directives;
  /** Thinking / reasoning text, or `null` when there is none. */
  reasoning: string | null;
  /** Reply text; `''` means no text part. */
  text: string;
  toolCalls: PlannedToolCall[];
  /** True when the reply was cut by the max tokens limit. */
  truncated: boolean;
  outputTokens: number;
  reasoningTokens: number;
}

/**
 * Builds the deterministic reply from the request's `script` (`scriptConversation`, or
 * `parseDirectives` of a single text). Reply text: json / words directive, else the tool results
 * echo (scripted conversations), else the tool preamble, else the echo.
 * `maxTokens` is the request's output limit (undefined → unlimited).
 */
export function buildReplyPlan(script: ParsedScript, maxTokens: number | undefined): ReplyPlan {
  const d = script.directives;
  let reasoning = d.thinking ? THINKING_TEXT : '';
  let text: string;
  if (d.json !== undefined) text = d.json;
  else if (d.words !== undefined) text = makeWords(d.words);
  else if (script.toolResults !== undefined && script.toolResults.length > 0) {
    text = TOOL_RESULTS_PREFIX + script.toolResults.join(TOOL_RESULTS_SEPARATOR);
  } else if (d.tools.length > 0) text = TOOL_PREAMBLE;
  else text = script.text === '' ? EMPTY_ECHO_TEXT : `Echo: ${script.text}`;

  let toolCalls: PlannedToolCall[] = d.tools.map((t) => ({
    name: t.name,
    input: t.input,
    arguments: JSON.stringify(t.input),
    tokens: toolCallTokens(t.input),
  }));

  const reasoningWords = countWords(reasoning);
  const textWords = countWords(text);
  const total = reasoningWords + textWords + toolCalls.reduce((s, t) => s + t.tokens, 0);
  let truncated = false;
  let outputTokens = total;
  let reasoningTokens = reasoningWords;
  if (maxTokens !== undefined && total > maxTokens) {
    truncated = true;
    outputTokens = maxTokens;
    let remaining = maxTokens;
    const keepReasoning = Math.min(remaining, reasoningWords);
    reasoning = firstWords(reasoning, keepReasoning);
    reasoningTokens = keepReasoning;
    remaining -= keepReasoning;
    const keepText = Math.min(remaining, textWords);
    text = firstWords(text, keepText);
    remaining -= keepText;
    const kept: PlannedToolCall[] = [];
    for (const call of toolCalls) {
      if (call.tokens > remaining) break;
      kept.push(call);
      remaining -= call.tokens;
    }
    toolCalls = kept;
  }

  return {
    directives: d,
    reasoning: d.thinking && reasoning !== '' ? reasoning : null,
    text,
    toolCalls,
    truncated,
    outputTokens,
    reasoningTokens,
  };
}

// ---------------------------------------------------------------------------------------------
// HTTP plumbing shared by both servers
// ---------------------------------------------------------------------------------------------

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves `true` after `ms`, or `false` as soon as the response is closed (client gone / server closed). */
export function waitUnlessClosed(res: http.ServerResponse, ms: number): Promise<boolean> {
  if (res.destroyed || res.writableEnded) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onClose = (): void => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      res.off('close', onClose);
      resolve(!res.destroyed);
    }, ms);
    res.once('close', onClose);
  });
}

/** Writes `chunk` and resolves once it has been handed to the OS (or the socket failed). */
export function writeAndFlush(res: http.ServerResponse, chunk: string): Promise<void> {
  return new Promise((resolve) => {
    res.write(chunk, () => resolve());
  });
}

function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    req.on('error', reject);
  });
}

export interface IncomingCall {
  req: http.IncomingMessage;
  res: http.ServerResponse;
  record: RecordedRequest;
  /** Whether the body was present but not valid JSON. */
  invalidJson: boolean;
}

/**
 * How many requests a simulated upstream keeps in `requests`: the most recent ones, oldest dropped first; `received`
 * counts them all. Enough for any test (tests read the last few, or clear the history and read what follows), while a
 * long `npm start` session or a soak run holds at most this many bodies instead of every body it was ever sent.
 */
export const REQUEST_HISTORY_LIMIT = 1_000;

/**
 * Starts a `node:http` server that reads + records each request, then hands it to `handler`.
 * `close()` stops listening and destroys every open socket.
 */
export async function startHttpServer(
  opts: StartUpstreamOptions | undefined,
  handler: (call: IncomingCall) => Promise<void> | void,
  onHandlerError: (call: IncomingCall, err: unknown) => void,
): Promise<SimulatedUpstream> {
  const requests: RecordedRequest[] = [];
  let received = 0;
  const sockets = new Set<Socket>();
  const server = http.createServer({ noDelay: true, keepAlive: true }, (req, res) => {
    readBody(req).then(
      async (raw) => {
        let body: unknown;
        let invalidJson = false;
        if (raw.trim() !== '') {
          try {
            body = JSON.parse(raw);
          } catch {
            invalidJson = true;
          }
        }
        const headers: Record<string, string> = {};
        for (const [k, v] of Object.entries(req.headers)) {
          if (v !== undefined) headers[k.toLowerCase()] = Array.isArray(v) ? v.join(', ') : v;
        }
        const url = req.url ?? '/';
        const q = url.indexOf('?');
        const record: RecordedRequest = {
          method: req.method ?? 'GET',
          path: q < 0 ? url : url.slice(0, q),
          url,
          headers,
          body,
        };
        // Through `push`, which a test may wrap to watch arrivals (test/support/inflight.ts); then the oldest go.
        requests.push(record);
        received++;
        if (requests.length > REQUEST_HISTORY_LIMIT) requests.splice(0, requests.length - REQUEST_HISTORY_LIMIT);
        if (res.writableEnded || res.destroyed) record.outcome = res.writableFinished ? 'completed' : 'client_closed';
        else res.once('close', () => (record.outcome = res.writableFinished ? 'completed' : 'client_closed'));
        const call: IncomingCall = { req, res, record, invalidJson };
        try {
          await handler(call);
        } catch (err) {
          onHandlerError(call, err);
        }
      },
      () => {
        req.socket.destroy();
      },
    );
  });
  server.on('connection', (socket: Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  });
  const host = opts?.host ?? '127.0.0.1';
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts?.port ?? 0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address();
  if (address === null || typeof address === 'string') throw new Error('simulated upstream: unexpected address');
  const port = address.port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${port}`,
    port,
    requests,
    get received() {
      return received;
    },
    close(): Promise<void> {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
        for (const s of sockets) s.destroy();
      });
      return closing;
    },
  };
}

/** Sends a JSON response with the given extra headers. */
export function sendJson(res: http.ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  if (res.destroyed || res.headersSent) return;
  const payload = JSON.stringify(body);
  res.writeHead(status, {
    ...headers,
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(payload),
  });
  res.end(payload);
}

/** Starts an SSE response: status 200, `text/event-stream`, no content-length, Nagle disabled. */
export function startSse(res: http.ServerResponse, headers: Record<string, string> = {}): void {
  res.socket?.setNoDelay(true);
  res.writeHead(200, {
    ...headers,
    'content-type': 'text/event-stream',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
  });
  res.flushHeaders();
}

export interface SseScript {
  /** Fully framed SSE events, sent in order. */
  events: string[];
  delayMs?: number;
  resetAfter?: number;
  streamErrorAfter?: number;
  /** Framed mid-stream error event sent for `streamErrorAfter`. */
  errorEvent: string;
}

/**
 * Sends framed SSE events honouring delay / reset-after / stream-error-after, where an "event"
 * is one entry of `events` (the error event itself is not counted). Ends the response.
 */
export async function runSse(req: http.IncomingMessage, res: http.ServerResponse, s: SseScript): Promise<void> {
  const delay = s.delayMs ?? 0;
  for (let i = 0; i <= s.events.length; i++) {
    if (res.destroyed) return;
    const atEnd = i === s.events.length;
    const interrupt = i === s.resetAfter || i === s.streamErrorAfter;
    if (atEnd && !interrupt) break;
    if (i > 0 && delay > 0 && !(await waitUnlessClosed(res, delay))) return;
    if (s.resetAfter !== undefined && i === s.resetAfter) {
      req.socket.destroy();
      return;
    }
    if (s.streamErrorAfter !== undefined && i === s.streamErrorAfter) {
      res.end(s.errorEvent);
      return;
    }
    const event = s.events[i];
    if (event === undefined) break;
    // Before an abrupt reset make sure the preceding events really left the process.
    if (s.resetAfter !== undefined && i + 1 === s.resetAfter) await writeAndFlush(res, event);
    else res.write(event);
  }
  res.end();
}

/** Streams a scripted reply: starts the SSE response, then plays `events` with the directives' delays and faults. */
export async function streamScripted(
  call: { req: http.IncomingMessage; res: http.ServerResponse },
  headers: Record<string, string>,
  events: string[],
  d: Pick<Directives, 'delayMs' | 'resetAfter' | 'streamErrorAfter'>,
  errorEvent: string,
): Promise<void> {
  startSse(call.res, headers);
  await runSse(call.req, call.res, { events, delayMs: d.delayMs, resetAfter: d.resetAfter, streamErrorAfter: d.streamErrorAfter, errorEvent });
}

/**
 * What a simulator answers when its own code throws: a 500 in its provider's envelope while nothing has been sent,
 * else the connection is cut (a half-sent answer cannot be repaired).
 */
export function simulatorBug(errorBody: (status: number, message: string) => unknown): (call: IncomingCall, err: unknown) => void {
  return ({ res }, err) => {
    if (!res.headersSent) sendJson(res, 500, errorBody(500, `Simulated upstream bug: ${String(err)}`));
    else res.destroy();
  };
}
