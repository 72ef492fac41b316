import type Anthropic from '@anthropic-ai/sdk';
import { APIError } from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { estimateInputTokens, EMPTY_ECHO_TEXT, THINKING_TEXT, toolCallTokens } from '../../bin/local/upstreams/script.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { createProject } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The real Anthropic SDK through the gateway to the simulated OpenAI / OpenRouter upstream: requests and answers are
 * translated both ways, streams included, and metered.
 */

const GPT = 'gpt-4o';
const O3 = 'o3-mini';
const LLAMA = 'or:meta-llama/llama-3.3-70b-instruct';
const MYSTERY = 'mystery-model-7b';
/** Custom prices (USD / Mtok) so the expected charges are exact. */
const PRICE = { inputUsdPerMtok: 2, outputUsdPerMtok: 8, cacheReadUsdPerMtok: 0.5 };
const priced = (u: { input_tokens: number; output_tokens: number; cache_read_input_tokens?: number | null }) =>
  Math.ceil((u.input_tokens * 2_000_000 + u.output_tokens * 8_000_000 + (u.cache_read_input_tokens ?? 0) * 500_000) / 1_000_000);

let gw: TestGateway;

/** The ledger once every invocation under way has returned: an answer is delivered before its settlement is written. */
async function settledUsage(...args: Parameters<typeof readUsage>): ReturnType<typeof readUsage> {
  await gw.invocationsDone();
  return readUsage(...args);
}
let client: Anthropic;
const BUDGET = { ai: 10_000_000, compute: 3600, window: 'day' } as const;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
  await gw.setProviderKey('openrouter', 'sk-or-project');
  for (const model of [GPT, O3, LLAMA, MYSTERY]) await gw.setPricing(model, PRICE);
  client = gw.client(await gw.token({ user: 'tina' }));
});
afterAll(() => gw?.stop());

const upstream = () => gw.upstreams.openai!;
const lastUpstream = () => upstream().requests.at(-1)!;
const sentBody = () => lastUpstream().body as Record<string, unknown>;
beforeEach(() => {
  upstream().requests.length = 0;
});

/** Message fields that must not depend on streaming (ids are per call). */
function comparable(m: Anthropic.Message) {
  return {
    type: m.type,
    role: m.role,
    model: m.model,
    content: m.content.map((b) => (b.type === 'tool_use' ? { ...b, id: 'ID' } : { ...b })),
    stop_reason: m.stop_reason,
    stop_sequence: m.stop_sequence,
    usage: { ...m.usage },
  };
}

