import { routeModel } from '../routing/route.ts';

/**
 * An UPPER BOUND on the input tokens a provider bills for a request, computed before the provider counts, so that the
 * reservation (`worstCaseMicros` in reservation.ts) is never smaller than what the request can cost. The same body may go to Anthropic
 * unchanged or be translated for OpenAI / OpenRouter (lambdas/providers/chat-completions/request.ts), so every term holds for
 * both. Each term says why it is a bound, and what it assumes where the provider documents nothing better.
 *
 * 1. Text: tokens ≤ UTF-8 bytes. OpenAI's o200k (and cl100k) and Claude's public tokenizer are byte-level BPEs:
 *    every token stands for at least one byte of the text it encodes, so no text of n bytes can become more than n
 *    tokens, whatever its script — CJK, emoji, base64, digits, whitespace or random code points. (Claude 3+'s own
 *    tokenizer is unpublished: that it is byte-level too is the one assumption here.) Claude's public tokenizer
 *    first applies Unicode NFKC, which can lengthen text (U+FDFA is 3 bytes, 33 after NFKC, and 15 Claude tokens),
 *    so a string counts the larger of its bytes before and after NFKC. A lone surrogate counts 6 bytes, the length
 *    of its `\uXXXX` escape (a tokenizer sees it as U+FFFD, 3 bytes, or as the escape). Text is what a provider
 *    passes to its tokenizer as it is: `text` and `thinking` of blocks, string `content` (messages, tool results,
 *    mid-conversation system messages) and a text document's `data`.
 * 2. Structured values — tool definitions, `tool_use` inputs, ids, names, signatures, and every other field — are
 *    re-serialised by the provider, so a string counts as the longest JSON literal a common encoder can make of it
 *    (quotes; `\"` `\\`; `\u00XX` for controls; `\uXXXX` per UTF-16 unit for non-ASCII as with Python's
 *    ensure_ascii; `<` `>` `&` as `\u003c`… as with HTML-safe encoders) or of its NFKC form, whichever is longer,
 *    plus the JSON punctuation around it, plus STRUCTURED_NODE_TOKENS for every key and every value: room for what a
 *    renderer may add per value beyond compact JSON (a line break and indentation; XML-like parameter tags;
 *    OpenAI's TypeScript-like rendering of function schemas). A number counts as JavaScript prints it plus 2
 *    (`5` may be rendered `5.0`); an integer beyond 2^53 counts all its digits (a provider may keep it exact); one
 *    too large for a double (read as ±Infinity) counts MAX_NUMBER_LITERAL_BYTES. What renderers add per value is
 *    an assumption (providers do not publish their templates), sized with margin.
 * 3. Template tokens that are no bytes of the request: REQUEST_OVERHEAD_TOKENS once, MESSAGE_OVERHEAD_TOKENS per
 *    message, BLOCK_OVERHEAD_TOKENS per content block, TOOL_OVERHEAD_TOKENS per tool, SYSTEM_PREAMBLE_TOKENS once
 *    for each hidden system prompt a feature adds (tools, structured output, citations), and
 *    ANTHROPIC_DEFINED_TOOL_TOKENS per Anthropic-defined tool (`type` other than `custom`).
 * 4. Images: the most any image can cost on the provider the model routes to, whatever its size or source
 *    (CLAUDE_IMAGE_MAX_TOKENS for claude-* models, OPENAI_IMAGE_MAX_TOKENS for every other model).
 * 5. Documents (Anthropic only: the translation refuses them): a text document by its bytes (1.); a `content`
 *    document by its blocks; a base64 PDF by its decoded size plus PDF_DOCUMENT_ALLOWANCE_TOKENS — an ASSUMPTION,
 *    not a proof (see PDF_TOKENS_PER_BYTE); a PDF the body only names (`url`, `file`) by UNSEEN_DOCUMENT_TOKENS.
 *
 * NOT bounded by anything in the body, so not by this estimate: what server tools bring into the context while the
 * request runs (web search and web fetch results, code execution output: billed as input, and re-billed on each
 * sampling iteration), tools listed by remote MCP servers (`mcp_servers`), skills loaded into a container, and
 * encrypted content (thinking signatures, redacted thinking, `encrypted_content` of search results) when it stands
 * for more tokens than its own bytes.
 *
 * Measured (test/metering/estimate.test.ts, against js-tiktoken o200k_base and @anthropic-ai/tokenizer on an
 * adversarial corpus): never below the real count; estimate ÷ real is about 5.5 for English prose (median), 1.6–2.4
 * for CJK, emoji, base64, JSON-looking text and mixed scripts, and down to about 1.1 for random code points, where
 * tokens come close to bytes — the bound cannot be tighter without knowing the vocabulary.
 *
 * Cost: one pass over the body, linear in its size (NFKC runs only on strings that are not pure ASCII). The walk uses
 * an explicit stack, never recursion: it runs on client data, and although the body's depth is bounded
 * (lambdas/http/limits.ts), nothing here may depend on that to stay within the call stack.
 */

