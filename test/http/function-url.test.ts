import type { IncomingMessage } from 'node:http';
import { Readable, Writable } from 'node:stream';
import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { functionUrlEvent } from '../../bin/local/events.ts';
import { requestFromFunctionUrl, streamingHandler, streamingResultFrom, type StreamingResult } from '../../lambdas/http/function-url.ts';
import { refusalOf } from './refusal.ts';

/**
 * The function-URL adapter (the proxy's channeling function, invoke mode RESPONSE_STREAM): an event as a web Request,
 * a Response as the streaming result middy pipes, and the wrapper that ends an invocation normally when the client
 * hung up mid-stream.
 */

/** A function-URL event as Lambda delivers it (payload format 2.0), for `POST /v1/messages` unless told otherwise. */
function fnUrlEvent(over: { method?: string } & Partial<LambdaFunctionURLEvent> = {}): LambdaFunctionURLEvent {
  const { method = 'POST', ...rest } = over;
  const rawPath = rest.rawPath ?? '/v1/messages';
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath,
    rawQueryString: '',
    headers: {
      host: 'abcdefghij.lambda-url.eu-west-1.on.aws',
      'content-type': 'application/json',
      'user-agent': 'Anthropic/JS 0.60.0',
      'x-amzn-trace-id': 'Root=1-68000000-000000000000000000000000',
      'x-forwarded-for': '203.0.113.7',
      'x-forwarded-port': '443',
      'x-forwarded-proto': 'https',
    },
    requestContext: {
      accountId: 'anonymous',
      apiId: 'abcdefghij',
      domainName: 'abcdefghij.lambda-url.eu-west-1.on.aws',
      domainPrefix: 'abcdefghij',
      http: { method, path: rawPath, protocol: 'HTTP/1.1', sourceIp: '203.0.113.7', userAgent: 'Anthropic/JS 0.60.0' },
      requestId: '6f1b6c9e-0000-4000-8000-000000000000',
      routeKey: '$default',
      stage: '$default',
      time: '28/May/2026:10:00:00 +0000',
      timeEpoch: 1_779_962_400_000,
    },
    isBase64Encoded: false,
    ...rest,
  };
}