describe('translated proxy: OpenAI', () => {
  it('answers plain text in Anthropic format, naming the requested model, and charges usage × price', async () => {
    const { data, response } = await client.messages
      .create({ model: GPT, max_tokens: 100, messages: [{ role: 'user', content: 'Hello there' }] })
      .withResponse();
    const input = estimateInputTokens(sentBody());
    expect(data).toEqual({
      id: expect.stringMatching(/^msg_sim-\d+$/),
      type: 'message',
      role: 'assistant',
      model: GPT,
      content: [{ type: 'text', text: 'Echo: Hello there' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: input, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 3 },
    });
    expect(lastUpstream().path).toBe('/v1/chat/completions');
    expect(lastUpstream().headers.authorization).toBe('Bearer sk-openai-project');
    expect(sentBody()).toEqual({ model: GPT, messages: [{ role: 'user', content: 'Hello there' }], max_tokens: 100, stream: false });
    expect(Number(response.headers.get('x-gateway-cost-microdollars'))).toBe(priced(data.usage));
  });

  it('translates a multi-turn conversation with a system prompt', async () => {
    const msg = await client.messages.create({
      model: GPT,
      max_tokens: 100,
      system: [{ type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: 'First' },
        { role: 'assistant', content: 'Reply one' },
        { role: 'user', content: [{ type: 'text', text: 'Second [[words:2]]' }] },
      ],
    });
    expect(msg.content).toEqual([{ type: 'text', text: 'word1 word2' }]);
    expect(sentBody().messages).toEqual([
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: 'First' },
      { role: 'assistant', content: 'Reply one' },
      { role: 'user', content: 'Second [[words:2]]' },
    ]);
  });

  it('sends images as image_url parts', async () => {
    const msg = await client.messages.create({
      model: GPT,
      max_tokens: 100,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } },
            { type: 'text', text: 'Describe' },
          ],
        },
      ],
    });
    expect(msg.content).toEqual([{ type: 'text', text: 'Echo: Describe' }]);
    expect(sentBody().messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          { type: 'image_url', image_url: { url: 'https://example.com/a.png' } },
          { type: 'text', text: 'Describe' },
        ],
      },
    ]);
  });

  it('completes a tool-use round trip with parallel tool calls', async () => {
    const tools: Anthropic.Tool[] = [
      { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
      { name: 'get_time', input_schema: { type: 'object', properties: { tz: { type: 'string' } } } },
    ];
    const question: Anthropic.MessageParam = {
      role: 'user',
      content: 'Weather and time? [[tool:get_weather {"city":"Paris"}]] [[tool:get_time {"tz":"CET"}]]',
    };
    const first = await client.messages.create({ model: GPT, max_tokens: 200, tools, messages: [question] });
    expect(first.stop_reason).toBe('tool_use');
    const calls = first.content.filter((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    expect(first.content[0]).toEqual({ type: 'text', text: 'Calling tools.' });
    expect(calls.map((c) => [c.name, c.input])).toEqual([
      ['get_weather', { city: 'Paris' }],
      ['get_time', { tz: 'CET' }],
    ]);
    expect(sentBody().tools).toEqual([
      { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
      { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string' } } } } },
    ]);

    // Results come back in the opposite order; OpenAI needs them in call order, right after the assistant turn.
    const second = await client.messages.create({
      model: GPT,
      max_tokens: 200,
      tools,
      messages: [
        question,
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: calls[1]!.id, content: '14:00' },
            { type: 'tool_result', tool_use_id: calls[0]!.id, content: [{ type: 'text', text: 'Sunny' }] },
          ],
        },
      ],
    });
    expect(second.content).toEqual([{ type: 'text', text: EMPTY_ECHO_TEXT }]);
    expect(second.stop_reason).toBe('end_turn');
    expect((sentBody().messages as unknown[]).slice(1)).toEqual([
      {
        role: 'assistant',
        content: 'Calling tools.',
        tool_calls: [
          { id: calls[0]!.id, type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: calls[1]!.id, type: 'function', function: { name: 'get_time', arguments: '{"tz":"CET"}' } },
        ],
      },
      { role: 'tool', tool_call_id: calls[0]!.id, content: 'Sunny' },
      { role: 'tool', tool_call_id: calls[1]!.id, content: '14:00' },
    ]);
  });

  it('translates thinking to reasoning_effort for o-series and returns reasoning as a thinking block', async () => {
    const msg = await client.messages.create({
      model: O3,
      max_tokens: 20_000,
      thinking: { type: 'enabled', budget_tokens: 16_384 },
      messages: [{ role: 'user', content: 'Think [[thinking]] [[words:1]]' }],
    });
    expect(msg.content).toEqual([
      { type: 'thinking', thinking: THINKING_TEXT, signature: '' },
      { type: 'text', text: 'word1' },
    ]);
    expect(msg.usage.output_tokens).toBe(7);
    expect(sentBody()).toEqual({
      model: O3,
      messages: [{ role: 'user', content: 'Think [[thinking]] [[words:1]]' }],
      max_completion_tokens: 20_000,
      reasoning_effort: 'high',
      stream: false,
    });
  });

  it('stops with max_tokens at the limit', async () => {
    const msg = await client.messages.create({ model: GPT, max_tokens: 4, messages: [{ role: 'user', content: '[[words:30]]' }] });
    expect(msg.stop_reason).toBe('max_tokens');
    expect(msg.content).toEqual([{ type: 'text', text: 'word1 word2 word3 word4' }]);
    expect(msg.usage.output_tokens).toBe(4);
    expect(sentBody().max_tokens).toBe(4);
  });

  it('streams: the SDK final message deep-equals the non-streamed translation of the same answer', async () => {
    const params = {
      model: GPT,
      max_tokens: 300,
      tools: [
        { name: 'lookup', input_schema: { type: 'object' as const } },
        { name: 'fetch_page', input_schema: { type: 'object' as const } },
      ],
      messages: [
        {
          role: 'user' as const,
          content: 'Go [[thinking]] [[cache:read=4]] [[words:3]] [[tool:lookup {"q":"cats","n":[1,2,3]}]] [[tool:fetch_page {"url":"https://x.y/z"}]]',
        },
      ],
    };
    const plain = await client.messages.create(params);
    const stream = client.messages.stream(params);
    const texts: string[] = [];
    stream.on('text', (t) => texts.push(t));
    const streamed = await stream.finalMessage();
    expect(comparable(streamed)).toEqual(comparable(plain));
    expect(streamed.id).toMatch(/^msg_sim-\d+$/);
    expect(texts).toEqual(['word1 ', 'word2 ', 'word3']);
    expect(plain.usage).toEqual({
      input_tokens: estimateInputTokens(sentBody()) - 4,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 4,
      output_tokens: 6 + 3 + toolCallTokens({ q: 'cats', n: [1, 2, 3] }) + toolCallTokens({ url: 'https://x.y/z' }),
    });
    expect(plain.content.map((b) => b.type)).toEqual(['thinking', 'text', 'tool_use', 'tool_use']);
    expect(sentBody()).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  it('streams with exact Anthropic framing over the wire', async () => {
    const token = await gw.token({ user: 'tina' });
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': token, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: GPT, max_tokens: 50, stream: true, messages: [{ role: 'user', content: '[[words:2]]' }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const text = await res.text();
    const input = estimateInputTokens(sentBody());
    const estimate = Math.ceil(JSON.stringify({ messages: [{ role: 'user', content: '[[words:2]]' }] }).length / 4);
    const id = /"id":"(msg_sim-\d+)"/.exec(text)![1];
    expect(text).toBe(
      [
        `event: message_start\ndata: {"type":"message_start","message":{"id":"${id}","type":"message","role":"assistant","model":"gpt-4o","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":${estimate},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0}}}\n\n`,
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word1 "}}\n\n',
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"word2"}}\n\n',
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
        `event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":${input},"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}\n\n`,
        'event: message_stop\ndata: {"type":"message_stop"}\n\n',
      ].join(''),
    );
  });

  it('answers an upstream error before the stream as that HTTP error', async () => {
    const err = await client.messages
      .stream({ model: GPT, max_tokens: 50, messages: [{ role: 'user', content: 'x [[error:429]]' }] })
      .finalMessage()
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).status).toBe(429);
    expect((err as APIError).error).toEqual({
      type: 'error',
      error: { type: 'rate_limit_error', message: 'OpenAI is rate limiting requests: Simulated upstream error (HTTP 429)' },
    });

    const failed = await client.messages
      .create({ model: GPT, max_tokens: 50, messages: [{ role: 'user', content: 'x [[error:503]]' }] })
      .catch((e: unknown) => e);
    expect((failed as APIError).status).toBe(500);
    expect((failed as APIError).error).toEqual({
      type: 'error',
      error: { type: 'api_error', message: 'OpenAI failed with HTTP 503: Simulated upstream error (HTTP 503)' },
    });
  });

  it('ends a stream that fails midway with an Anthropic error event, and charges what was produced', async () => {
    const before = await settledUsage({ projectId: gw.projectId, userId: 'tina', budget: BUDGET });
    const stream = client.messages.stream({ model: GPT, max_tokens: 50, messages: [{ role: 'user', content: '[[words:8]] [[stream-error-after:4]]' }] });
    const texts: string[] = [];
    stream.on('text', (t) => texts.push(t));
    const err = await stream.finalMessage().catch((e: unknown) => e);
    expect(texts).toEqual(['word1 ', 'word2 ', 'word3 ']);
    expect(err).toBeInstanceOf(APIError);
    expect((err as APIError).error).toEqual({ type: 'error', error: { type: 'api_error', message: 'OpenAI failed mid-stream: Upstream failure mid-stream' } });
    const after = await settledUsage({ projectId: gw.projectId, userId: 'tina', budget: BUDGET });
    // Input: the estimate message_start carried; output: the 18 characters produced, about four a token.
    const estimate = Math.ceil(JSON.stringify({ messages: [{ role: 'user', content: '[[words:8]] [[stream-error-after:4]]' }] }).length / 4);
    expect(after.used.ai - before.used.ai).toBe(priced({ input_tokens: estimate, output_tokens: Math.ceil('word1 word2 word3 '.length / 4) }));
    expect(after.reserved.ai).toBe(0);
  });

  it('estimates count_tokens for a translated model and says so', async () => {
    const token = await gw.token({ user: 'tina' });
    const res = await fetch(`${gw.url}/v1/messages/count_tokens`, {
      method: 'POST',
      headers: { 'x-api-key': token, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: GPT, messages: [{ role: 'user', content: 'Count me' }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-gateway-token-count')).toBe('estimate');
    expect(await res.json()).toEqual({ input_tokens: Math.ceil(JSON.stringify({ messages: [{ role: 'user', content: 'Count me' }] }).length / 4) });
  });

  it('refuses a document block with a 400 naming it, and never calls the upstream', async () => {
    const err = await client.messages
      .create({
        model: GPT,
        max_tokens: 50,
        messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'hello' } }] }],
      })
      .catch((e: unknown) => e);
    expect((err as APIError).status).toBe(400);
    expect((err as APIError).error).toEqual({
      type: 'error',
      error: {
        type: 'invalid_request_error',
        message:
          'messages.0.content.0: document (PDF / plain-text document) blocks cannot be sent to OpenAI, which serves this model; use a Claude model for them',
      },
    });
    expect(upstream().requests).toHaveLength(0);
  });
});

