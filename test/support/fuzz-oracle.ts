import { hasDuplicateKeys } from '../../lambdas/auth/json-keys.ts';
import { jsonDepth } from '../../lambdas/http/body.ts';
import { charge, priceFor, type ModelPricing, type PriceProvider } from '../../lambdas/pricing/prices.ts';
import type { Credentials, FuzzContext, GoodToken } from '../fuzz/arbitraries.ts';
import { MODELS, validLimit } from '../fuzz/arbitraries.ts';

/**
 * What the gateway must answer to a request, decided from the bytes sent and the written contract (docs/contract.md,
 * the robustness brief), not from the gateway's code. Where the contract leaves the order of two refusals open (a bad
 * token AND a bad body), every answer it allows is accepted; elsewhere the status is exact.
 *
 * The one thing read from the code is the price catalog (`priceFor`): whether a model name has a price is catalog
 * data, and the contract says only that an unpriced model is refused.
 */

/** `openai`: the channeling URL's OpenAI-compatible route, which answers in OpenAI's envelope (docs/openai.md). */
export type App = 'proxy' | 'openai' | 'conjure' | 'either';
export type RouteName =
  | 'messages'
  | 'count_tokens'
  | 'chat_completions'
  | 'models'
  | 'model'
  | 'usage'
  | 'prompt'
  | 'incubate'
  | 'incubate_batch'
  | 'vessel'
  | 'vessel_cancel'
  | 'openapi';

export interface PathInfo {
  app: App;
  route?: RouteName;
  /** The raw (still percent-encoded) {id} of GET /v1/models/{id}, or the {vesselId} of a vessel route. */
  id?: string;
  query: string;
  /** Some percent-encoding in the path does not decode (`%FF`, `%`, `%zz`). */
  malformed: boolean;
}

const ROUTES: [RegExp, RouteName][] = [
  [/^\/v1\/messages\/?$/, 'messages'],
  [/^\/v1\/messages\/count_tokens\/?$/, 'count_tokens'],
  [/^\/v1\/chat\/completions\/?$/, 'chat_completions'],
  [/^\/v1\/models\/?$/, 'models'],
  [/^\/v1\/models\/([^/]+)\/?$/, 'model'],
  [/^\/usage\/?$/, 'usage'],
  [/^\/prompt\/?$/, 'prompt'],
  [/^\/incubate\/?$/, 'incubate'],
  [/^\/incubate\/batch\/?$/, 'incubate_batch'],
  [/^\/incubate\/vessel\/([^/]+)\/?$/, 'vessel'],
  [/^\/incubate\/vessel\/([^/]+)\/cancel\/?$/, 'vessel_cancel'],
  [/^\/openapi\.json\/?$/, 'openapi'],
];
export const ROUTE_METHOD: Record<RouteName, string> = {
  messages: 'POST',
  count_tokens: 'POST',
  chat_completions: 'POST',
  models: 'GET',
  model: 'GET',
  usage: 'GET',
  prompt: 'POST',
  incubate: 'POST',
  incubate_batch: 'POST',
  vessel: 'GET',
  vessel_cancel: 'POST',
  openapi: 'GET',
};

const decodes = (s: string): boolean => {
  try {
    decodeURIComponent(s);
    return true;
  } catch {
    return false;
  }
};

/**
 * The normalisation the brief asks for: repeated slashes collapse, the `/v1/` prefix matches in any case, the rest
 * keeps its case and its percent-encoding; the Host header plays no part.
 */
export function classifyPath(target: string): PathInfo {
  const q = target.indexOf('?');
  const raw = q < 0 ? target : target.slice(0, q);
  const query = q < 0 ? '' : target.slice(q + 1);
  let path = raw.replace(/\/{2,}/g, '/');
  let app: App = 'conjure';
  if (/^\/v1\//i.test(path)) {
    app = 'proxy';
    path = `/v1/${path.slice(4)}`;
  } else if (/^\/v1$/i.test(path)) app = 'either'; // "/v1" alone: the brief's rule says conjure, the runtime may say proxy
  const malformed = !decodes(raw);
  for (const [re, route] of ROUTES) {
    const m = re.exec(path);
    if (m) return { app: route === 'chat_completions' ? 'openai' : app, route, id: m[1], query, malformed };
  }
  return { app, query, malformed };
}

