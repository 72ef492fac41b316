import { describe, expect, it } from 'vitest';
import { buildRequest, headersFrom, type RawRequest } from '../../lambdas/http/request.ts';
import { refusalOf } from './refusal.ts';

/** buildRequest and headersFrom: what both AWS adapters share when they turn an event into a web Request. */

const ORIGIN = 'https://gateway.invalid';
const build = (raw: Partial<RawRequest> = {}) => buildRequest({ method: 'GET', path: '/', headers: new Headers(), ...raw });

describe('buildRequest: the URL', () => {
  it('has a fixed origin whatever the Host header says, and keeps the Host header among the headers', () => {
    for (const host of ['a b', '[::1', 'user@evil.example', 'evil.example/v1/models', 'evil.example:443', '']) {
      const req = build({ path: '/v1/models', headers: headersFrom({ host }) });
      const url = new URL(req.url);
      expect(url.origin, host).toBe(ORIGIN);
      expect(url.pathname, host).toBe('/v1/models');
      expect(req.headers.get('host'), host).toBe(host);
    }
  });

  it('a path that looks like an authority stays a path', () => {
    const url = new URL(build({ path: '//evil.example/x' }).url);
    expect(url.origin).toBe(ORIGIN);
    expect(url.pathname).toBe('//evil.example/x');
  });

  it('a path without its leading slash gets one', () => {
    expect(build({ path: 'v1/models' }).url).toBe(`${ORIGIN}/v1/models`);
    expect(build({ path: '' }).url).toBe(`${ORIGIN}/`);
  });

  it('`?` and `#` inside the path are encoded: they are path characters there, not a query or fragment', () => {
    const url = new URL(build({ path: '/v1/models/a?b#c' }).url);
    expect(url.pathname).toBe('/v1/models/a%3Fb%23c');
    expect(url.search).toBe('');
    expect(url.hash).toBe('');
  });

  it('the query comes from its own field, verbatim, with no `?` when empty', () => {
    expect(new URL(build({ path: '/v1/models', query: 'limit=1&after_id=a%20b' }).url).search).toBe('?limit=1&after_id=a%20b');
    expect(build({ path: '/v1/models', query: '' }).url).toBe(`${ORIGIN}/v1/models`);
    expect(build({ path: '/v1/models' }).url).toBe(`${ORIGIN}/v1/models`);
  });

  it('characters a URL cannot hold raw are percent-encoded, not refused', () => {
    expect(new URL(build({ path: '/a b/é' }).url).pathname).toBe('/a%20b/%C3%A9');
  });

  it('the URL parser resolves dot segments and reads a backslash as a slash (the https scheme’s rules)', () => {
    expect(new URL(build({ path: '/v1/../usage' }).url).pathname).toBe('/usage');
    expect(new URL(build({ path: '/v1\\messages' }).url).pathname).toBe('/v1/messages');
  });
});

describe('buildRequest: the method', () => {
  it.each(['CONNECT', 'TRACE', 'TRACK', 'trace', 'Connect', 'track'])('%s → 405 method_not_allowed in the caller’s spelling', (method) => {
    expect(refusalOf(() => build({ method }))).toEqual({
      status: 405,
      kind: 'method_not_allowed',
      message: `The ${method} method is not supported`,
    });
  });

  it.each([[''], ['GE T'], ['GET\r\n'], ['É'], ['GET/1'], ['(GET)']])('%j, not an HTTP token → 405', (method) => {
    expect(refusalOf(() => build({ method }))).toMatchObject({ status: 405, message: `The ${method} method is not supported` });
  });

  it('a long bad method is quoted to 32 characters', () => {
    const method = `${'X'.repeat(40)} Y`;
    expect(refusalOf(() => build({ method })).message).toBe(`The ${'X'.repeat(32)} method is not supported`);
  });

  it('standard methods in lower case are upper-cased by Request; extension methods keep their spelling', () => {
    expect(build({ method: 'get' }).method).toBe('GET');
    expect(build({ method: 'post' }).method).toBe('POST');
    expect(build({ method: 'PROPFIND' }).method).toBe('PROPFIND');
    expect(build({ method: 'propfind' }).method).toBe('propfind');
  });
});

describe('buildRequest: the body', () => {
  it.each(['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PROPFIND'])('%s carries a text body', async (method) => {
    expect(await build({ method, body: '{"a":1}' }).text()).toBe('{"a":1}');
  });

  it('a Buffer body arrives byte for byte', async () => {
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
    const req = build({ method: 'POST', body: bytes });
    expect(Buffer.from(await req.arrayBuffer())).toEqual(bytes);
  });

  it.each(['GET', 'HEAD', 'get', 'head'])('%s drops a body (Fetch cannot carry one) instead of failing', (method) => {
    const req = build({ method, body: 'ignored' });
    expect(req.body).toBeNull();
  });

  it('no body → a null body; an empty one → an empty body', async () => {
    expect(build({ method: 'POST' }).body).toBeNull();
    const empty = build({ method: 'POST', body: '' });
    expect(empty.body).not.toBeNull();
    expect(await empty.text()).toBe('');
  });

  it('the headers pass through as given', () => {
    const req = build({ method: 'POST', headers: headersFrom({ 'content-type': 'application/json', 'x-api-key': 'k' }), body: '{}' });
    expect(req.headers.get('content-type')).toBe('application/json');
    expect(req.headers.get('x-api-key')).toBe('k');
  });
});

describe('headersFrom', () => {
  const entries = (h: Headers) => [...h.entries()];

  it('copies every defined value, names case-insensitive and lower-cased', () => {
    const h = headersFrom({ 'Content-Type': 'application/json', 'X-Api-Key': 'k', missing: undefined });
    expect(entries(h)).toEqual([
      ['content-type', 'application/json'],
      ['x-api-key', 'k'],
    ]);
    expect(h.has('missing')).toBe(false);
  });

  it('a value AWS has already joined (repeated header) passes through as one comma-separated value', () => {
    expect(headersFrom({ accept: 'application/json, text/event-stream' }).get('accept')).toBe('application/json, text/event-stream');
  });

  it('the same name in two spellings is not joined: the last one wins (as implemented: set, not append)', () => {
    expect(headersFrom({ 'X-A': '1', 'x-a': '2' }).get('x-a')).toBe('2');
  });

  it('surrounding whitespace is trimmed, inner tabs and Latin-1 kept', () => {
    const h = headersFrom({ padded: '  v  ', tab: 'a\tb', latin: 'caf\u00e9' });
    expect(h.get('padded')).toBe('v');
    expect(h.get('tab')).toBe('a\tb');
    expect(h.get('latin')).toBe('caf\u00e9');
  });

  it('drops what Fetch refuses (bad names, CR/LF/NUL, code points above U+00FF) and keeps the rest', () => {
    const h = headersFrom({
      'a b': 'x',
      'a\nb': 'x',
      é: 'x',
      crlf: 'v\r\nx-injected: 1',
      nul: 'a\0b',
      emoji: '🙂',
      kept: 'yes',
    });
    expect(entries(h)).toEqual([['kept', 'yes']]);
  });

  it('an empty record is an empty Headers', () => {
    expect(entries(headersFrom({}))).toEqual([]);
  });
});
