import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import OpenAI from 'openai';
import { startOpenAIUpstream, OPENAI_STREAM_ERROR_EVENT } from '../../../bin/local/upstreams/openai.ts';
import { estimateInputTokens, toolCallTokens, THINKING_TEXT } from '../../../bin/local/upstreams/script.ts';
import type { SimulatedUpstream } from '../../../bin/local/upstreams/types.ts';

let up: SimulatedUpstream;
let client: OpenAI;

beforeAll(async () => {
  up = await startOpenAIUpstream();
  client = new OpenAI({ apiKey: 'sk-test', baseURL: `${up.url}/v1`, maxRetries: 0 });
});

afterAll(async () => {
  await up.close();
});

const MODEL = 'gpt-4.1-mini';

function post(body: unknown, headers: Record<string, string> = { authorization: 'Bearer k' }, path = '/v1/chat/completions'): Promise<Response> {
  return fetch(up.url + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
}

function userBody(text: string, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return { model: MODEL, messages: [{ role: 'user', content: text }], ...extra };
}

interface Chunk {
  id: string;
  object: string;
  model: string;
  choices: Array<{ index: number; delta: Record<string, unknown>; finish_reason: string | null }>;
  usage?: Record<string, unknown> | null;
  error?: unknown;
}

/** Reads an SSE body into its `data:` payloads (with arrival timestamps). */
async function readData(res: Response): Promise<{ data: string[]; at: number[]; raw: string }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  let raw = '';
  const data: string[] = [];
  const at: number[] = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const text = decoder.decode(value, { stream: true });
    raw += text;
    buf += text;
    const now = performance.now();
    let idx = buf.indexOf('\n\n');
    while (idx >= 0) {
      const block = buf.slice(0, idx);
      buf = buf.slice(idx + 2);
      expect(block.startsWith('data: ')).toBe(true);
      expect(block.includes('\n')).toBe(false);
      data.push(block.slice(6));
      at.push(now);
      idx = buf.indexOf('\n\n');
    }
  }
  expect(buf).toBe('');
  return { data, at, raw };
}

function chunks(data: string[]): Chunk[] {
  return data.filter((d) => d !== '[DONE]').map((d) => JSON.parse(d) as Chunk);
}