export interface Expectation {
  app: App;
  /** Every status the contract allows for this request. */
  statuses: number[];
  route?: RouteName;
  /** For a Messages request that may succeed: who pays, what model, whether it streams. */
  caller?: GoodToken;
  body?: Record<string, unknown>;
  why: string;
}

export interface FuzzRequestSpec {
  method: string;
  path: string;
  creds: Credentials;
  body?: Buffer;
  /** The Content-Type header as sent; undefined when none is. */
  contentType?: string;
}

/**
 * Whether a Content-Type is JSON as /prompt, /incubate and /incubate/batch require (DESIGN §10, docs/api.md): the media
 * type `application/json` in any case, parameters allowed.
 */
export const isJsonContentType = (contentType: string | undefined): boolean => contentType !== undefined && /^\s*application\/json\s*(;|$)/i.test(contentType);

const STANDARD_METHODS = new Set(['GET', 'POST', 'PUT', 'DELETE', 'PATCH', 'HEAD', 'OPTIONS']);
const uniq = (xs: number[]) => [...new Set(xs)].sort((a, b) => a - b);

export function expectFor(req: FuzzRequestSpec, ctx: FuzzContext): Expectation {
  const info = classifyPath(req.path);
  const base = { app: info.app, route: info.route };
  if (!info.route) {
    const statuses = info.malformed ? [400, 404] : [404];
    // TRACE, PROPFIND…: "unknown methods → 405" may be decided before the path is looked at.
    if (!STANDARD_METHODS.has(req.method)) statuses.push(405);
    return { ...base, statuses: uniq(statuses), why: `no route${info.malformed ? ' (malformed percent-encoding)' : ''}` };
  }
  const allowed = ROUTE_METHOD[info.route];
  if (req.method !== allowed) {
    const statuses = [405];
    if (info.malformed) statuses.push(400, 404);
    if (req.method === 'HEAD' && allowed === 'GET') statuses.push(...routeOutcome({ ...req, method: 'GET' }, info, ctx).statuses);
    if (req.method === 'OPTIONS') statuses.push(204);
    return { ...base, statuses: uniq(statuses), why: `${req.method} on a ${allowed} route` };
  }
  const out = routeOutcome(req, info, ctx);
  return { ...base, ...out, statuses: uniq(out.statuses) };
}

