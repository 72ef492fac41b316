import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { requireJsonContentType } from '../../lambdas/http/body.ts';
import { buildRequest, headersFrom } from '../../lambdas/http/request.ts';
import { liveLeases } from '../../lambdas/plans/leases.ts';
import { Refused } from '../../lambdas/refusals/refusal.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { idempotencyItems, MODEL, runQueueCounts, vesselApi, vesselItems } from '../vessels/incubate-client.ts';

/**
 * DESIGN §10, "No simple cross-origin requests that do work": /prompt, /incubate and /incubate/batch carry the token
 * in the body, so they take only `application/json` (parameters allowed, the media type in any case) and answer
 * anything else — no Content-Type at all, `text/plain`, a form, multipart — with 415 `unsupported_media_type` before
 * the body is read or the token looked at. Otherwise a page on any origin could spend a user's budget with a CORS
 * "simple" request, which the browser sends without a preflight. The proxy routes (token in a header) and the
 * bodiless routes are not concerned.
 */

const ROUTES = ['/prompt', '/incubate', '/incubate/batch'] as const;
type Route = (typeof ROUTES)[number];

/** Content types a browser may send cross-origin without a preflight (and none at all), with the 415's message. */
const REFUSED: [label: string, contentType: string | undefined, message: string][] = [
  ['missing', undefined, 'Content-Type must be application/json, got none'],
  ['text/plain', 'text/plain;charset=UTF-8', 'Content-Type must be application/json, got "text/plain;charset=UTF-8"'],
  ['form', 'application/x-www-form-urlencoded', 'Content-Type must be application/json, got "application/x-www-form-urlencoded"'],
  ['multipart', 'multipart/form-data; boundary=----fuzz', 'Content-Type must be application/json, got "multipart/form-data; boundary=----fuzz"'],
];
const ACCEPTED = ['application/json', 'application/json; charset=utf-8', 'Application/JSON'];

let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

/** A valid body for the route: the token in `options.token`, vessels a day ahead (stored, never run here). */
function bodyFor(route: Route, token: string | undefined, key: string): Record<string, unknown> {
  const options = { ...(token === undefined ? {} : { token }), model: MODEL };
  if (route === '/prompt') return { message: 'Say hello. [[words:3]]', options };
  if (route === '/incubate') return { message: 'Say hello.', idempotencyKey: key, options, ttl: 86_400 };
  return { items: [{ message: 'Say hello.', idempotencyKey: key }], options, ttl: 86_400 };
}

/**
 * POSTs the body's JSON text with exactly the given Content-Type (none when undefined: the body goes as bytes, for
 * which fetch adds no Content-Type of its own) and any extra headers.
 */
async function post(route: Route, body: unknown, contentType: string | undefined, headers: Record<string, string> = {}) {
  const res = await fetch(`${gw.url}${route}`, {
    method: 'POST',
    headers: { ...(contentType === undefined ? {} : { 'content-type': contentType }), ...headers },
    body: new TextEncoder().encode(JSON.stringify(body)),
  });
  const text = await res.text();
  let parsed: unknown = text;
  try {
    parsed = JSON.parse(text);
  } catch {
    // not JSON: compared as text
  }
  return { status: res.status, body: parsed };
}

/** The key's vessel and idempotency items, as stored (the table is the source of truth). */
async function storedFor(key: string) {
  const vessels = (await vesselItems(gw.projectId)).filter((i) => i.idempotencyKey === key);
  const keys = (await idempotencyItems(gw.projectId)).filter((i) => i.idempotencyKey === key);
  return { vessels: vessels.length, keys: keys.length };
}