describe('requestFromFunctionUrl', () => {
  it('method, raw path and query become the Request’s, on the fixed origin', () => {
    const req = requestFromFunctionUrl(fnUrlEvent({ method: 'GET', rawPath: '/v1/models', rawQueryString: 'limit=2&after_id=a%20b' }));
    expect(req.method).toBe('GET');
    expect(req.url).toBe('https://gateway.invalid/v1/models?limit=2&after_id=a%20b');
    expect(new URL(req.url).searchParams.get('after_id')).toBe('a b');
  });

  it('repeated query parameters survive (the raw query string is used, not queryStringParameters)', () => {
    const req = requestFromFunctionUrl(fnUrlEvent({ method: 'GET', rawPath: '/v1/models', rawQueryString: 'a=1&a=2', queryStringParameters: { a: '1,2' } }));
    expect(new URL(req.url).searchParams.getAll('a')).toEqual(['1', '2']);
  });

  it('the raw path is kept raw: normalising is the router’s job', () => {
    expect(new URL(requestFromFunctionUrl(fnUrlEvent({ rawPath: '//V1//messages' })).url).pathname).toBe('//V1//messages');
  });

  it('headers are copied; the Host header stays a header and never becomes the origin', () => {
    const event = fnUrlEvent();
    event.headers = { ...event.headers, host: 'evil.example/x', 'x-api-key': 'tok', 'anthropic-version': '2023-06-01' };
    const req = requestFromFunctionUrl(event);
    expect(new URL(req.url).origin).toBe('https://gateway.invalid');
    expect(req.headers.get('host')).toBe('evil.example/x');
    expect(req.headers.get('x-api-key')).toBe('tok');
    expect(req.headers.get('anthropic-version')).toBe('2023-06-01');
    expect(req.headers.get('x-forwarded-for')).toBe('203.0.113.7');
  });

  it('a header value Fetch refuses is dropped, not a failure', () => {
    const event = fnUrlEvent();
    event.headers = { ...event.headers, 'x-bad': 'a\r\nb', 'x-good': 'ok' };
    const req = requestFromFunctionUrl(event);
    expect(req.headers.has('x-bad')).toBe(false);
    expect(req.headers.get('x-good')).toBe('ok');
  });

  it('cookies (which function URLs move out of the headers) come back as one cookie header', () => {
    const req = requestFromFunctionUrl(fnUrlEvent({ method: 'GET', rawPath: '/v1/models', cookies: ['a=1', 'session=x y'] }));
    expect(req.headers.get('cookie')).toBe('a=1; session=x y');
    expect(requestFromFunctionUrl(fnUrlEvent({ cookies: [] })).headers.has('cookie')).toBe(false);
    expect(requestFromFunctionUrl(fnUrlEvent()).headers.has('cookie')).toBe(false);
  });

  it('a text body arrives as sent', async () => {
    const body = JSON.stringify({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: 'héllo 🙂' }] });
    expect(await requestFromFunctionUrl(fnUrlEvent({ body })).text()).toBe(body);
  });

  it('a base64 body is decoded to its bytes (binary and text alike)', async () => {
    const bytes = Buffer.from(Array.from({ length: 256 }, (_, i) => 255 - i));
    const binary = requestFromFunctionUrl(fnUrlEvent({ body: bytes.toString('base64'), isBase64Encoded: true }));
    expect(Buffer.from(await binary.arrayBuffer())).toEqual(bytes);
    const text = requestFromFunctionUrl(fnUrlEvent({ body: Buffer.from('{"a":"é"}').toString('base64'), isBase64Encoded: true }));
    expect(await text.json()).toEqual({ a: 'é' });
  });

  it('no body → a null body; a GET’s body is dropped', async () => {
    expect(requestFromFunctionUrl(fnUrlEvent()).body).toBeNull();
    expect(requestFromFunctionUrl(fnUrlEvent({ method: 'GET', body: 'x' })).body).toBeNull();
  });

  it('TRACE → a 405 refusal (rendered by the app, in its envelope)', () => {
    expect(refusalOf(() => requestFromFunctionUrl(fnUrlEvent({ method: 'TRACE' })))).toEqual({
      status: 405,
      kind: 'method_not_allowed',
      message: 'The TRACE method is not supported',
    });
  });

  it('an event without http context or raw path is GET / (defensive defaults)', () => {
    const event = fnUrlEvent();
    const sparse = { ...event, rawPath: undefined, requestContext: { ...event.requestContext, http: undefined } } as unknown as LambdaFunctionURLEvent;
    const req = requestFromFunctionUrl(sparse);
    expect(req.method).toBe('GET');
    expect(req.url).toBe('https://gateway.invalid/');
  });

  it('agrees with the events the local runtime builds (bin/local/events.ts)', async () => {
    const body = Buffer.from(JSON.stringify({ model: 'm', max_tokens: 1, messages: [] }));
    const incoming = {
      url: '/v1/messages?beta=true',
      method: 'POST',
      httpVersion: '1.1',
      headers: { host: 'localhost:8787', 'content-type': 'application/json', cookie: 'a=1; b=2', 'x-api-key': 'tok' },
      socket: { remoteAddress: '127.0.0.1' },
    } as unknown as IncomingMessage;
    const req = requestFromFunctionUrl(functionUrlEvent(incoming, body));
    expect(req.method).toBe('POST');
    expect(req.url).toBe('https://gateway.invalid/v1/messages?beta=true');
    expect(req.headers.get('cookie')).toBe('a=1; b=2');
    expect(req.headers.get('x-api-key')).toBe('tok');
    expect(await req.json()).toEqual({ model: 'm', max_tokens: 1, messages: [] });

    const png = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff]);
    const upload = functionUrlEvent({ ...incoming, headers: { host: 'localhost', 'content-type': 'image/png' } } as unknown as IncomingMessage, png);
    expect(upload.isBase64Encoded).toBe(true);
    expect(Buffer.from(await requestFromFunctionUrl(upload).arrayBuffer())).toEqual(png);
  });
});

