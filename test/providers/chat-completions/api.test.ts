import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { chatCompletionChunks, postChatCompletions, readCompletion, type Upstream } from '../../../lambdas/providers/chat-completions/api.ts';
import { UpstreamError } from '../../../lambdas/providers/chat-completions/errors.ts';
import { openaiProvider } from '../../../lambdas/providers/openai/index.ts';
import type { MessagesRequest, ProviderRequest } from '../../../lambdas/providers/types.ts';

/**
 * api.ts — the Chat Completions call over plain fetch that replaced the openai SDK — against raw HTTP servers: what
 * it sends, what bounds its time-out, and how a stream's SSE becomes chunks (what the translation relied on the SDK
 * for: `[DONE]`, `{error}` chunks, a client that leaves).
 */

const enc = new TextEncoder();
const servers: http.Server[] = [];
afterEach(async () => {
  for (const server of servers.splice(0)) {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

/** A server answering every request with `handle`; its base URL. */
async function serve(handle: http.RequestListener): Promise<string> {
  const server = http.createServer(handle);
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
}

const upstream = (baseUrl: string, over: Partial<Upstream> = {}): Upstream => ({
  baseUrl,
  apiKey: 'sk-test',
  signal: new AbortController().signal,
  timeoutMs: 2_000,
  ...over,
});

/** A Response whose body is `parts`, each sent as its own chunk. */
const sseResponse = (...parts: Array<string | Uint8Array>) =>
  new Response(
    new ReadableStream<Uint8Array>({
      start(controller) {
        for (const part of parts) controller.enqueue(typeof part === 'string' ? enc.encode(part) : part);
        controller.close();
      },
    }),
    { headers: { 'content-type': 'text/event-stream' } },
  );

const chunk = (content: string) => ({ id: 'chatcmpl-1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: { content }, finish_reason: null }] });
const data = (value: unknown) => `data: ${JSON.stringify(value)}\n\n`;

async function collect(chunks: AsyncIterable<unknown>): Promise<{ items: unknown[]; error?: unknown }> {
  const items: unknown[] = [];
  try {
    for await (const item of chunks) items.push(item);
    return { items };
  } catch (error) {
    return { items, error };
  }
}

describe('postChatCompletions', () => {
  it('POSTs the JSON body to <baseUrl>/chat/completions with the bearer key, and accepts SSE only for a stream', async () => {
    const seen: { url?: string; method?: string; headers: http.IncomingHttpHeaders; body: string }[] = [];
    const base = await serve((req, res) => {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        seen.push({ url: req.url, method: req.method, headers: req.headers, body });
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"choices":[]}');
      });
    });
    for (const stream of [false, true]) {
      const res = await postChatCompletions('openai', upstream(`${base}/`), { model: 'gpt-4o', stream }, { stream, deadline: 'whole' });
      expect(res).toBeInstanceOf(Response);
      await (res as Response).text();
    }
    expect(seen.map((s) => [s.method, s.url, s.headers['content-type'], s.headers.authorization, s.headers.accept, JSON.parse(s.body)])).toEqual([
      ['POST', '/v1/chat/completions', 'application/json', 'Bearer sk-test', 'application/json', { model: 'gpt-4o', stream: false }],
      ['POST', '/v1/chat/completions', 'application/json', 'Bearer sk-test', 'text/event-stream', { model: 'gpt-4o', stream: true }],
    ]);
  });

  it('maps an error status with the upstream message, param and code; a body that is not JSON leaves the status alone', async () => {
    const base = await serve((req, res) => {
      if (req.url?.startsWith('/json')) {
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ error: { message: 'bad n', type: 'invalid_request_error', param: 'n', code: 'invalid_value' } }));
      } else {
        res.writeHead(502, { 'content-type': 'text/html' });
        res.end('<html>Bad gateway</html>');
      }
    });
    const origin = base.replace(/\/v1$/, '');
    expect(await postChatCompletions('openai', upstream(`${origin}/json`), {}, { stream: false, deadline: 'whole' })).toEqual({
      kind: 'error',
      status: 400,
      body: { type: 'error', error: { type: 'invalid_request_error', message: 'OpenAI rejected the request: bad n' } },
      openai: { param: 'n', code: 'invalid_value' },
    });
    expect(await postChatCompletions('openrouter', upstream(`${origin}/html`), {}, { stream: true, deadline: 'headers' })).toEqual({
      kind: 'error',
      status: 500,
      body: { type: 'error', error: { type: 'api_error', message: 'OpenRouter failed with HTTP 502' } },
      openai: { param: null, code: null },
    });
  });

  it("'whole' bounds the body too; 'headers' stops bounding once a 2xx's headers came", async () => {
    // Headers at once, then a body that takes 400 ms (a stream's gaps of 100 ms each).
    const base = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const timer = setInterval(() => {
        if (n < 4) res.write(data(chunk(`w${n++}`)));
        else {
          clearInterval(timer);
          res.end('data: [DONE]\n\n');
        }
      }, 100);
      res.on('close', () => clearInterval(timer));
    });
    const whole = await postChatCompletions('openai', upstream(base, { timeoutMs: 250 }), {}, { stream: true, deadline: 'whole' });
    expect((await collect(chatCompletionChunks(whole as Response, new AbortController().signal))).error).toMatchObject({ name: 'TimeoutError' });

    const headers = await postChatCompletions('openai', upstream(base, { timeoutMs: 250 }), {}, { stream: true, deadline: 'headers' });
    expect(await collect(chatCompletionChunks(headers as Response, new AbortController().signal))).toEqual({
      items: [chunk('w0'), chunk('w1'), chunk('w2'), chunk('w3')],
    });
  });

  it('fails with the time-out when no headers come in time, and names the root cause of a refused connection', async () => {
    const base = await serve(() => undefined);
    for (const deadline of ['whole', 'headers'] as const) {
      expect(await postChatCompletions('openai', upstream(base, { timeoutMs: 100 }), {}, { stream: true, deadline })).toEqual({
        kind: 'error',
        status: 500,
        body: { type: 'error', error: { type: 'api_error', message: 'OpenAI did not answer within 100 ms' } },
      });
    }
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    expect(await postChatCompletions('openrouter', upstream(`http://127.0.0.1:${port}/api/v1`), {}, { stream: false, deadline: 'whole' })).toEqual({
      kind: 'error',
      status: 500,
      body: { type: 'error', error: { type: 'api_error', message: `Could not reach OpenRouter: connect ECONNREFUSED 127.0.0.1:${port}` } },
    });
  });
});