function routeOutcome(req: FuzzRequestSpec, info: PathInfo, ctx: FuzzContext): Omit<Expectation, 'app'> {
  const caller = req.creds.proxy;
  switch (info.route) {
    case 'usage':
      return req.creds.usage
        ? { statuses: [200], caller: req.creds.usage, why: 'GET /usage with a valid bearer token' }
        : { statuses: [401], why: 'GET /usage without a valid bearer token' };
    case 'models': {
      if (!caller) return { statuses: [401], why: 'no valid proxy credentials' };
      const limit = new URLSearchParams(info.query).get('limit');
      return limit === null || validLimit(limit) ? { statuses: [200], why: 'list models' } : { statuses: [400], why: `limit=${limit}` };
    }
    case 'model': {
      // docs/contract.md, Limits: "A path segment that is not valid percent-encoded UTF-8 (/v1/models/%FF) is a 400."
      if (info.malformed) return { statuses: [400], why: 'model id with malformed percent-encoding' };
      if (!caller) return { statuses: [401], why: 'no valid proxy credentials' };
      const id = decodeURIComponent(info.id!);
      return ctx.catalog.includes(id) ? { statuses: [200], why: `listed model ${id}` } : { statuses: [404], why: `unlisted model ${JSON.stringify(id)}` };
    }
    case 'messages':
    case 'count_tokens': {
      const judged = judgeBody(req.body ?? Buffer.alloc(0), info.route, ctx);
      if (!caller) return { statuses: judged.ok ? [401] : [401, ...judged.statuses], why: `no valid proxy credentials; body: ${judged.why}` };
      if (!judged.ok) return { statuses: judged.statuses, why: judged.why };
      const model = modelOutcome(judged.body, info.route);
      return { statuses: [...model.statuses, ...judged.alsoAllowed], caller, body: judged.body, why: `${judged.why}; ${model.why}` };
    }
    case 'chat_completions': {
      // A body for an OpenAI or OpenRouter model is judged exactly (judgeChatBody); one for a Claude model is
      // translated, and its bodies are fuzzed by the routing property only: refused (400, 413), or answered, clamped
      // or refused for the budget — never a 5xx. The caller is named so the ledger is checked too: no hold left, a
      // refusal charged nothing, an answer passed through charged exactly its usage × price.
      const judged = judgeChatBody(req.body ?? Buffer.alloc(0), ctx);
      if (!caller) return { statuses: judged.ok ? [401] : [401, ...judged.statuses], why: `no valid proxy credentials; body: ${judged.why}` };
      if (!judged.ok) return { statuses: judged.statuses, caller, why: judged.why };
      return { statuses: [...judged.statuses, ...judged.alsoAllowed], caller, body: judged.body, why: judged.why };
    }
    case 'prompt':
    case 'incubate':
    case 'incubate_batch':
      if (!isJsonContentType(req.contentType)) {
        // Only application/json: anything else, none included, is a 415 before the body or the token is read (DESIGN
        // §10; docs/api.md, "Conventions shared by all endpoints"); a body over the size limit may be refused first.
        const oversize = (req.body?.length ?? 0) > ctx.limits.maxBodyBytes;
        const sent = req.contentType === undefined ? 'no Content-Type' : `Content-Type ${req.contentType}`;
        return { statuses: oversize ? [413, 415] : [415], why: `POST to a ${info.route} route with ${sent}` };
      }
      if (info.route === 'prompt') {
        // The token travels in the body (options.token), so headers do not authorise: a fuzzed body is refused as bad
        // input, as unauthenticated, or as too large — never run, never a 5xx (docs/prompt.md).
        return { statuses: [400, 401, 413], why: 'POST /prompt with a fuzzed body' };
      }
      // As /prompt: the token is options.token in the body (docs/incubate.md), which no fuzzed body carries valid, so
      // the answer is a refusal of the body or of the token — never queued, never a 5xx.
      return { statuses: [400, 401, 413], why: `POST /incubate${info.route === 'incubate_batch' ? '/batch' : ''} with a fuzzed body` };
    case 'vessel':
    case 'vessel_cancel':
      // No fuzzed id names a vessel, and whoever asks, a vessel the token may not see is the same 404
      // (docs/incubate.md, "The record"); a path segment that does not decode is a 400 (docs/contract.md, Limits).
      return { statuses: info.malformed ? [400, 404] : [404], why: `${info.route === 'vessel' ? 'status' : 'cancel'} of a vessel that does not exist` };
    case 'openapi':
      // The API's description, for anyone: no token is read, whatever credentials come (docs/api.md).
      return { statuses: [200], why: 'GET /openapi.json needs no token' };
    default:
      throw new Error(`unhandled route ${info.route}`);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Bodies
// ---------------------------------------------------------------------------------------------------------------

type Judged = { ok: false; statuses: number[]; why: string } | { ok: true; body: Record<string, unknown>; alsoAllowed: number[]; why: string };

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const isBlock = (v: unknown) => isObject(v) && typeof v.type === 'string';

function validUtf8(bytes: Buffer): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes);
    return true;
  } catch {
    return false;
  }
}