async function readAll(body: StreamingResult['body']): Promise<string> {
  if (typeof body === 'string') return body;
  const chunks: Buffer[] = [];
  for await (const chunk of body) chunks.push(Buffer.from(chunk as Uint8Array));
  return Buffer.concat(chunks).toString('utf8');
}

/** A web byte stream the test feeds by hand, recording whether (and why) it was cancelled. */
function manualStream() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  const cancelled: unknown[] = [];
  const stream = new ReadableStream<Uint8Array>({
    start(c) {
      controller = c;
    },
    cancel(reason) {
      cancelled.push(reason);
    },
  });
  const enc = new TextEncoder();
  return { stream, cancelled, push: (text: string) => controller.enqueue(enc.encode(text)), close: () => controller.close() };
}

describe('streamingResultFrom', () => {
  it('status, headers and the body of a JSON answer', async () => {
    const result = streamingResultFrom(Response.json({ ok: true }, { status: 201, headers: { 'request-id': 'req_1' } }));
    expect(result.statusCode).toBe(201);
    expect(result.headers).toEqual({ 'content-type': 'application/json', 'request-id': 'req_1' });
    expect(result.body).toBeInstanceOf(Readable);
    expect(await readAll(result.body)).toBe('{"ok":true}');
  });

  it('header names are lower-cased and a repeated header is one comma-joined value', () => {
    const headers = new Headers({ 'Retry-After': '1' });
    headers.append('Vary', 'accept');
    headers.append('Vary', 'origin');
    expect(streamingResultFrom(new Response('x', { status: 429, headers })).headers).toEqual({
      'content-type': 'text/plain;charset=UTF-8',
      'retry-after': '1',
      vary: 'accept, origin',
    });
  });

  it('a Response without a body gives an empty string body (middy writes it and ends)', async () => {
    const result = streamingResultFrom(new Response(null, { status: 204 }));
    expect(result).toEqual({ statusCode: 204, headers: {}, body: '' });
  });

  it('streams: each chunk can be read before the Response has finished producing', async () => {
    const source = manualStream();
    const result = streamingResultFrom(new Response(source.stream, { headers: { 'content-type': 'text/event-stream' } }));
    const body = result.body as Readable;
    const iterator = body[Symbol.asyncIterator]();
    source.push('event: ping\ndata: {}\n\n');
    expect(Buffer.from((await iterator.next()).value as Uint8Array).toString()).toBe('event: ping\ndata: {}\n\n');
    source.push('event: message_stop\ndata: {}\n\n');
    expect(Buffer.from((await iterator.next()).value as Uint8Array).toString()).toBe('event: message_stop\ndata: {}\n\n');
    source.close();
    expect((await iterator.next()).done).toBe(true);
  });

  it('destroying the piped body (the client went away) cancels the Response’s stream', async () => {
    const source = manualStream();
    const body = streamingResultFrom(new Response(source.stream)).body as Readable;
    source.push('a');
    await new Promise((resolve) => body.once('readable', resolve));
    body.on('error', () => undefined); // middy's pipeline listens in real life
    body.destroy(new Error('Client disconnected'));
    await vi.waitFor(() => expect(source.cancelled).toHaveLength(1));
    expect((source.cancelled[0] as Error).message).toBe('Client disconnected');
  });

  // Every Set-Cookie survives, in the prelude's `cookies` list (they cannot be comma-joined into one header).
  it('keeps every Set-Cookie of the Response', () => {
    const headers = new Headers();
    headers.append('set-cookie', 'a=1; Path=/');
    headers.append('set-cookie', 'b=2; Path=/');
    const { body: _body, ...prelude } = streamingResultFrom(new Response('x', { headers }));
    const text = JSON.stringify(prelude);
    expect(text).toContain('a=1; Path=/');
    expect(text).toContain('b=2; Path=/');
  });
});