describe('translated proxy: OpenRouter', () => {
  it('strips or: for the upstream, keeps it in the answer, and charges the reported cost', async () => {
    const { data, response } = await client.messages
      .create({ model: LLAMA, max_tokens: 100, messages: [{ role: 'user', content: 'Hi [[words:3]] [[cost:0.002345]]' }] })
      .withResponse();
    expect(data.model).toBe(LLAMA);
    expect(data.content).toEqual([{ type: 'text', text: 'word1 word2 word3' }]);
    expect(lastUpstream().path).toBe('/api/v1/chat/completions');
    expect(lastUpstream().headers.authorization).toBe('Bearer sk-or-project');
    expect(sentBody()).toEqual({
      model: 'meta-llama/llama-3.3-70b-instruct',
      messages: [{ role: 'user', content: 'Hi [[words:3]] [[cost:0.002345]]' }],
      max_tokens: 100,
      usage: { include: true },
      stream: false,
    });
    expect(Number(response.headers.get('x-gateway-cost-microdollars'))).toBe(2345);
    expect(priced(data.usage)).not.toBe(2345);
  });

  it('charges the reported cost of a stream', async () => {
    const before = await settledUsage({ projectId: gw.projectId, userId: 'tina', budget: BUDGET });
    const final = await client.messages
      .stream({ model: LLAMA, max_tokens: 100, messages: [{ role: 'user', content: 'Hi [[thinking]] [[words:2]] [[cost:0.0031]]' }] })
      .finalMessage();
    expect(final.content).toEqual([
      { type: 'thinking', thinking: THINKING_TEXT, signature: '' },
      { type: 'text', text: 'word1 word2' },
    ]);
    const after = await settledUsage({ projectId: gw.projectId, userId: 'tina', budget: BUDGET });
    expect(after.used.ai - before.used.ai).toBe(3100);
    expect(after.reserved.ai).toBe(0);
  });

  it('routes an unknown model name to OpenRouter unchanged', async () => {
    const msg = await client.messages.create({ model: MYSTERY, max_tokens: 100, messages: [{ role: 'user', content: 'Who are you?' }] });
    expect(msg.model).toBe(MYSTERY);
    expect(msg.content).toEqual([{ type: 'text', text: 'Echo: Who are you?' }]);
    expect(lastUpstream().path).toBe('/api/v1/chat/completions');
    expect(sentBody().model).toBe(MYSTERY);
  });
});

describe('translated proxy: project keys', () => {
  it('answers 400 invalid_request_error naming the missing key, for OpenAI and OpenRouter', async () => {
    const bare = await createProject({ developerId: gw.developerId });
    const token = await mintToken({ projectId: bare.projectId, userId: 'u', secret: bare.secret, budget: BUDGET, expiresInSeconds: 600 });
    const bareClient = gw.client(token);
    for (const [model, provider, label] of [
      [GPT, 'openai', 'OpenAI'],
      [LLAMA, 'openrouter', 'OpenRouter'],
    ] as const) {
      const err = await bareClient.messages.create({ model, max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(APIError);
      expect((err as APIError).status).toBe(400);
      expect((err as APIError).error).toEqual({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message: `Model "${model}" routes to ${label}, but project ${bare.projectId} has no ${label} API key (${provider}); the project owner sets it with "gateway project set-provider-key --provider ${provider}"`,
        },
      });
    }
    expect(upstream().requests).toHaveLength(0);
  });
});