/** The contract's validation of a Messages / count_tokens body (docs/contract.md "Validation", the brief's limits). */
/**
 * The body rules every JSON route shares (size, UTF-8, depth, JSON), with the latitude the contract leaves: a BOM may
 * be skipped, invalid UTF-8 replaced, duplicate keys read as JSON.parse does (`alsoAllowed`: a 400 is then fine too).
 */
function judgeJson(bytes: Buffer, ctx: FuzzContext): { ok: false; statuses: number[]; why: string } | { ok: true; value: unknown; alsoAllowed: number[] } {
  const { maxBodyBytes, maxJsonDepth } = ctx.limits;
  if (bytes.length > maxBodyBytes) return { ok: false, statuses: [413], why: `body of ${bytes.length} bytes` };
  const alsoAllowed: number[] = [];
  let text = bytes.toString('utf8');
  if (!validUtf8(bytes)) alsoAllowed.push(400);
  if (text.startsWith('\ufeff')) {
    text = text.slice(1);
    alsoAllowed.push(400);
  }
  const depth = jsonDepth(text);
  if (depth > maxJsonDepth) return { ok: false, statuses: [400], why: `JSON nested ${depth} deep` };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { ok: false, statuses: [400], why: 'not JSON' };
  }
  if (hasDuplicateKeys(text)) alsoAllowed.push(400);
  return { ok: true, value, alsoAllowed };
}

export function judgeBody(bytes: Buffer, route: 'messages' | 'count_tokens', ctx: FuzzContext): Judged {
  const json = judgeJson(bytes, ctx);
  if (!json.ok) return json;
  const { value, alsoAllowed } = json;
  const problem = schemaProblem(value, route, ctx.limits.maxTokensCeiling);
  if (problem) return { ok: false, statuses: [400], why: problem };
  return { ok: true, body: value as Record<string, unknown>, alsoAllowed, why: 'valid body' };
}

function schemaProblem(v: unknown, route: 'messages' | 'count_tokens', ceiling: number | undefined): string | undefined {
  if (!isObject(v)) return 'body is not an object';
  if (typeof v.model !== 'string' || v.model === '') return 'model';
  if (route === 'messages') {
    const mt = v.max_tokens;
    if (typeof mt !== 'number' || !Number.isInteger(mt) || mt < 1) return 'max_tokens';
    if (ceiling !== undefined && mt > ceiling) return 'max_tokens above the ceiling';
    if (v.stream !== undefined && typeof v.stream !== 'boolean') return 'stream';
  }
  if (!Array.isArray(v.messages)) return 'messages';
  for (const m of v.messages) {
    if (!isObject(m) || typeof m.role !== 'string') return 'message role';
    if (!(typeof m.content === 'string' || (Array.isArray(m.content) && m.content.every(isBlock)))) return 'message content';
  }
  if (v.system !== undefined && !(typeof v.system === 'string' || (Array.isArray(v.system) && v.system.every(isBlock)))) return 'system';
  return undefined;
}

/** The routing of docs/contract.md ("Proxy"), restated: claude-* → Anthropic; gpt-*, chatgpt-*, o1*, o3*, o4* → OpenAI; or:<id> and the rest → OpenRouter. */
export function providerOf(model: string): { provider: PriceProvider; upstream: string } {
  if (model.startsWith('or:')) return { provider: 'openrouter', upstream: model.slice(3) };
  if (model.startsWith('claude-')) return { provider: 'anthropic', upstream: model };
  if (/^(gpt-|chatgpt-|o1|o3|o4)/.test(model)) return { provider: 'openai', upstream: model };
  return { provider: 'openrouter', upstream: model };
}

/** The fuzz project's custom prices (set in the fuzz files' beforeAll). */
export const CUSTOM_PRICES = { [MODELS.openrouterPriced]: { inputUsdPerMtok: 1, outputUsdPerMtok: 2 } };