type Inner = (event: LambdaFunctionURLEvent, responseStream: NodeJS.WritableStream, context: unknown) => Promise<void>;

/** Lambda's response-streaming globals, as far as streamingHandler and middy use them. */
const STREAMIFIED = Symbol('streamified');
const preludes: unknown[] = [];
beforeEach(() => {
  preludes.length = 0;
  vi.stubGlobal('awslambda', {
    streamifyResponse: <T extends object>(fn: T): T => Object.assign(fn, { [STREAMIFIED]: true }),
    HttpResponseStream: {
      from: (stream: NodeJS.WritableStream, prelude: unknown) => {
        preludes.push(prelude);
        return stream;
      },
    },
  });
});
afterEach(() => {
  vi.unstubAllGlobals();
});

const withCode = (code: string, message = code) => Object.assign(new Error(message), { code });

describe('streamingHandler', () => {
  const event = fnUrlEvent();
  const sink = () =>
    new Writable({
      write(_chunk, _encoding, callback) {
        callback();
      },
    });

  it('returns the wrapper marked as a streaming handler, which calls the inner handler with the same arguments', async () => {
    const calls: unknown[][] = [];
    const inner: Inner = async (...args) => {
      calls.push(args);
    };
    const handler = streamingHandler(inner, () => undefined);
    expect((handler as unknown as Record<symbol, unknown>)[STREAMIFIED]).toBe(true);
    expect(handler).not.toBe(inner);
    const stream = sink();
    const context = { awsRequestId: 'r' };
    await handler(event, stream, context);
    expect(calls).toEqual([[event, stream, context]]);
  });

  it.each([
    ['ERR_STREAM_PREMATURE_CLOSE', withCode('ERR_STREAM_PREMATURE_CLOSE', 'Premature close')],
    ['ERR_STREAM_DESTROYED', withCode('ERR_STREAM_DESTROYED', 'Cannot call write after a stream was destroyed')],
    ['ERR_STREAM_WRITE_AFTER_END', withCode('ERR_STREAM_WRITE_AFTER_END', 'write after end')],
    ['EPIPE', withCode('EPIPE', 'write EPIPE')],
    ['ECONNRESET', withCode('ECONNRESET', 'read ECONNRESET')],
    ['"Client disconnected" (the local shim’s stream)', new Error('Client disconnected')],
  ])('a broken pipe (%s) ends the invocation normally and is reported once', async (_, err) => {
    const reported: unknown[] = [];
    const handler = streamingHandler(
      (async () => {
        throw err;
      }) as Inner,
      (e) => reported.push(e),
    );
    await expect(handler(event, sink(), {})).resolves.toBeUndefined();
    expect(reported).toEqual([err]);
  });

  it.each([
    ['a plain Error', new Error('boom')],
    ['another error code', withCode('ECONNREFUSED')],
    ['a TimeoutError', new DOMException('No data from upstream for 50 ms', 'TimeoutError')],
    ['a message that only mentions a disconnect', new Error('Client disconnected early')],
    ['a string', 'Client disconnected'],
    ['undefined', undefined],
  ])('any other failure (%s) still fails the invocation, unreported', async (_, err) => {
    const reported: unknown[] = [];
    const handler = streamingHandler(
      (async () => {
        throw err;
      }) as Inner,
      (e) => reported.push(e),
    );
    await expect(handler(event, sink(), {})).rejects.toBe(err);
    expect(reported).toEqual([]);
  });
});