/** Start and end of the conversation, reply priming (OpenAI documents 3 tokens), the system prompt's wrapper, and
 *  lines providers add once per request (Claude 4.5 models state their context budget). */
export const REQUEST_OVERHEAD_TOKENS = 64;
/** Role markers and separators of one message: OpenAI documents 3 (4 with a name); Claude's wrapper is a handful. */
export const MESSAGE_OVERHEAD_TOKENS = 16;
/**
 * One content block: the separator between blocks (system blocks are joined with a blank line), and the wrapper of
 * a block that becomes a message of its own when translated (a tool result is an OpenAI `tool` message: 3-4 tokens,
 * plus `Error: ` when is_error; a tool_reference becomes `Tool loaded: <name>`), and Claude's context-awareness line
 * after a tool result (Claude 4.5 models, about 20 tokens).
 */
export const BLOCK_OVERHEAD_TOKENS = 32;
/** Per key and per value of a structured value (tool schemas and inputs), beyond its compact JSON bytes. */
export const STRUCTURED_NODE_TOKENS = 2;
/**
 * A hidden system prompt a feature adds. Tools: Anthropic documents its tool-use system prompt per model and
 * tool_choice — 346 tokens (auto/none) and 313 (any/tool) on Claude 4 models; the largest published figure is 530
 * (Claude 3 Opus, auto); OpenAI's `namespace functions` header is a few dozen. The same allowance is assumed for the
 * prompts of structured outputs (`output_config.format`, `output_format`) and citations, which are not published.
 */
export const SYSTEM_PREAMBLE_TOKENS = 800;
/** Wrapper around one tool definition (OpenAI: `type name = (_: {…}) => any;` and its comments). */
export const TOOL_OVERHEAD_TOKENS = 32;
/**
 * An Anthropic-defined tool (bash, text editor, computer use, web search…) is declared in a few bytes but expands
 * server-side. Published figures: bash 245 tokens, text editor 700, computer use 735 plus a 466–499 token system
 * prompt; 1,500 covers the largest (1,234), and is assumed for those without a published figure.
 */
export const ANTHROPIC_DEFINED_TOOL_TOKENS = 1_500;
/**
 * The most one image costs on Claude. Claude bills an image by 28×28-pixel patches (⌈w/28⌉ × ⌈h/28⌉; earlier docs
 * w·h/750) after resizing it to the model's maximal native resolution: 1,568 px on the long edge and about 1,600
 * tokens on models before Opus 4.7; 2,576 px and 4,784 visual tokens on Opus 4.7 and later, the largest. The
 * image's wrapper is within BLOCK_OVERHEAD_TOKENS.
 */
export const CLAUDE_IMAGE_MAX_TOKENS = 4_784;
/**
 * The most one image costs on an OpenAI model at detail `high` (the translation sends none, so `auto`, which may
 * pick high). Tile models scale the image into 2048×2048, then its short side to 768 px: at most 2 × 4 tiles of
 * 512 px; gpt-4o-mini bills 2,833 + 5,667 per tile = 48,169, the dearest published rate (gpt-4o and gpt-4.1:
 * 85 + 170 per tile = 1,445; o1/o3: 75 + 150; gpt-5: 70 + 140). Patch models (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/
 * nano) bill at most 1,536 (2,500 on later models) 32-px patches × a multiplier ≤ 2.46: under 6,200. Used for
 * OpenRouter too, whose models follow their vendors' rules: the figure covers the published ones we know (Gemini,
 * Qwen-VL, Claude), an assumption for others.
 */