export function isPriced(model: string): boolean {
  const { provider, upstream } = providerOf(model);
  return priceFor(model, provider, CUSTOM_PRICES) !== undefined || priceFor(upstream, provider, CUSTOM_PRICES) !== undefined;
}

/** Plain enough that translation to Chat Completions must succeed: user/assistant text only, nothing extra. */
function plain(body: Record<string, unknown>): boolean {
  const textOnly = (c: unknown) =>
    typeof c === 'string' || (Array.isArray(c) && c.every((b) => isObject(b) && b.type === 'text' && typeof b.text === 'string'));
  const messages = body.messages as Record<string, unknown>[];
  return (
    Object.keys(body).every((k) => ['model', 'max_tokens', 'messages', 'system', 'stream'].includes(k)) &&
    messages.length > 0 &&
    messages.every((m) => (m.role === 'user' || m.role === 'assistant') && textOnly(m.content)) &&
    (body.system === undefined || textOnly(body.system))
  );
}

function modelOutcome(body: Record<string, unknown>, route: 'messages' | 'count_tokens'): { statuses: number[]; why: string } {
  const model = body.model as string;
  const { provider } = providerOf(model);
  if (provider === 'anthropic') {
    if (route === 'count_tokens') return { statuses: [200], why: `count_tokens for ${model}` };
    return isPriced(model) ? { statuses: [200], why: `priced Claude model ${model}` } : { statuses: [400], why: `unpriced model ${model}` };
  }
  // OpenAI and OpenRouter keys are set on the fuzz project; translation may refuse what it cannot map (400).
  if (route === 'messages' && !isPriced(model)) return { statuses: [400], why: `unpriced model ${JSON.stringify(model)}` };
  return plain(body)
    ? { statuses: [200], why: `plain request translated for ${provider}` }
    : { statuses: [200, 400], why: `request translated for ${provider}` };
}

// ---------------------------------------------------------------------------------------------------------------
// Chat Completions bodies (POST /v1/chat/completions)
// ---------------------------------------------------------------------------------------------------------------

type ChatJudged =
  | { ok: false; statuses: number[]; why: string }
  | { ok: true; body: Record<string, unknown>; statuses: number[]; alsoAllowed: number[]; why: string };

const present = (v: unknown) => v !== undefined && v !== null;
const isPositiveInteger = (v: unknown) => typeof v === 'number' && Number.isSafeInteger(v) && v >= 1;

/** OpenAI's largest `n` (docs/openai.md, "OpenAI and OpenRouter models"). */
const MAX_CHOICES = 128;

/**
 * What the gateway refuses of a body it passes through (docs/openai.md, "OpenAI and OpenRouter models"): only what it
 * needs to route, bound and meter the request — the output limits, `n` (above 1 for OpenAI only), `stream` and
 * `stream_options` shapes — and what it cannot meter (audio in or out, priority processing). Everything else is the
 * upstream's to judge.
 */
function passthroughProblem(v: Record<string, unknown>, provider: PriceProvider, maxTokensCeiling: number): string | undefined {
  for (const field of ['max_completion_tokens', 'max_tokens']) {
    if (present(v[field]) && !isPositiveInteger(v[field])) return `${field} ${JSON.stringify(v[field])} is not a positive integer`;
    if (present(v[field]) && (v[field] as number) > maxTokensCeiling) return `${field} ${v[field]} is above ${maxTokensCeiling}`;
  }
  if (present(v.n) && (!isPositiveInteger(v.n) || (v.n as number) > MAX_CHOICES)) return `n ${JSON.stringify(v.n)} is not from 1 to ${MAX_CHOICES}`;
  if (present(v.n) && (v.n as number) > 1 && provider !== 'openai') return `n ${v.n} for a ${provider} model`;
  if (present(v.stream) && typeof v.stream !== 'boolean') return 'stream is not a boolean';
  if (present(v.stream_options) && !isObject(v.stream_options)) return 'stream_options is not an object';
  if (present(v.audio)) return 'audio output';
  if (Array.isArray(v.modalities) && v.modalities.includes('audio')) return 'audio modality';
  if (Array.isArray(v.messages)) {
    for (const m of v.messages) {
      if (isObject(m) && Array.isArray(m.content) && m.content.some((p) => isObject(p) && p.type === 'input_audio')) return 'an input_audio part';
    }
  }
  if (v.service_tier === 'priority' || v.service_tier === 'scale') return `service_tier ${v.service_tier}`;
  return undefined;
}

