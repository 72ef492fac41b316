import { readFileSync } from 'node:fs';
import { Ajv2020 } from 'ajv/dist/2020.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { OPENAPI_FILE } from '../../lambdas/openapi/document.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { vesselApi } from '../vessels/incubate-client.ts';
import { startReceiver, type Receiver } from '../webhooks/receiver.ts';

/**
 * Real answers of the local gateway against docs/openapi.json: each status is one the operation documents, its body
 * valid against the documented schema of its content type (SSE: each event's data), its headers against theirs. The
 * answers' schemas are written by hand (lambdas/openapi/schemas.ts, checked at compile time against the code's
 * types); this is where they meet what the routes really send.
 */

interface Media {
  schema?: unknown;
}
interface DocResponse {
  $ref?: string;
  headers?: Record<string, { $ref?: string; schema?: unknown }>;
  content?: Record<string, Media>;
}
interface Doc {
  paths: Record<string, Record<string, { responses: Record<string, DocResponse> }>>;
  components: { responses: Record<string, DocResponse>; headers: Record<string, { schema: unknown }> };
}

const doc = JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')) as Doc;
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(doc as object, 'openapi');

/** A JSON pointer into the document, as a reference Ajv resolves (the components' `$ref`s resolve against it). */
const pointer = (...segments: string[]) => `openapi#/${segments.map((s) => encodeURIComponent(s.replace(/~/g, '~0').replace(/\//g, '~1'))).join('/')}`;
const validator = (ref: string) => ajv.getSchema(ref) ?? ajv.compile({ $ref: ref });

interface Answer {
  status: number;
  headers: Headers;
  text: string;
}
const answer = async (res: Response): Promise<Answer> => ({ status: res.status, headers: res.headers, text: await res.text() });

/** Server-Sent Events: each event's name and parsed data. */
function sseEvents(text: string): Array<{ event: string; data: unknown }> {
  return text
    .split('\n\n')
    .filter((block) => block.trim())
    .map((block) => {
      const lines = block.split('\n');
      const event =
        lines
          .find((l) => l.startsWith('event:'))
          ?.slice(6)
          .trim() ?? 'message';
      const data = lines
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).trimStart())
        .join('\n');
      return { event, data: JSON.parse(data) as unknown };
    });
}

/** Asserts `res`, an answer of `METHOD /path-template`, is what the document says; returns the parsed body. */
function conforms(route: string, res: Answer, expectedStatus: number): unknown {
  const [method, path] = route.split(' ') as [string, string];
  const what = `${route} → ${res.status} ${res.text.slice(0, 300)}`;
  expect(res.status, what).toBe(expectedStatus);
  const operation = doc.paths[path]?.[method.toLowerCase()];
  expect(operation, `${route} is documented`).toBeDefined();
  let response = operation!.responses[String(res.status)];
  let at = ['paths', path, method.toLowerCase(), 'responses', String(res.status)];
  expect(response, `${what}: the status is documented`).toBeDefined();
  if (response!.$ref) {
    const name = response!.$ref.split('/').pop()!;
    response = doc.components.responses[name];
    at = ['components', 'responses', name];
  }
  // Headers: request-id on every answer; each documented header present is valid against its schema.
  expect(res.headers.get('request-id'), what).toMatch(/^req_gw_[0-9a-f]{24}$/);
  for (const [name, header] of Object.entries(response!.headers ?? {})) {
    const value = res.headers.get(name);
    if (value === null) continue;
    const schema = header.$ref ? doc.components.headers[header.$ref.split('/').pop()!]!.schema : header.schema;
    const check = ajv.compile(schema as object);
    expect(check(value), `${what}: header ${name}: ${value}`).toBe(true);
  }
  const type = (res.headers.get('content-type') ?? '').split(';')[0]!.trim();
  expect(Object.keys(response!.content ?? {}), `${what}: content type ${type} is documented`).toContain(type);
  if (type === 'text/event-stream') return sseEvents(res.text);
  const body = JSON.parse(res.text) as unknown;
  const check = validator(pointer(...at, 'content', type, 'schema'));
  expect(check(body) ? [] : check.errors, what).toEqual([]);
  return body;
}