export const OPENAI_IMAGE_MAX_TOKENS = 2_833 + 8 * 5_667;
/**
 * A base64 PDF counts one token per byte of the decoded file, plus PDF_DOCUMENT_ALLOWANCE_TOKENS. ASSUMPTION, not a
 * proof: Claude bills each page as its extracted text plus an image of the page (Anthropic: typically 1,500–3,000
 * tokens a page), and neither is bounded by the file's size — text may be compressed inside the file, and a nearly
 * empty page is a few hundred bytes but still a full page image. The figure covers PDFs of at least ~3 KB a page
 * (what common tools produce for text pages with fonts) plus, through the allowance, a few pages cheaper than that.
 * A true bound needs the page count (Anthropic caps it at 100 or 600 pages a request) or a parse of the file.
 */
export const PDF_TOKENS_PER_BYTE = 1;
/** Per base64 PDF: one full page image on the newest Claude models plus about 5,000 tokens of text beyond its bytes. */
export const PDF_DOCUMENT_ALLOWANCE_TOKENS = 10_000;
/**
 * A document the body only names (`url` or `file` source): nothing in the body bounds it, but the prompt cannot
 * exceed the context window, 200,000 tokens on Claude's standard models (an assumption for 1M-context requests).
 */
export const UNSEEN_DOCUMENT_TOKENS = 200_000;
/**
 * Text of a document or search result with citations enabled counts this many times its bytes: Anthropic splits it
 * into sentences and marks each (not published; assumed to cost no more than the sentence itself).
 */
export const CITED_TEXT_FACTOR = 2;
/** A number literal too large for a double: Python's json reads up to 4,300 digits exactly; plus sign and `.0`. */
export const MAX_NUMBER_LITERAL_BYTES = 4_303;

/** The parts of a Messages body the estimate reads (any shape: it runs on client data, before full validation). */
export interface EstimatedBody {
  model?: unknown;
  system?: unknown;
  messages?: unknown;
  tools?: unknown;
  tool_choice?: unknown;
  output_config?: unknown;
  output_format?: unknown;
  /** OpenAI's structured output (a Chat Completions body passed through, metering/chat-call.ts). */
  response_format?: unknown;
  /** Anthropic's automatic prompt caching: one breakpoint for the whole request. */
  cache_control?: unknown;
}

/** The input bound, and whether the request can write the prompt cache at all. */
export interface InputEstimate {
  tokens: number;
  /**
   * Whether a `cache_control` key appears anywhere the estimate reads (blocks, tools, the top level). A provider
   * writes its cache (at a rate above plain input) only at such breakpoints, so without one the input side of the
   * reservation is priced at the plain input rate (docs/contract.md, "Reservation").
   */
  cacheControl: boolean;
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: the range is all of ASCII, control characters included
const NON_ASCII = /[^\x00-\x7f]/;

/**
 * UTF-8 bytes of `s`, a lone surrogate counting 6; with `json`, as a JSON string literal: 2 quotes, `\"` and `\\`,
 * `\u00XX` for controls and DEL, `\u003c`-style for `<` `>` `&` (HTML-safe encoders).
 */
function utf8Length(s: string, json: boolean): number {
  let n = json ? 2 : 0;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) {
      if (!json) n += 1;
      else if (c < 0x20 || c === 0x7f || c === 0x3c || c === 0x3e || c === 0x26) n += 6;
      else n += c === 0x22 || c === 0x5c ? 2 : 1;
    } else if (c < 0x800) n += 2;
    else if (c >= 0xd800 && c <= 0xdbff && i + 1 < s.length && (s.charCodeAt(i + 1) & 0xfc00) === 0xdc00) {
      n += 4;
      i++;
    } else if ((c & 0xf800) === 0xd800) n += 6;
    else n += 3;
  }
  return n;
}

/** Length of `s` as a pure-ASCII JSON literal: every non-ASCII UTF-16 unit as `\uXXXX`, other escapes as above. */
function asciiJsonLength(s: string): number {
  let n = 2;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0x80 || c < 0x20 || c === 0x7f || c === 0x3c || c === 0x3e || c === 0x26) n += 6;
    else n += c === 0x22 || c === 0x5c ? 2 : 1;
  }
  return n;
}