describe('readCompletion', () => {
  const json = (body: string) => new Response(body, { headers: { 'content-type': 'application/json' } });

  it('gives the bytes and their parse', async () => {
    const text = '{"id":"chatcmpl-1","choices":[{"index":0}]}';
    expect(await readCompletion('openai', json(text), 1_000)).toEqual({ kind: 'completion', text, completion: JSON.parse(text) });
  });

  it('treats a 200 error body as its error, and a body that is not a JSON object as no answer', async () => {
    expect(await readCompletion('openrouter', json('{"error":{"code":429,"message":"Upstream provider rate limited"}}'), 1_000)).toEqual({
      kind: 'error',
      status: 429,
      body: { type: 'error', error: { type: 'rate_limit_error', message: 'OpenRouter is rate limiting requests: Upstream provider rate limited' } },
    });
    expect(await readCompletion('openai', json('[1]'), 1_000)).toMatchObject({
      kind: 'error',
      status: 500,
      body: { error: { type: 'api_error', message: 'Could not reach OpenAI: the upstream answered something other than a JSON object' } },
    });
    expect(await readCompletion('openai', json('{"choices":'), 1_000)).toMatchObject({ kind: 'error', status: 500, body: { error: { type: 'api_error' } } });
  });
});

describe('chatCompletionChunks', () => {
  const live = () => new AbortController().signal;

  it('parses each data event into a chunk, however the bytes are cut, and ends at [DONE]', async () => {
    const text = `${data(chunk('a'))}: keep-alive comment\n\n${data(chunk('é'))}data: [DONE]\n\n${data(chunk('after done'))}`;
    const bytes = enc.encode(text);
    // Cut inside the first `data:`, and between the two bytes of the é.
    const inside = bytes.indexOf(0xc3) + 1;
    const parts = [bytes.slice(0, 3), bytes.slice(3, inside), bytes.slice(inside)];
    expect(await collect(chatCompletionChunks(sseResponse(...parts), live()))).toEqual({ items: [chunk('a'), chunk('é')] });
  });

  it('ends with the stream when no [DONE] comes, a last event without its blank line included', async () => {
    expect(await collect(chatCompletionChunks(sseResponse(data(chunk('a')), `data: ${JSON.stringify(chunk('b'))}`), live()))).toEqual({
      items: [chunk('a'), chunk('b')],
    });
  });

  it('fails with an UpstreamError carrying the error object of an {error} chunk or an `event: error`', async () => {
    const error = { message: 'Upstream failure mid-stream', type: 'server_error', code: 'server_error' };
    const chunked = await collect(chatCompletionChunks(sseResponse(data(chunk('a')), data({ error }), data(chunk('b'))), live()));
    expect(chunked.items).toEqual([chunk('a')]);
    expect(chunked.error).toBeInstanceOf(UpstreamError);
    expect(chunked.error).toMatchObject({ error, message: 'Upstream failure mid-stream' });

    const evented = await collect(chatCompletionChunks(sseResponse(`event: error\ndata: ${JSON.stringify({ code: 429 })}\n\n`), live()));
    expect(evented.error).toBeInstanceOf(UpstreamError);
    expect(evented.error).toMatchObject({ error: { code: 429 }, message: '{"code":429}' });
  });

  it('fails on an event that is not JSON', async () => {
    const { items, error } = await collect(chatCompletionChunks(sseResponse(data(chunk('a')), 'data: {"id":\n\n'), live()));
    expect(items).toEqual([chunk('a')]);
    expect(error).toBeInstanceOf(SyntaxError);
  });

  it('just ends once the signal aborted, and cancels the body when the iteration ends early', async () => {
    const cancelled: unknown[] = [];
    let pulls = 0;
    const res = () =>
      new Response(
        new ReadableStream<Uint8Array>({
          pull(controller) {
            controller.enqueue(enc.encode(data(chunk(`w${pulls++}`))));
          },
          cancel(reason) {
            cancelled.push(reason);
          },
        }),
      );
    const client = new AbortController();
    const chunks = chatCompletionChunks(res(), client.signal);
    expect((await chunks.next()).value).toEqual(chunk('w0'));
    client.abort();
    expect(await chunks.next()).toEqual({ done: true, value: undefined });

    const early = chatCompletionChunks(res(), live());
    await early.next();
    await early.return(undefined);
    expect(cancelled).toHaveLength(2);
  });
});