/** Each event of /prompt's stream against the documented event data. */
function conformingEvents(events: Array<{ event: string; data: unknown }>) {
  const message = validator('openapi#/components/schemas/PromptStreamMessage');
  const done = validator('openapi#/components/schemas/PromptStreamDone');
  for (const { event, data } of events) {
    const check = event === 'done' ? done : message;
    expect(check(data) ? [] : check.errors, `${event}: ${JSON.stringify(data)}`).toEqual([]);
  }
}

const MODEL = 'claude-sonnet-4-6';
const MESSAGE = { model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: 'Hello [[words:3]]' }] };

let gw: TestGateway;
let rx: Receiver;
let token: string;
beforeAll(async () => {
  [gw, rx] = await Promise.all([startTestGateway(), startReceiver()]);
  token = await gw.token({ user: 'openapi-user' });
}, 60_000);
afterAll(async () => {
  await Promise.all([gw?.stop(), rx?.close()]);
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${gw.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  }).then(answer);
const get = (path: string, headers: Record<string, string> = {}) => fetch(`${gw.url}${path}`, { headers }).then(answer);

describe('GET /openapi.json', () => {
  it('serves docs/openapi.json without a token, cacheable for 5 minutes', async () => {
    const res = await get('/openapi.json');
    expect(conforms('GET /openapi.json', res, 200)).toEqual(JSON.parse(readFileSync(OPENAPI_FILE, 'utf8')));
    expect(res.headers.get('cache-control')).toBe('public, max-age=300');
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });

  it('from a page: readable across origins like every route (CORS), no token asked for', async () => {
    const res = await get('/openapi.json', { origin: 'https://docs.example' });
    conforms('GET /openapi.json', res, 200);
    expect(res.headers.get('access-control-allow-origin')).toBe('https://docs.example');
  });
});

describe('the channeling URL answers as documented', () => {
  const proxy = (extra: Record<string, string> = {}) => ({ 'x-api-key': token, 'anthropic-version': '2023-06-01', ...extra });

  it('POST /v1/messages: JSON, a stream, and its errors', async () => {
    conforms('POST /v1/messages', await post('/v1/messages', MESSAGE, proxy()), 200);
    const stream = await post('/v1/messages', { ...MESSAGE, stream: true }, proxy());
    conforms('POST /v1/messages', stream, 200);
    conforms('POST /v1/messages', await post('/v1/messages', { ...MESSAGE, max_tokens: 0 }, proxy()), 400);
    conforms('POST /v1/messages', await post('/v1/messages', MESSAGE), 401);
    const broke = await gw.token({ user: 'openapi-broke', budget: { ai: 0 } });
    conforms('POST /v1/messages', await post('/v1/messages', MESSAGE, proxy({ 'x-api-key': broke })), 429);
  });

  it('POST /v1/chat/completions: JSON and its errors in OpenAI’s envelope', async () => {
    const chat = { model: MESSAGE.model, messages: MESSAGE.messages, max_tokens: MESSAGE.max_tokens };
    const path = 'POST /v1/chat/completions';
    conforms(path, await post('/v1/chat/completions', chat, proxy()), 200);
    conforms(path, await post('/v1/chat/completions', { ...chat, n: 2 }, proxy()), 400);
    conforms(path, await post('/v1/chat/completions', chat), 401);
    const broke = await gw.token({ user: 'openapi-chat-broke', budget: { ai: 0 } });
    conforms(path, await post('/v1/chat/completions', chat, proxy({ 'x-api-key': broke })), 429);
  });

  it('POST /v1/messages/count_tokens, GET /v1/models and /v1/models/{id}', async () => {
    const { max_tokens: _, ...count } = MESSAGE;
    conforms('POST /v1/messages/count_tokens', await post('/v1/messages/count_tokens', count, proxy()), 200);
    conforms('GET /v1/models', await get('/v1/models?limit=5', proxy()), 200);
    conforms('GET /v1/models', await get('/v1/models?limit=0', proxy()), 400);
    conforms('GET /v1/models/{id}', await get(`/v1/models/${MODEL}`, proxy()), 200);
    conforms('GET /v1/models/{id}', await get('/v1/models/nope', proxy()), 404);
  });
});

describe('the prompt URL answers as documented', () => {
  it('POST /prompt: JSON, SSE (each event’s data), and its refusals', async () => {
    const body = { message: 'Hello [[words:4]]', options: { token, model: MODEL } };
    conforms('POST /prompt', await post('/prompt', body), 200);
    const sse = conforms('POST /prompt', await post('/prompt', body, { accept: 'text/event-stream' }), 200) as Array<{ event: string; data: unknown }>;
    expect(sse.map((e) => e.event).at(-1)).toBe('done');
    conformingEvents(sse);
    conforms('POST /prompt', await post('/prompt', { ...body, options: { ...body.options, maxTurn: 2 } }), 400);
    conforms('POST /prompt', await post('/prompt', { message: 'hi', options: {} }), 401);
    conforms('POST /prompt', await post('/prompt', JSON.stringify(body), { 'content-type': 'text/plain' }), 415);
    const noCompute = await gw.token({ user: 'openapi-no-compute', budget: { compute: 0 } });
    conforms('POST /prompt', await post('/prompt', { ...body, options: { token: noCompute } }), 429);
  });
});

describe('the conjure URL answers as documented', () => {
  it('GET /usage', async () => {
    conforms('GET /usage', await get('/usage', { authorization: `Bearer ${token}` }), 200);
    conforms('GET /usage', await get('/usage'), 401);
  });

  it('/incubate, its replay and conflict, a batch, the record (with its output and webhook), cancel and its 409', async () => {
    const api = vesselApi(gw);
    const body = { message: 'Later [[words:2]]', idempotencyKey: 'openapi-1', options: { token, model: MODEL }, callback: { url: rx.url } };
    const queued = conforms('POST /incubate', await post('/incubate', body), 202) as { vesselId: string };
    conforms('POST /incubate', await post('/incubate', body), 200);
    conforms('POST /incubate', await post('/incubate', { ...body, message: 'Other' }), 409);
    conforms('POST /incubate', await post('/incubate', { ...body, idempotencyKey: undefined }), 400);
    conforms('POST /incubate', await post('/incubate', { ...body, options: { token: 'x.y.z' } }), 401);

    const batch = { items: [{ message: 'a', idempotencyKey: 'openapi-b1' }, { message: 'b' }], options: { token, model: MODEL }, ttl: 3600 };
    const batched = conforms('POST /incubate/batch', await post('/incubate/batch', batch), 202) as { items: Array<{ vesselId?: string }> };

    await api.until(queued.vesselId, token, (r) => r.webhook?.status === 'delivered');
    const record = conforms('GET /incubate/vessel/{vesselId}', await get(`/incubate/vessel/${queued.vesselId}`, { authorization: `Bearer ${token}` }), 200);
    expect(record).toMatchObject({ status: 'COMPLETED', output: { success: true }, webhook: { status: 'delivered' } });
    conforms('GET /incubate/vessel/{vesselId}', await get(`/incubate/vessel/${queued.vesselId}`), 404);

    const waiting = batched.items[0]!.vesselId!;
    const cancel = (id: string) => post(`/incubate/vessel/${id}/cancel`, '', { authorization: `Bearer ${token}` });
    expect(conforms('POST /incubate/vessel/{vesselId}/cancel', await cancel(waiting), 200)).toMatchObject({ status: 'CANCELED' });
    conforms('POST /incubate/vessel/{vesselId}/cancel', await cancel(waiting), 409);
    conforms('POST /incubate/vessel/{vesselId}/cancel', await cancel('no-such-vessel'), 404);
  });
});
