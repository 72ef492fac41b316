import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import { startAnthropicUpstream, ANTHROPIC_STREAM_ERROR_EVENT } from '../../../bin/local/upstreams/anthropic.ts';
import { estimateInputTokens, parseDirectives, toolCallTokens, countWords, THINKING_TEXT } from '../../../bin/local/upstreams/script.ts';
import type { SimulatedUpstream } from '../../../bin/local/upstreams/types.ts';

let up: SimulatedUpstream;
let client: Anthropic;

beforeAll(async () => {
  up = await startAnthropicUpstream();
  client = new Anthropic({ apiKey: 'sk-ant-test', baseURL: up.url, maxRetries: 0 });
});

afterAll(async () => {
  await up.close();
});

const MODEL = 'claude-sonnet-4-6';

function post(body: unknown, headers: Record<string, string> = { 'x-api-key': 'k' }, path = '/v1/messages'): Promise<Response> {
  return fetch(up.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

function userBody(text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: MODEL, max_tokens: 1000, messages: [{ role: 'user', content: text }], ...extra };
}

interface Frame {
  event: string;
  data: unknown;
  raw: string;
  at: number;
}

/** Reads an SSE body, timestamping each frame when its terminating blank line arrives. */
async function readFrames(res: Response): Promise<{ frames: Frame[]; raw: string }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let raw = '';
  const frames: Frame[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const text = decoder.decode(value, { stream: true });
    raw += text;
    buf += text;
    const at = performance.now();
    let idx = buf.indexOf('\n\n');
    while (idx >= 0) {
      const block = buf.slice(0, idx);
      buf = buf.slice(idx + 2);
      const lines = block.split('\n');
      const event = lines.find((l) => l.startsWith('event: '))?.slice(7) ?? '';
      const data = lines.find((l) => l.startsWith('data: '))?.slice(6) ?? '';
      frames.push({ event, data: JSON.parse(data), raw: `${block}\n\n`, at });
      idx = buf.indexOf('\n\n');
    }
  }
  expect(buf).toBe('');
  return { frames, raw };
}

function stripIds<T>(content: T): T {
  return JSON.parse(JSON.stringify(content, (k, v: unknown) => (k === 'id' ? '<id>' : v))) as T;
}

describe('directive parsing', () => {
  it('extracts directives, keeps unknown brackets and nested JSON', () => {
    const p = parseDirectives('  Hi [[words:3]] there [[tool:get {"a":[[1]],"s":"]]"}]] [[nope]] [[cache:read=7]] ');
    expect(p.errors).toEqual([]);
    expect(p.text).toBe('Hi  there  [[nope]]');
    expect(p.directives.words).toBe(3);
    expect(p.directives.tools).toEqual([{ name: 'get', input: { a: [[1]], s: ']]' } }]);
    expect(p.directives.cacheRead).toBe(7);
    expect(p.directives.cacheWrite).toBe(0);
  });

  it('reports malformed directives', () => {
    expect(parseDirectives('[[words:x]]').errors).toHaveLength(1);
    expect(parseDirectives('[[tool:t {bad json}]]').errors).toHaveLength(1);
  });
});