describe('requireJsonContentType', () => {
  const req = (contentType?: string) =>
    new Request('https://gateway.invalid/prompt', {
      method: 'POST',
      headers: contentType === undefined ? {} : { 'content-type': contentType },
      body: new Uint8Array([0x7b, 0x7d]),
    });
  const refusal = (contentType?: string) => {
    try {
      requireJsonContentType(req(contentType));
      return undefined;
    } catch (err) {
      if (!(err instanceof Refused)) throw err;
      return err.refusal;
    }
  };

  it('passes application/json with parameters, in any case, with spaces around the media type', () => {
    for (const ct of [...ACCEPTED, 'application/json;charset=UTF-8', 'APPLICATION/JSON ; charset=utf-8', 'application/json;'])
      expect(refusal(ct), ct).toBeUndefined();
  });

  it('refuses every other media type, naming what came', () => {
    for (const [, ct, message] of REFUSED) expect(refusal(ct)).toEqual({ kind: 'unsupported_media_type', message });
    for (const ct of ['text/json', 'application/jsonx', 'application/json-patch+json', 'application/vnd.api+json', 'json', '', 'application/ json'])
      expect(refusal(ct), ct).toEqual({ kind: 'unsupported_media_type', message: `Content-Type must be application/json, got ${JSON.stringify(ct)}` });
  });

  it('shows at most 100 characters of a long Content-Type', () => {
    const ct = `text/plain; x=${'a'.repeat(200)}`;
    expect(refusal(ct)).toEqual({
      kind: 'unsupported_media_type',
      message: `Content-Type must be application/json, got ${JSON.stringify(`${ct.slice(0, 100)}…`)}`,
    });
  });

  it('the AWS adapters keep a missing Content-Type missing (a string body would get text/plain from Request)', async () => {
    const built = buildRequest({ method: 'POST', path: '/prompt', headers: headersFrom({}), body: '{"message":"hi"}' });
    expect(built.headers.get('content-type')).toBeNull();
    expect(await built.text()).toBe('{"message":"hi"}');
    expect(refusal(undefined)).toEqual({ kind: 'unsupported_media_type', message: 'Content-Type must be application/json, got none' });
  });
});

describe('over HTTP: each route × each content type', () => {
  it.each(ROUTES)('%s: 415 unsupported_media_type for a missing, text/plain, form or multipart body, even with a valid token', async (route) => {
    const user = `ct-refused-${++seq}`;
    const token = await gw.token({ user });
    for (const [label, contentType, message] of REFUSED) {
      const key = `ct-${route}-${label}-${seq}`;
      expect({ label, ...(await post(route, bodyFor(route, token, key), contentType)) }).toEqual({
        label,
        status: 415,
        body: { error: 'unsupported_media_type', message },
      });
      expect(await storedFor(key)).toEqual({ vessels: 0, keys: 0 });
    }
    const usage = await vesselApi(gw).usage(token);
    expect({ ai: usage.ai, compute: usage.compute }).toEqual({
      ai: { used: 0, remaining: 10_000_000, budget: 10_000_000, reserved: 0, overrun: 0 },
      compute: { used: 0, remaining: 3600, budget: 3600, reserved: 0 },
    });
  });

  it.each(ROUTES)('%s: application/json with or without parameters, in any case, is read (here: 401 for the missing token)', async (route) => {
    const expected = { error: 'invalid_token', message: 'Missing token: send it in options.token' };
    for (const contentType of ACCEPTED) {
      expect({ contentType, ...(await post(route, bodyFor(route, undefined, `ct-ok-${++seq}`), contentType)) }).toEqual({
        contentType,
        status: 401,
        body: expected,
      });
    }
  });

  it('a body that is not JSON at all is still a 415 first, not a 400', async () => {
    for (const route of ROUTES) {
      const res = await fetch(`${gw.url}${route}`, { method: 'POST', body: new URLSearchParams({ message: 'hi', token: 'x' }) });
      expect({ route, status: res.status, body: await res.json() }).toEqual({
        route,
        status: 415,
        body: { error: 'unsupported_media_type', message: 'Content-Type must be application/json, got "application/x-www-form-urlencoded;charset=UTF-8"' },
      });
    }
  });
});