describe('simulated OpenAI upstream', () => {
  it('answers a non-stream completion with exact usage and records the request', async () => {
    const body = userBody('Hi [[words:5]]');
    const res = await post(body);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/json');
    const json = (await res.json()) as Record<string, unknown>;
    expect(estimateInputTokens(body)).toBe(15);
    expect(json).toEqual({
      id: expect.stringMatching(/^chatcmpl-sim-\d+$/),
      object: 'chat.completion',
      created: expect.any(Number),
      model: MODEL,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'word1 word2 word3 word4 word5', refusal: null },
          logprobs: null,
          finish_reason: 'stop',
        },
      ],
      usage: {
        prompt_tokens: 15,
        completion_tokens: 5,
        total_tokens: 20,
        prompt_tokens_details: { cached_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 0 },
      },
    });
    const rec = up.requests.at(-1)!;
    expect(rec).toMatchObject({ method: 'POST', path: '/v1/chat/completions', body });
    expect(rec.headers.authorization).toBe('Bearer k');
  });

  it('echoes the last user text (string or parts) via the SDK', async () => {
    const c = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'system', content: 'sys [[words:9]]' },
        { role: 'user', content: 'old [[words:2]]' },
        { role: 'assistant', content: 'x' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Hello' },
            { type: 'text', text: 'again [[latency:0]]' },
          ],
        },
      ],
    });
    expect(c.choices[0]!.message.content).toBe('Echo: Hello\nagain');
    expect(c.usage?.completion_tokens).toBe(3);
  });

  it('treats a trailing tool message like an Anthropic tool_result turn (no directives)', async () => {
    const c = await client.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'user', content: '[[tool:get {"a":1}]]' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get', arguments: '{"a":1}' } }],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'result' },
      ],
    });
    expect(c.choices[0]!.message.content).toBe('Hello from the simulated upstream.');
    expect(c.choices[0]!.finish_reason).toBe('stop');
  });

  it('serves the OpenRouter-style and bare paths', async () => {
    for (const path of ['/chat/completions', '/api/v1/chat/completions']) {
      const res = await post(userBody('[[words:1]]'), { authorization: 'Bearer k' }, path);
      expect(res.status).toBe(200);
      expect(((await res.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe('word1');
    }
    const missing = await post(userBody('x'), { authorization: 'Bearer k' }, '/v1/completions');
    expect(missing.status).toBe(404);
  });

  it('streams with exact chunk framing, one word per chunk, then [DONE]', async () => {
    const res = await post(userBody('[[words:3]]', { stream: true }));
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/event-stream');
    expect(res.headers.get('content-length')).toBeNull();
    const { data, raw } = await readData(res);
    expect(data.at(-1)).toBe('[DONE]');
    expect(raw.endsWith('\n\ndata: [DONE]\n\n')).toBe(true);
    const cs = chunks(data);
    expect(cs.map((c) => c.choices[0]?.delta)).toEqual([
      { role: 'assistant', content: '' },
      { content: 'word1 ' },
      { content: 'word2 ' },
      { content: 'word3' },
      {},
    ]);
    expect(cs.map((c) => c.choices[0]?.finish_reason)).toEqual([null, null, null, null, 'stop']);
    for (const c of cs) {
      expect(c.object).toBe('chat.completion.chunk');
      expect(c.id).toBe(cs[0]!.id);
      expect(c.model).toBe(MODEL);
      expect('usage' in c).toBe(false);
    }
  });

  it('adds a usage chunk only with stream_options.include_usage', async () => {
    const body = userBody('[[words:2]] [[cost:0.0125]]', { stream: true, stream_options: { include_usage: true } });
    const { data } = await readData(await post(body));
    const cs = chunks(data);
    const last = cs.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({
      prompt_tokens: estimateInputTokens(body),
      completion_tokens: 2,
      total_tokens: estimateInputTokens(body) + 2,
      prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: 0 },
      cost: 0.0125,
    });
    expect(cs.slice(0, -1).every((c) => c.usage === null && c.choices.length === 1)).toBe(true);
    expect(data.at(-1)).toBe('[DONE]');

    const without = chunks((await readData(await post(userBody('[[words:2]]', { stream: true })))).data);
    expect(without.every((c) => c.choices.length === 1 && c.usage === undefined)).toBe(true);
  });

  it('SDK stream accumulation equals the non-stream completion', async () => {
    const params = {
      model: MODEL,
      messages: [{ role: 'user' as const, content: 'Go [[thinking]] [[tool:search {"q":"cats and dogs"}]] [[cache:read=5]]' }],
    };
    const plain = await client.chat.completions.create(params);
    const streamed = await client.chat.completions.stream({ ...params, stream_options: { include_usage: true } }).finalChatCompletion();
    const pm = plain.choices[0]!.message;
    const sm = streamed.choices[0]!.message;
    expect(sm.content).toBe(pm.content);
    expect(sm.tool_calls?.map((t) => t.type === 'function' && t.function)).toEqual(pm.tool_calls?.map((t) => t.type === 'function' && t.function));
    expect(streamed.choices[0]!.finish_reason).toBe('tool_calls');
    expect(streamed.usage).toEqual(plain.usage);
  });

  it('returns two parallel tool calls (non-stream)', async () => {
    const c = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: '[[words:0]] [[tool:a {"x":1}]] [[tool:b {"query":"long enough input"}]]' }],
    });
    const choice = c.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([
      { id: expect.stringMatching(/^call_sim_\d+$/), type: 'function', function: { name: 'a', arguments: '{"x":1}' } },
      {
        id: expect.stringMatching(/^call_sim_\d+$/),
        type: 'function',
        function: { name: 'b', arguments: '{"query":"long enough input"}' },
      },
    ]);
    expect(c.usage?.completion_tokens).toBe(toolCallTokens({ x: 1 }) + toolCallTokens({ query: 'long enough input' }));
    expect(c.usage?.completion_tokens).toBe(10);
  });

  it('streams tool calls: first fragment carries id/name and non-empty arguments', async () => {
    const { data } = await readData(await post(userBody('[[tool:a {"x":1}]][[tool:b {"query":"long enough input"}]]', { stream: true })));
    const cs = chunks(data);
    const toolDeltas = cs.flatMap((c) => (c.choices[0]?.delta.tool_calls as Array<Record<string, unknown>> | undefined) ?? []);
    const byIndex = [0, 1].map((i) => toolDeltas.filter((t) => t.index === i));
    for (const [i, parts] of byIndex.entries()) {
      expect(parts.length).toBeGreaterThanOrEqual(2);
      expect(parts.length).toBeLessThanOrEqual(4);
      const [first, ...rest] = parts;
      expect(first).toMatchObject({ index: i, id: expect.stringMatching(/^call_sim_\d+$/), type: 'function' });
      const fn = first!.function as { name: string; arguments: string };
      expect(fn.name).toBe(i === 0 ? 'a' : 'b');
      expect(fn.arguments.length).toBeGreaterThan(0);
      for (const r of rest) expect(Object.keys(r).sort()).toEqual(['function', 'index']);
      const args = parts.map((p) => (p.function as { arguments: string }).arguments).join('');
      expect(args).toBe(i === 0 ? '{"x":1}' : '{"query":"long enough input"}');
    }
    expect(cs.at(-1)!.choices[0]!.finish_reason).toBe('tool_calls');
    expect(cs[1]!.choices[0]!.delta).toEqual({ content: 'Calling ' });
  });

  it('reports reasoning in message and deltas with reasoning_tokens', async () => {
    const res = await post(userBody('Think [[thinking]]'));
    const json = (await res.json()) as {
      choices: Array<{ message: Record<string, unknown> }>;
      usage: { completion_tokens: number; completion_tokens_details: { reasoning_tokens: number } };
    };
    expect(json.choices[0]!.message).toEqual({
      role: 'assistant',
      content: 'Echo: Think',
      refusal: null,
      reasoning_content: THINKING_TEXT,
      reasoning: THINKING_TEXT,
    });
    expect(json.usage.completion_tokens_details.reasoning_tokens).toBe(6);
    expect(json.usage.completion_tokens).toBe(8);

    const { data } = await readData(await post(userBody('Think [[thinking]]', { stream: true })));
    const deltas = chunks(data).map((c) => c.choices[0]!.delta);
    const reasoning = deltas.filter((d) => 'reasoning_content' in d);
    expect(reasoning).toHaveLength(6);
    for (const d of reasoning) expect(d.reasoning).toBe(d.reasoning_content);
    expect(reasoning.map((d) => d.reasoning_content).join('')).toBe(THINKING_TEXT);
    expect(deltas.indexOf(reasoning[0]!)).toBe(1);
  });

  it('reports cached tokens inside prompt_tokens', async () => {
    const body = {
      model: MODEL,
      messages: [
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Hello world [[cache:read=3]]' },
      ],
    };
    const json = (await (await post(body)).json()) as { usage: unknown };
    expect(json.usage).toEqual({
      prompt_tokens: 28,
      completion_tokens: 3,
      total_tokens: 31,
      prompt_tokens_details: { cached_tokens: 3 },
      completion_tokens_details: { reasoning_tokens: 0 },
    });
  });

  it('maps error directives to statuses, envelopes and SDK error classes', async () => {
    const cases: Array<[number, string, new (...args: never[]) => Error]> = [
      [400, 'invalid_request_error', OpenAI.BadRequestError],
      [401, 'authentication_error', OpenAI.AuthenticationError],
      [403, 'permission_error', OpenAI.PermissionDeniedError],
      [404, 'not_found_error', OpenAI.NotFoundError],
      [429, 'rate_limit_error', OpenAI.RateLimitError],
      [500, 'server_error', OpenAI.InternalServerError],
      [503, 'server_error', OpenAI.InternalServerError],
    ];
    for (const [status, type, cls] of cases) {
      const res = await post(userBody(`[[error:${status}]]`, { stream: true }));
      expect(res.status).toBe(status);
      expect(res.headers.get('content-type')).toBe('application/json');
      expect(await res.json()).toEqual({ error: { message: expect.any(String), type, code: expect.any(String), param: null } });
      const err = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `[[error:${status}]]` }] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(cls);
      expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(status);
    }
    const err = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: '[[error:429]]' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect((err as InstanceType<typeof OpenAI.RateLimitError>).code).toBe('rate_limit_exceeded');
  });

  it('rejects requests without a bearer token with 401', async () => {
    const variants: Array<Record<string, string>> = [{}, { authorization: 'Bearer ' }, { authorization: 'Basic abc' }];
    for (const headers of variants) {
      const res = await post(userBody('hi'), headers);
      expect(res.status).toBe(401);
      const json = (await res.json()) as { error: { type: string; code: string; param: null } };
      expect(json.error.type).toBe('authentication_error');
      expect(json.error.param).toBeNull();
    }
  });

  it('validates model and messages', async () => {
    const noModel = await post({ messages: [] });
    expect(noModel.status).toBe(400);
    expect(((await noModel.json()) as { error: { message: string } }).error.message).toContain('model');
    const noMessages = await post({ model: MODEL });
    expect(((await noMessages.json()) as { error: { message: string } }).error.message).toContain('messages');
  });

  it('forces finish_reason with [[finish:REASON]] and adds cost', async () => {
    const c = await client.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'bad [[finish:content_filter]] [[cost:0.5]]' }],
    });
    expect(c.choices[0]!.finish_reason).toBe('content_filter');
    expect((c.usage as unknown as { cost: number }).cost).toBe(0.5);
    const { data } = await readData(await post(userBody('[[finish:length]]', { stream: true })));
    expect(chunks(data).at(-1)!.choices[0]!.finish_reason).toBe('length');
  });

  it('truncates at max_completion_tokens / max_tokens', async () => {
    const a = await client.chat.completions.create({
      model: MODEL,
      max_completion_tokens: 4,
      messages: [{ role: 'user', content: '[[words:10]]' }],
    });
    expect(a.choices[0]!.message.content).toBe('word1 word2 word3 word4');
    expect(a.choices[0]!.finish_reason).toBe('length');
    expect(a.usage?.completion_tokens).toBe(4);
    const b = await client.chat.completions.create({
      model: MODEL,
      max_tokens: 2,
      messages: [{ role: 'user', content: '[[words:10]]' }],
    });
    expect(b.choices[0]!.message.content).toBe('word1 word2');
    expect(b.usage?.completion_tokens).toBe(2);
    const { data } = await readData(await post(userBody('[[words:10]]', { stream: true, max_tokens: 3 })));
    const deltas = chunks(data).map((c) => c.choices[0]!);
    expect(deltas.map((d) => d.delta.content ?? '').join('')).toBe('word1 word2 word3');
    expect(deltas.at(-1)!.finish_reason).toBe('length');
  });

  it('spaces chunks by [[delay:MS]]', async () => {
    const { data, at } = await readData(await post(userBody('[[words:2]][[delay:50]]', { stream: true })));
    // role chunk, 2 words, finish chunk, [DONE]
    expect(data).toHaveLength(5);
    expect(at.at(-1)! - at[0]!).toBeGreaterThanOrEqual(4 * 50 * 0.9);
    for (let i = 1; i < at.length; i++) expect(at[i]! - at[i - 1]!).toBeGreaterThanOrEqual(40);
  });

  it('destroys the socket after N chunks with [[reset-after:N]]', async () => {
    const res = await post(userBody('[[words:5]][[reset-after:2]]', { stream: true }));
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
    expect(raw.split('\n\n').filter((s) => s !== '')).toHaveLength(2);

    const sdkErr = await (async () => {
      const stream = await client.chat.completions.create({
        model: MODEL,
        stream: true,
        messages: [{ role: 'user', content: '[[words:5]][[reset-after:3]]' }],
      });
      for await (const _ of stream) {
        // drain
      }
    })().catch((e: unknown) => e);
    expect(sdkErr).toBeInstanceOf(Error);
  });

  it('sends a mid-stream error chunk with [[stream-error-after:N]]', async () => {
    const { data, raw } = await readData(await post(userBody('[[words:5]][[stream-error-after:2]]', { stream: true })));
    expect(data).toHaveLength(3);
    expect(raw.endsWith(OPENAI_STREAM_ERROR_EVENT)).toBe(true);
    expect(JSON.parse(data[2]!)).toEqual({
      error: { message: 'Upstream failure mid-stream', type: 'server_error', code: 'server_error' },
    });
    expect(data).not.toContain('[DONE]');

    const sdkErr = await (async () => {
      const stream = await client.chat.completions.create({
        model: MODEL,
        stream: true,
        messages: [{ role: 'user', content: '[[stream-error-after:1]]' }],
      });
      for await (const _ of stream) {
        // drain
      }
    })().catch((e: unknown) => e);
    expect(sdkErr).toBeInstanceOf(OpenAI.APIError);
    expect(String(sdkErr)).toContain('Upstream failure mid-stream');
  });

  it('handles concurrent requests', async () => {
    const results = await Promise.all(
      Array.from({ length: 30 }, (_, i) => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: `n${i} [[words:${i % 4}]]` }] })),
    );
    expect(new Set(results.map((r) => r.id)).size).toBe(30);
    for (const [i, r] of results.entries()) expect(r.usage?.completion_tokens).toBe(i % 4);
  });

  it('never answers [[hang]]; the client can give up and close() is prompt', async () => {
    const other = await startOpenAIUpstream();
    const ac = new AbortController();
    const t0 = performance.now();
    setTimeout(() => ac.abort(), 100);
    const outcome = await fetch(`${other.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer k', 'content-type': 'application/json' },
      body: JSON.stringify(userBody('[[hang]]')),
      signal: ac.signal,
    }).then(
      () => 'answered',
      () => 'aborted',
    );
    expect(outcome).toBe('aborted');
    expect(performance.now() - t0).toBeGreaterThanOrEqual(90);
    const pending = fetch(`${other.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: 'Bearer k', 'content-type': 'application/json' },
      body: JSON.stringify(userBody('[[latency:60000]]')),
    }).then(
      () => 'answered',
      () => 'failed',
    );
    await new Promise((r) => setTimeout(r, 50));
    const c0 = performance.now();
    await other.close();
    expect(performance.now() - c0).toBeLessThan(500);
    expect(await pending).toBe('failed');
  });
});