describe('simulated Anthropic upstream', () => {
  it('answers a non-stream echo with exact usage and records the request', async () => {
    const body = userBody('Hi [[words:5]]');
    const res = await post(body);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    expect(res.headers.get('request-id')).toMatch(/^req_sim_\d+$/);
    const json = (await res.json()) as Record<string, unknown>;
    expect(estimateInputTokens(body)).toBe(15); // ceil(57 / 4)
    expect(json).toEqual({
      id: expect.stringMatching(/^msg_sim_\d+$/),
      type: 'message',
      role: 'assistant',
      model: MODEL,
      content: [{ type: 'text', text: 'word1 word2 word3 word4 word5' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 15, output_tokens: 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    const rec = up.requests.at(-1)!;
    expect(rec.method).toBe('POST');
    expect(rec.path).toBe('/v1/messages');
    expect(rec.headers['x-api-key']).toBe('k');
    expect(rec.body).toEqual(body);
  });

  it('echoes the user text without directives (array content, text blocks only)', async () => {
    const msg = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      messages: [
        { role: 'user', content: 'first turn [[words:2]]' },
        { role: 'assistant', content: 'ok' },
        {
          role: 'user',
          content: [
            { type: 'text', text: '[[latency:0]] Hello  world' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
          ],
        },
      ],
    });
    expect(msg.content).toEqual([{ type: 'text', text: 'Echo: Hello  world' }]);
    expect(msg.usage.output_tokens).toBe(3);
    const empty = await client.messages.create({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: '[[thinking]]' }] });
    expect(empty.content[1]).toEqual({ type: 'text', text: 'Hello from the simulated upstream.' });
  });

  it('streams with exact Anthropic SSE framing', async () => {
    const res = await post(userBody('[[words:3]]', { stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('content-length')).toBeNull();
    const { frames, raw } = await readFrames(res);
    expect(frames.map((f) => f.event)).toEqual([
      'message_start',
      'ping',
      'content_block_start',
      'content_block_delta',
      'content_block_delta',
      'content_block_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    for (const f of frames) expect(f.raw).toBe(`event: ${f.event}\ndata: ${JSON.stringify(f.data)}\n\n`);
    expect(raw.startsWith('event: message_start\ndata: {"type":"message_start","message":{"id":"msg_sim_')).toBe(true);
    expect(frames.slice(3, 6).map((f) => f.data)).toEqual([
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'word1 ' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'word2 ' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'word3' } },
    ]);
    const input = estimateInputTokens(userBody('[[words:3]]', { stream: true }));
    expect((frames[0]!.data as { message: { usage: unknown } }).message.usage).toEqual({
      input_tokens: input,
      output_tokens: 1,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
    });
    expect(frames[7]!.data).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: 3, input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0 },
    });
    expect(frames[8]!.raw).toBe('event: message_stop\ndata: {"type":"message_stop"}\n\n');
  });

  it('SDK stream finalMessage() reconstructs the non-stream message (thinking + text + tools + cache)', async () => {
    const text = 'Weather? [[thinking]] [[tool:get_weather {"city":"Paris","units":"c"}]] [[cache:read=4,write=2]]';
    const params = {
      model: MODEL,
      max_tokens: 500,
      system: 'You are terse.',
      messages: [{ role: 'user' as const, content: text }],
    };
    const plain = await client.messages.create(params);
    const streamed = await client.messages.stream(params).finalMessage();
    expect(stripIds(streamed.content)).toEqual(stripIds(plain.content));
    expect(streamed.usage).toEqual(plain.usage);
    expect(streamed.stop_reason).toBe(plain.stop_reason);
    expect(streamed.model).toBe(MODEL);
    expect(plain.content.map((b) => b.type)).toEqual(['thinking', 'text', 'tool_use']);
    const est = estimateInputTokens(params);
    expect(plain.usage).toEqual({
      input_tokens: est - 4 - 2,
      output_tokens: 6 + 2 + toolCallTokens({ city: 'Paris', units: 'c' }),
      cache_creation_input_tokens: 2,
      cache_read_input_tokens: 4,
    });
  });

  it('returns two parallel tool_use blocks', async () => {
    const msg = await client.messages.create(userBody('[[tool:a {"x":1}]] and [[tool:b {"query":"long enough input"}]]') as never);
    const m = msg as Anthropic.Message;
    expect(m.stop_reason).toBe('tool_use');
    expect(m.content).toEqual([
      { type: 'text', text: 'Calling tools.' },
      { type: 'tool_use', id: expect.stringMatching(/^toolu_sim_\d+$/), name: 'a', input: { x: 1 } },
      { type: 'tool_use', id: expect.stringMatching(/^toolu_sim_\d+$/), name: 'b', input: { query: 'long enough input' } },
    ]);
    const ids = m.content.filter((b) => b.type === 'tool_use').map((b) => b.id);
    expect(new Set(ids).size).toBe(2);
    // 2 words + ceil(7/4)=2 + ceil(29/4)=8
    expect(m.usage.output_tokens).toBe(12);

    const onlyTools = await client.messages.create(userBody('[[words:0]][[tool:a]]') as never);
    expect((onlyTools as Anthropic.Message).content).toEqual([{ type: 'tool_use', id: expect.any(String), name: 'a', input: {} }]);
    expect((onlyTools as Anthropic.Message).usage.output_tokens).toBe(1);
  });

  it('streams tool input as ~3 input_json_delta fragments', async () => {
    const res = await post(userBody('[[tool:lookup {"q":"abcdefghij"}]]', { stream: true }));
    const { frames } = await readFrames(res);
    const deltas = frames
      .map((f) => f.data as { type: string; delta?: { type: string; partial_json?: string } })
      .filter((d) => d.type === 'content_block_delta' && d.delta?.type === 'input_json_delta')
      .map((d) => d.delta!.partial_json!);
    expect(deltas).toHaveLength(3);
    expect(deltas.join('')).toBe('{"q":"abcdefghij"}');
  });

  it('produces a thinking block before the text', async () => {
    const msg = await client.messages.create({
      model: MODEL,
      max_tokens: 100,
      messages: [{ role: 'user', content: 'Ponder [[thinking]]' }],
    });
    expect(msg.content).toEqual([
      { type: 'thinking', thinking: THINKING_TEXT, signature: 'sig_sim' },
      { type: 'text', text: 'Echo: Ponder' },
    ]);
    expect(msg.usage.output_tokens).toBe(countWords(THINKING_TEXT) + 2);
    expect(msg.usage.output_tokens).toBe(8);
  });

  it('reports cache tokens and excludes them from input_tokens', async () => {
    const body = { ...userBody('Hello world [[cache:read=3,write=2]]'), system: 'Be brief.' };
    const res = await post(body);
    const json = (await res.json()) as { usage: unknown };
    expect(estimateInputTokens(body)).toBe(25);
    expect(json.usage).toEqual({
      input_tokens: 20,
      output_tokens: 3,
      cache_creation_input_tokens: 2,
      cache_read_input_tokens: 3,
    });
    const big = await post(userBody('[[cache:read=100000]]'));
    expect(((await big.json()) as { usage: { input_tokens: number } }).usage.input_tokens).toBe(0);
  });

  it('maps error directives to statuses, envelopes and SDK error classes', async () => {
    const cases: Array<[number, string, new (...args: never[]) => Error]> = [
      [400, 'invalid_request_error', Anthropic.BadRequestError],
      [401, 'authentication_error', Anthropic.AuthenticationError],
      [403, 'permission_error', Anthropic.PermissionDeniedError],
      [404, 'not_found_error', Anthropic.NotFoundError],
      [413, 'request_too_large', Anthropic.APIError],
      [429, 'rate_limit_error', Anthropic.RateLimitError],
      [500, 'api_error', Anthropic.InternalServerError],
      [529, 'overloaded_error', Anthropic.InternalServerError],
    ];
    for (const [status, type, cls] of cases) {
      const res = await post(userBody(`fail [[error:${status}]]`, { stream: true }));
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(res.headers.get('request-id')).toMatch(/^req_sim_\d+$/);
      const json = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(json).toEqual({ type: 'error', error: { type, message: expect.any(String) } });
      const err = await client.messages
        .create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: `[[error:${status}]]` }] })
        .catch((e: unknown) => e);
      expect(err).toBeInstanceOf(cls);
      expect((err as InstanceType<typeof Anthropic.APIError>).status).toBe(status);
    }
    const err = await client.messages.create({ model: MODEL, max_tokens: 10, messages: [{ role: 'user', content: '[[error:429]]' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect((err as InstanceType<typeof Anthropic.RateLimitError>).error).toEqual({
      type: 'error',
      error: { type: 'rate_limit_error', message: 'Simulated rate limit exceeded' },
    });
  });

  it('rejects requests without x-api-key with 401', async () => {
    const res = await post(userBody('hi'), {});
    expect(res.status).toBe(401);
    expect(res.headers.get('request-id')).toMatch(/^req_sim_\d+$/);
    expect(await res.json()).toEqual({
      type: 'error',
      error: { type: 'authentication_error', message: 'x-api-key header is required' },
    });
    const empty = await post(userBody('hi'), { 'x-api-key': '' });
    expect(empty.status).toBe(401);
    const emptyBearer = await post(userBody('hi'), { authorization: 'Bearer ' });
    expect(emptyBearer.status).toBe(401);
    // @anthropic-ai/sdk v1.x sends `apiKey` as `Authorization: Bearer <key>`; accepted too.
    const bearer = await post(userBody('hi'), { authorization: 'Bearer sk-ant-x' });
    expect(bearer.status).toBe(200);
  });

  it('validates model, max_tokens and messages', async () => {
    const noMax = await post({ model: MODEL, messages: [] });
    expect(noMax.status).toBe(400);
    const j = (await noMax.json()) as { error: { type: string; message: string } };
    expect(j.error.type).toBe('invalid_request_error');
    expect(j.error.message).toContain('max_tokens');
    const noModel = await post({ max_tokens: 5, messages: [] });
    expect(((await noModel.json()) as { error: { message: string } }).error.message).toContain('model');
    const noMessages = await post({ model: MODEL, max_tokens: 5 });
    expect(((await noMessages.json()) as { error: { message: string } }).error.message).toContain('messages');
    const badDirective = await post(userBody('[[words:many]]'));
    expect(badDirective.status).toBe(400);
  });

  it('spaces stream events by [[delay:MS]]', async () => {
    const start = performance.now();
    const res = await post(userBody('[[words:1]][[delay:50]]', { stream: true }));
    const { frames } = await readFrames(res);
    // message_start, ping, block start, 1 delta, block stop, message_delta, message_stop
    expect(frames).toHaveLength(7);
    const span = frames.at(-1)!.at - frames[0]!.at;
    expect(span).toBeGreaterThanOrEqual(6 * 50 * 0.9);
    expect(span).toBeLessThan(2000);
    for (let i = 1; i < frames.length; i++) expect(frames[i]!.at - frames[i - 1]!.at).toBeGreaterThanOrEqual(40);
    expect(frames[0]!.at - start).toBeLessThan(200);
  });

  it('waits [[latency:MS]] before answering', async () => {
    const start = performance.now();
    const res = await post(userBody('[[latency:120]]'));
    expect(res.status).toBe(200);
    expect(performance.now() - start).toBeGreaterThanOrEqual(110);
  });

  it('destroys the socket after N events with [[reset-after:N]]', async () => {
    const res = await post(userBody('[[words:5]][[reset-after:4]]', { stream: true }));
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let raw = '';
    const err = await (async () => {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) return undefined;
        raw += decoder.decode(value, { stream: true });
      }
    })().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect(raw.split('\n\n').filter((s) => s !== '')).toHaveLength(4);

    const sdkErr = await client.messages
      .stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: '[[words:5]][[reset-after:3]]' }] })
      .finalMessage()
      .catch((e: unknown) => e);
    expect(sdkErr).toBeInstanceOf(Error);
  });

  it('sends a mid-stream overloaded error with [[stream-error-after:N]]', async () => {
    const res = await post(userBody('[[words:5]][[stream-error-after:3]]', { stream: true }));
    const { frames, raw } = await readFrames(res);
    expect(frames.map((f) => f.event)).toEqual(['message_start', 'ping', 'content_block_start', 'error']);
    expect(raw.endsWith(ANTHROPIC_STREAM_ERROR_EVENT)).toBe(true);
    expect(ANTHROPIC_STREAM_ERROR_EVENT).toBe('event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n');
    const sdkErr = await client.messages
      .stream({ model: MODEL, max_tokens: 100, messages: [{ role: 'user', content: '[[stream-error-after:2]]' }] })
      .finalMessage()
      .catch((e: unknown) => e);
    expect(sdkErr).toBeInstanceOf(Anthropic.APIError);
    expect(String(sdkErr)).toContain('Overloaded');
  });

  it('truncates at max_tokens (non-stream and stream)', async () => {
    const params = { model: MODEL, max_tokens: 4, messages: [{ role: 'user' as const, content: '[[words:10]]' }] };
    const msg = await client.messages.create(params);
    expect(msg.content).toEqual([{ type: 'text', text: 'word1 word2 word3 word4' }]);
    expect(msg.stop_reason).toBe('max_tokens');
    expect(msg.usage.output_tokens).toBe(4);
    const streamed = await client.messages.stream(params).finalMessage();
    expect(streamed.content).toEqual(msg.content);
    expect(streamed.stop_reason).toBe('max_tokens');
    expect(streamed.usage.output_tokens).toBe(4);

    // thinking consumes the budget first; tool calls that no longer fit are dropped
    const t = await client.messages.create({
      model: MODEL,
      max_tokens: 8,
      messages: [{ role: 'user', content: '[[thinking]][[tool:x {"a":"bbbbbbbbbbbbbbbb"}]]' }],
    });
    expect(t.content).toEqual([
      { type: 'thinking', thinking: THINKING_TEXT, signature: 'sig_sim' },
      { type: 'text', text: 'Calling tools.' },
    ]);
    expect(t.stop_reason).toBe('max_tokens');
    expect(t.usage.output_tokens).toBe(8);
  });

  it('serves count_tokens and models', async () => {
    const body = { model: MODEL, system: 'sys', messages: [{ role: 'user', content: 'count me' }] };
    const res = await post(body, { 'x-api-key': 'k' }, '/v1/messages/count_tokens');
    expect(await res.json()).toEqual({ input_tokens: estimateInputTokens(body) });
    const counted = await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'count me' }] });
    expect(counted.input_tokens).toBe(estimateInputTokens({ messages: [{ role: 'user', content: 'count me' }] }));

    const models = await fetch(`${up.url}/v1/models`, { headers: { 'x-api-key': 'k' } });
    const list = (await models.json()) as { data: Array<{ type: string; id: string }>; has_more: boolean; first_id: string; last_id: string };
    expect(list.has_more).toBe(false);
    expect(list.data.length).toBeGreaterThanOrEqual(3);
    expect(list.data.every((m) => m.type === 'model' && m.id.startsWith('claude-'))).toBe(true);
    expect(list.first_id).toBe(list.data[0]!.id);
    expect(list.last_id).toBe(list.data.at(-1)!.id);
    const sdkModels = [];
    for await (const m of client.models.list()) sdkModels.push(m.id);
    expect(sdkModels).toEqual(list.data.map((m) => m.id));
  });

  it('handles concurrent requests', async () => {
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        client.messages.create({ model: MODEL, max_tokens: 50, messages: [{ role: 'user', content: `n${i} [[words:${i % 5}]]` }] }),
      ),
    );
    expect(new Set(results.map((r) => r.id)).size).toBe(30);
    for (const [i, r] of results.entries()) expect(r.usage.output_tokens).toBe(i % 5);
  });

  it('never answers [[hang]] and close() still finishes promptly', async () => {
    const other = await startAnthropicUpstream();
    const pending = fetch(`${other.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': 'k', 'content-type': 'application/json' },
      body: JSON.stringify(userBody('[[hang]]')),
    }).then(
      () => 'answered',
      () => 'failed',
    );
    const raced = await Promise.race([pending, new Promise((r) => setTimeout(() => r('still waiting'), 150))]);
    expect(raced).toBe('still waiting');
    expect(other.requests).toHaveLength(1);
    const t0 = performance.now();
    await other.close();
    expect(performance.now() - t0).toBeLessThan(500);
    expect(await pending).toBe('failed');
  });
});