describe('the attack: a cross-origin "simple" request with a valid token', () => {
  it('POST /prompt as text/plain from another origin: 415, the ledger untouched; the same body as JSON runs and is charged', async () => {
    const user = `ct-prompt-${++seq}`;
    const token = await gw.token({ user });
    const api = vesselApi(gw);
    const before = await api.usage(token);
    expect({ ai: before.ai, compute: before.compute }).toEqual({
      ai: { used: 0, remaining: 10_000_000, budget: 10_000_000, reserved: 0, overrun: 0 },
      compute: { used: 0, remaining: 3600, budget: 3600, reserved: 0 },
    });

    // What a page's `fetch(url, {method: 'POST', body: JSON.stringify(...)})` sends: a string body, so text/plain.
    const res = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { origin: 'https://evil.example' },
      body: JSON.stringify(bodyFor('/prompt', token, '')),
    });
    expect({ status: res.status, body: await res.json() }).toEqual({
      status: 415,
      body: { error: 'unsupported_media_type', message: 'Content-Type must be application/json, got "text/plain;charset=UTF-8"' },
    });
    await gw.invocationsDone();
    expect(await api.usage(token)).toEqual(before);
    expect(await liveLeases(gw.developerId)).toEqual([]);

    // The control: the very same body, declared as JSON, is a charged run — so the 415 above is what stopped it.
    const ran = await post('/prompt', bodyFor('/prompt', token, ''), 'application/json');
    expect(ran.status, JSON.stringify(ran.body)).toBe(200);
    await gw.invocationsDone();
    const after = await api.usage(token);
    expect(after.ai.used).toBe((ran.body as { result: { total_cost_microdollars: number } }).result.total_cost_microdollars);
    expect(after.ai.used).toBeGreaterThan(0);
  });

  it('POST /incubate and /incubate/batch as text/plain from another origin: 415, no vessel, no key, nothing queued, no budget used', async () => {
    const user = `ct-incubate-${++seq}`;
    const token = await gw.token({ user });
    const api = vesselApi(gw);
    const before = await api.usage(token);
    for (const route of ['/incubate', '/incubate/batch'] as const) {
      const key = `ct-attack-${route}-${seq}`;
      const res = await fetch(`${gw.url}${route}`, {
        method: 'POST',
        headers: { origin: 'https://evil.example' },
        body: JSON.stringify(bodyFor(route, token, key)),
      });
      expect({ route, status: res.status, body: await res.json() }).toEqual({
        route,
        status: 415,
        body: { error: 'unsupported_media_type', message: 'Content-Type must be application/json, got "text/plain;charset=UTF-8"' },
      });
      expect(await storedFor(key)).toEqual({ vessels: 0, keys: 0 });
    }
    await gw.invocationsDone();
    expect(await runQueueCounts(gw)).toEqual({ visible: 0, inFlight: 0, delayed: 0 });
    expect(await api.usage(token)).toEqual(before);

    // The control: the same /incubate body as JSON is queued and stored.
    const key = `ct-attack-control-${seq}`;
    const queued = await post('/incubate', bodyFor('/incubate', token, key), 'application/json');
    expect(queued.status, JSON.stringify(queued.body)).toBe(202);
    expect(await storedFor(key)).toEqual({ vessels: 1, keys: 1 });
  });
});

describe('not on the other routes', () => {
  it('the proxy (token in a header) and the bodiless conjure routes do not look at the Content-Type', async () => {
    const token = await gw.token({ user: `ct-other-${++seq}` });
    const usage = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' } });
    expect(usage.status).toBe(200);
    const cancel = await fetch(`${gw.url}/incubate/vessel/v_nope/cancel`, { method: 'POST', headers: { authorization: `Bearer ${token}` } });
    expect(cancel.status).toBe(404);
    const models = await fetch(`${gw.url}/v1/models`, { headers: { 'x-api-key': token, 'content-type': 'text/plain' } });
    expect(models.status).toBe(200);
    const count = await fetch(`${gw.url}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: { 'x-api-key': token, 'anthropic-version': '2023-06-01', 'content-type': 'text/plain' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(count.status, await count.text()).not.toBe(415);
    // The OpenAI-compatible route matches the proxy's other routes (docs/openai.md).
    const chat = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'text/plain' },
      body: JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(chat.status, await chat.text()).toBe(200);
  });
});
