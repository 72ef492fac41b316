import type { App } from './fuzz-oracle.ts';
import type { RawResponse } from './raw-http.ts';

/**
 * The error envelopes of docs/contract.md: the proxy answers Anthropic's `{"type":"error","error":{"type","message"}}`
 * with the type its table gives each status; conjure answers `{"error": <string>, "message"?: <string>}`. Every
 * response of either app carries `request-id: req_gw_<24 hex>`. Returns what is wrong (empty when nothing is).
 */
export const PROXY_ERROR_TYPE: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  403: 'permission_error',
  404: 'not_found_error',
  405: 'invalid_request_error',
  413: 'request_too_large',
  429: 'rate_limit_error',
  500: 'api_error',
  529: 'overloaded_error',
};

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

export function proxyEnvelopeProblem(status: number, body: unknown): string | undefined {
  if (!isObject(body) || body.type !== 'error' || !isObject(body.error)) return 'not the proxy envelope {"type":"error","error":{…}}';
  const { type, message } = body.error;
  if (typeof type !== 'string' || type === '') return 'error.type is not a non-empty string';
  const want = PROXY_ERROR_TYPE[status];
  if (want && type !== want) return `error.type is ${JSON.stringify(type)}, the contract gives ${status} → ${want}`;
  if (typeof message !== 'string' || message.trim() === '') return 'error.message is not a non-empty string';
  return undefined;
}

export function conjureEnvelopeProblem(body: unknown): string | undefined {
  if (!isObject(body) || typeof body.error !== 'string' || body.error === '') return 'not the conjure envelope {"error": <string>, "message"?}';
  if (body.message !== undefined && typeof body.message !== 'string') return 'message is present but not a string';
  if (body.type === 'error') return 'conjure answered in the proxy envelope';
  return undefined;
}

/** OpenAI's envelope, on POST /v1/chat/completions: `{"error":{"message","type","param","code"}}`. */
export function openaiEnvelopeProblem(body: unknown): string | undefined {
  const error = isObject(body) ? body.error : undefined;
  if (!isObject(error) || typeof error.message !== 'string' || typeof error.type !== 'string' || !('param' in error) || !('code' in error)) {
    return 'not the OpenAI envelope {"error":{"message","type","param","code"}}';
  }
  return undefined;
}

export function responseProblems(res: RawResponse, app: App, method: string): string[] {
  const problems: string[] = [];
  const rid = res.headers['request-id'];
  if (typeof rid !== 'string' || !/^req_gw_[0-9a-f]{24}$/.test(rid)) problems.push(`request-id header is ${JSON.stringify(rid)}, expected req_gw_<24 hex>`);
  if (res.status >= 400 && method !== 'HEAD') {
    let body: unknown;
    try {
      body = JSON.parse(res.text);
    } catch {
      problems.push(`error body is not JSON: ${JSON.stringify(res.text.slice(0, 200))}`);
      return problems;
    }
    if (!String(res.headers['content-type']).includes('application/json')) problems.push(`error content-type is ${res.headers['content-type']}`);
    if (app === 'openai') {
      const openai = openaiEnvelopeProblem(body);
      if (openai) problems.push(`OpenAI route: ${openai}`);
      return problems;
    }
    const proxy = proxyEnvelopeProblem(res.status, body);
    const conjure = conjureEnvelopeProblem(body);
    if (app === 'proxy' && proxy) problems.push(`proxy path: ${proxy}`);
    if (app === 'conjure' && conjure) problems.push(`conjure path: ${conjure}`);
    if (app === 'either' && proxy && conjure) problems.push(`neither envelope: ${proxy}; ${conjure}`);
  }
  return problems;
}

/** The SSE events of a body, in order, as { event, data } with data parsed when it is JSON. */
export function sseEvents(text: string): { event: string; data: unknown }[] {
  const out: { event: string; data: unknown }[] = [];
  for (const frame of text.split(/\r?\n\r?\n/)) {
    if (frame.trim() === '') continue;
    let event = 'message';
    const data: string[] = [];
    for (const line of frame.split(/\r?\n/)) {
      if (line.startsWith('event:')) event = line.slice(6).trim();
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
    }
    const joined = data.join('\n');
    let parsed: unknown = joined;
    try {
      parsed = JSON.parse(joined);
    } catch {
      // keep the text
    }
    out.push({ event, data: parsed });
  }
  return out;
}

/**
 * Node refuses a header section over 16 KB (its default `maxHeaderSize`) before any app sees the request; the local
 * runtime then answers 431 itself, as JSON. Requests whose headers come near that size may get it.
 */
export const NODE_MAX_HEADER_BYTES = 16 * 1024;

export function headerBytes(method: string, path: string, headers: Record<string, string>): number {
  let n = method.length + path.length + 12;
  for (const [k, v] of Object.entries(headers)) n += k.length + Buffer.byteLength(v, 'latin1') + 4;
  return n;
}

/** What a parser-level refusal (400 unreadable, 431 headers too large) must look like: JSON with a string `error`. */
export function parserAnswerProblems(res: RawResponse): string[] {
  try {
    const body = JSON.parse(res.text) as { error?: unknown };
    return typeof body.error === 'string' && body.error !== '' ? [] : ['parser-level answer without a string "error"'];
  } catch {
    return [`parser-level ${res.status} answer is not JSON: ${JSON.stringify(res.text.slice(0, 100))}`];
  }
}