/** Bound for a piece of text (1.). */
function textBytes(s: string): number {
  if (!NON_ASCII.test(s)) return s.length;
  return Math.max(utf8Length(s, false), utf8Length(s.normalize('NFKC'), false));
}

/** Bound for a string inside a structured value (2.), its quotes included. */
function structuredStringBytes(s: string): number {
  const escaped = asciiJsonLength(s);
  if (!NON_ASCII.test(s)) return escaped;
  return Math.max(escaped, utf8Length(s.normalize('NFKC'), true));
}

/** Bound for a scalar other than a string inside a structured value (2.). */
function scalarBytes(value: unknown): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) return MAX_NUMBER_LITERAL_BYTES;
    const printed = String(value).length + 2;
    const magnitude = Math.abs(value);
    return magnitude >= 2 ** 53 ? Math.max(printed, Math.floor(Math.log10(magnitude)) + 4) : printed;
  }
  if (typeof value === 'bigint') return String(value).length + 2;
  return 5; // true, false, null (and anything else a caller might pass: it has no JSON form to count)
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

const TEXT = 0;
const STRUCTURED = 1;
/** Message content: a string (text), or content blocks (an array of them, or one block object). */
const CONTENT = 2;
type Mode = typeof TEXT | typeof STRUCTURED | typeof CONTENT;

export function estimateInputTokens(body: EstimatedBody): number {
  return estimateInput(body).tokens;
}