describe('streamingHandler around middy’s streaming mode, with a client that leaves mid-stream', () => {
  /** A response stream that takes `keep` chunks, then breaks the way `breakIt` says. */
  function leavingClient(keep: number, breakIt: (stream: Writable) => void) {
    const received: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        if (chunk.length === 0) return callback();
        received.push(chunk.toString());
        callback();
        if (received.length === keep) setImmediate(() => breakIt(stream));
      },
    });
    // As Lambda's (and the local shim's) own stream: its errors are the runtime's, never 'unhandled'.
    stream.on('error', () => undefined);
    return { stream, received };
  }

  /** The channeling handler's shape: middy in streaming mode, the Response as a streaming result, the wrapper. */
  function channeling(source: ReadableStream<Uint8Array>, reported: unknown[]) {
    const proxied = middy<LambdaFunctionURLEvent>({ executionMode: executionModeStreamifyResponse }).handler(async () =>
      streamingResultFrom(new Response(source, { status: 200, headers: { 'content-type': 'text/event-stream' } })),
    );
    return streamingHandler(proxied as unknown as Inner, (err) => reported.push(err));
  }

  /** An endless SSE producer (one event per pull), recording its cancellation. */
  function endlessEvents() {
    const cancelled: unknown[] = [];
    let n = 0;
    const stream = new ReadableStream<Uint8Array>({
      async pull(controller) {
        await new Promise((resolve) => setTimeout(resolve, 1));
        controller.enqueue(new TextEncoder().encode(`event: ping\ndata: {"n":${n++}}\n\n`));
      },
      cancel(reason) {
        cancelled.push(reason);
      },
    });
    return { stream, cancelled };
  }

  it.each([
    ['destroyed with "Client disconnected" (the local runtime)', (s: Writable) => s.destroy(new Error('Client disconnected')), 'Client disconnected'],
    ['destroyed without an error (premature close)', (s: Writable) => s.destroy(), 'ERR_STREAM_PREMATURE_CLOSE'],
    ['failing a write with EPIPE', (s: Writable) => s.destroy(withCode('EPIPE', 'write EPIPE')), 'EPIPE'],
  ])('response stream %s → the invocation succeeds, the disconnect is reported, the producer is cancelled', async (_, breakIt, expected) => {
    const source = endlessEvents();
    const reported: unknown[] = [];
    const client = leavingClient(2, breakIt);
    await expect(channeling(source.stream, reported)(fnUrlEvent(), client.stream, {})).resolves.toBeUndefined();
    expect(preludes).toEqual([{ statusCode: 200, headers: { 'content-type': 'text/event-stream' } }]);
    expect(client.received.slice(0, 2)).toEqual(['event: ping\ndata: {"n":0}\n\n', 'event: ping\ndata: {"n":1}\n\n']);
    expect(reported).toHaveLength(1);
    const err = reported[0] as { code?: string; message?: string };
    expect(err.code ?? err.message).toBe(expected);
    await vi.waitFor(() => expect(source.cancelled).toHaveLength(1));
  });

  it('a response stream failing for another reason still fails the invocation', async () => {
    const source = endlessEvents();
    const reported: unknown[] = [];
    const client = leavingClient(1, (s) => s.destroy(withCode('EIO', 'i/o error')));
    await expect(channeling(source.stream, reported)(fnUrlEvent(), client.stream, {})).rejects.toMatchObject({ code: 'EIO' });
    expect(reported).toEqual([]);
    await vi.waitFor(() => expect(source.cancelled).toHaveLength(1));
  });

  it('a stream delivered to the end is a normal invocation with nothing reported', async () => {
    const reported: unknown[] = [];
    const received: string[] = [];
    const stream = new Writable({
      write(chunk: Buffer, _encoding, callback) {
        if (chunk.length) received.push(chunk.toString());
        callback();
      },
    });
    const source = new Response('event: message_stop\ndata: {}\n\n').body!;
    await expect(channeling(source, reported)(fnUrlEvent(), stream, {})).resolves.toBeUndefined();
    expect(received.join('')).toBe('event: message_stop\ndata: {}\n\n');
    expect(reported).toEqual([]);
  });
});