describe('the translated stream over a real connection', () => {
  it('runs longer than the time-out in total when no gap is that long (the time-out bounds the headers and each gap)', async () => {
    const base = await serve((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      const events = [
        ...['a', 'b', 'c', 'd', 'e'].map((c) => data(chunk(c))),
        data({ id: 'chatcmpl-1', object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'stop' }] }),
        'data: [DONE]\n\n',
      ];
      const timer = setInterval(() => {
        const next = events.shift();
        if (next) res.write(next);
        else {
          clearInterval(timer);
          res.end();
        }
      }, 60);
      res.on('close', () => clearInterval(timer));
    });
    const body = { model: 'gpt-4o', max_tokens: 50, stream: true, messages: [{ role: 'user', content: 'x' }] } as MessagesRequest;
    const req: ProviderRequest = {
      body,
      rawBody: JSON.stringify(body),
      upstreamModel: 'gpt-4o',
      baseUrl: base,
      apiKey: 'sk-test',
      headers: {},
      signal: new AbortController().signal,
      timeoutMs: 200,
    };
    const r = await openaiProvider.send(req);
    if (r.kind !== 'stream') throw new Error(`expected a stream, got ${JSON.stringify(r)}`);
    const text = await new Response(r.body).text();
    expect(text).toContain('"text":"e"');
    expect(text.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n')).toBe(true);
  });
});