export function estimateInput(body: EstimatedBody): InputEstimate {
  const imageTokens = typeof body.model === 'string' && routeModel(body.model).provider === 'anthropic' ? CLAUDE_IMAGE_MAX_TOKENS : OPENAI_IMAGE_MAX_TOKENS;
  let tokens = REQUEST_OVERHEAD_TOKENS;
  let bytes = 0;
  let citations = false;
  let cacheControl = body.cache_control !== undefined && body.cache_control !== null;
  // The stack, as parallel arrays (no object per frame): a value, its mode, and its factor (CITED_TEXT_FACTOR
  // inside a block with citations enabled, else 1).
  const values: unknown[] = [];
  const modes: Mode[] = [];
  const factors: number[] = [];
  const push = (value: unknown, mode: Mode, factor = 1) => {
    if (value === undefined) return;
    values.push(value);
    modes.push(mode);
    factors.push(factor);
  };
  /** A key of a structured object: its literal, the colon, and the per-node allowance. */
  const key = (name: string, factor: number) => {
    if (name === 'cache_control') cacheControl = true;
    bytes += factor * (structuredStringBytes(name) + 1 + STRUCTURED_NODE_TOKENS);
  };
  /** A value inside a structured value: a leaf is counted at once, an array or object waits on the stack. */
  const structured = (value: unknown, factor: number) => {
    if (typeof value === 'string') bytes += factor * (structuredStringBytes(value) + STRUCTURED_NODE_TOKENS);
    else if (typeof value !== 'object' || value === null) bytes += factor * (scalarBytes(value) + STRUCTURED_NODE_TOKENS);
    else push(value, STRUCTURED, factor);
  };

  push(body.system, CONTENT);

  if (Array.isArray(body.messages)) {
    for (const message of body.messages) {
      tokens += MESSAGE_OVERHEAD_TOKENS;
      if (!isRecord(message)) {
        structured(message, 1);
        continue;
      }
      for (const name of Object.keys(message)) {
        if (name === 'content') push(message[name], CONTENT);
        else {
          key(name, 1);
          structured(message[name], 1);
        }
      }
    }
  } else push(body.messages, STRUCTURED);

  const tools = body.tools;
  if (Array.isArray(tools)) {
    if (tools.length > 0) tokens += SYSTEM_PREAMBLE_TOKENS;
    for (const tool of tools) {
      tokens += TOOL_OVERHEAD_TOKENS;
      const type = isRecord(tool) ? tool.type : undefined;
      // An OpenAI function tool is the client's own schema, like Anthropic's `custom` one.
      if (type !== undefined && type !== null && type !== 'custom' && type !== 'function') tokens += ANTHROPIC_DEFINED_TOOL_TOKENS;
      structured(tool, 1);
    }
  } else if (tools !== undefined && tools !== null) {
    tokens += SYSTEM_PREAMBLE_TOKENS;
    structured(tools, 1);
  }
  push(body.tool_choice, STRUCTURED);

  const formats = [isRecord(body.output_config) ? body.output_config.format : undefined, body.output_format, body.response_format];
  for (const format of formats) {
    if (format === undefined || format === null) continue;
    tokens += SYSTEM_PREAMBLE_TOKENS;
    structured(format, 1);
  }

  while (values.length > 0) {
    const value = values.pop();
    const mode = modes.pop()!;
    const factor = factors.pop()!;
    if (typeof value === 'string') {
      bytes += factor * (mode === STRUCTURED ? structuredStringBytes(value) + STRUCTURED_NODE_TOKENS : textBytes(value));
      continue;
    }
    if (typeof value !== 'object' || value === null) {
      bytes += factor * (scalarBytes(value) + STRUCTURED_NODE_TOKENS);
      continue;
    }
    if (Array.isArray(value)) {
      if (mode === CONTENT) {
        for (const item of value) push(item, CONTENT, factor); // an array of content blocks costs only its blocks
        continue;
      }
      bytes += factor * (2 + value.length + STRUCTURED_NODE_TOKENS); // brackets, commas
      for (const item of value) structured(item, factor);
      continue;
    }
    const record = value as Record<string, unknown>;
    if (mode !== CONTENT) {
      bytes += factor * (2 + STRUCTURED_NODE_TOKENS);
      for (const name of Object.keys(record)) {
        key(name, factor);
        structured(record[name], factor);
      }
      continue;
    }

    // A content block.
    tokens += BLOCK_OVERHEAD_TOKENS;
    const type = record.type;
    // OpenAI's content parts (a Chat Completions body passed through) are bounded like Anthropic's blocks: an
    // `image_url` part is an image, a `file` part a document (inline data per byte, a file id unseen).
    if (type === 'image' || type === 'image_url') {
      tokens += imageTokens;
      continue;
    }
    if (type === 'file' && isRecord(record.file)) {
      const data = record.file.file_data;
      tokens +=
        typeof data === 'string' ? factor * PDF_TOKENS_PER_BYTE * Math.ceil((data.length * 3) / 4) + PDF_DOCUMENT_ALLOWANCE_TOKENS : UNSEEN_DOCUMENT_TOKENS;
      continue;
    }
    let inner = factor;
    if (isRecord(record.citations) && record.citations.enabled === true) {
      citations = true;
      inner = Math.max(factor, CITED_TEXT_FACTOR); // never compounded, however deep such blocks nest
    }
    if (type === 'tool_result' && typeof record.tool_use_id === 'string') {
      // Translated, a tool result with images names its call again: `Image output of tool call <id>:`.
      bytes += structuredStringBytes(record.tool_use_id);
    }
    for (const name of Object.keys(record)) {
      const item = record[name];
      if (type === 'document' && name === 'source' && isRecord(item)) {
        const data = item.data;
        if (item.type === 'base64' && typeof data === 'string') {
          tokens += inner * PDF_TOKENS_PER_BYTE * Math.ceil((data.length * 3) / 4) + PDF_DOCUMENT_ALLOWANCE_TOKENS;
        } else if (item.type === 'text') push(data, typeof data === 'string' ? TEXT : STRUCTURED, inner);
        else if (item.type === 'content') push(item.content, CONTENT, inner);
        else if (item.type === 'url' || item.type === 'file') tokens += UNSEEN_DOCUMENT_TOKENS;
        else {
          key(name, inner);
          structured(item, inner);
        }
      } else if (name === 'text' || name === 'thinking') {
        push(item, typeof item === 'string' ? TEXT : STRUCTURED, inner);
      } else if (name === 'content') {
        push(item, CONTENT, inner);
      } else {
        key(name, inner);
        structured(item, inner);
      }
    }
  }
  if (citations) tokens += SYSTEM_PREAMBLE_TOKENS;
  return { tokens: Math.ceil(tokens + bytes), cacheControl };
}