/**
 * The route's judgement of a body: the same body rules as the Anthropic route (size, UTF-8, depth, JSON, an object
 * with a model), then, for an OpenAI or OpenRouter model, the passthrough's own checks, the price, and the one
 * thing the simulated upstream refuses of what is generated (`messages` not an array): exactly 200 or 400.
 */
export function judgeChatBody(bytes: Buffer, ctx: FuzzContext): ChatJudged {
  const json = judgeJson(bytes, ctx);
  if (!json.ok) return json;
  const { value, alsoAllowed } = json;
  if (!isObject(value)) return { ok: false, statuses: [400], why: 'body is not an object' };
  const model = value.model;
  if (typeof model !== 'string' || model === '') return { ok: false, statuses: [400], why: 'model' };
  const { provider } = providerOf(model);
  // A Claude model: translated to Anthropic's format (test/openai-ingress/translation.test.ts judges that exactly).
  if (provider === 'anthropic') return { ok: true, body: value, statuses: [200, 400, 413, 429], alsoAllowed, why: `translated for ${model}` };
  const problem = passthroughProblem(value, provider, ctx.limits.maxTokensCeiling ?? 1_000_000);
  if (problem) return { ok: false, statuses: [400, ...alsoAllowed], why: problem };
  if (!isPriced(model)) return { ok: false, statuses: [400, ...alsoAllowed], why: `unpriced model ${JSON.stringify(model)}` };
  if (!Array.isArray(value.messages)) return { ok: false, statuses: [400, ...alsoAllowed], why: 'messages is not an array (the upstream’s 400)' };
  return { ok: true, body: value, statuses: [200], alsoAllowed, why: `passed through to ${provider}` };
}

/** Whether a Chat Completions body goes through to OpenAI or OpenRouter (not translated to Anthropic). */
export const isPassthrough = (body: Record<string, unknown> | undefined): boolean =>
  typeof body?.model === 'string' && providerOf(body.model).provider !== 'anthropic';

/** The price a passed-through model is metered at: a custom price of its name or upstream name, else the catalog's. */
export function chatPricing(model: string): ModelPricing | undefined {
  const { provider, upstream } = providerOf(model);
  for (const name of [model, upstream]) if (Object.hasOwn(CUSTOM_PRICES, name)) return priceFor(name, provider, CUSTOM_PRICES);
  return priceFor(upstream, provider, CUSTOM_PRICES);
}

export interface ChatUsage {
  prompt_tokens: number;
  completion_tokens: number;
  prompt_tokens_details?: { cached_tokens?: number | null } | null;
}

/**
 * The charge of a passed-through answer from its usage (docs/openai.md): the prompt less its cached part at the input
 * rate, the cached part at the cache-read rate, the completion (all choices) at the output rate, and one web search's
 * fee when `web_search_options` asked for one.
 */
export function chatChargeOf(body: Record<string, unknown>, usage: ChatUsage): number {
  const pricing = chatPricing(body.model as string);
  if (!pricing) throw new Error(`no price for ${String(body.model)}`);
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  return charge(pricing, {
    input_tokens: usage.prompt_tokens - cached,
    output_tokens: usage.completion_tokens,
    cache_read_input_tokens: cached,
    web_search_requests: present(body.web_search_options) ? 1 : 0,
  }).microdollars;
}
