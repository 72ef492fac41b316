import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startOpenAIUpstream } from '../../../bin/local/upstreams/openai.ts';
import { estimateInputTokens, THINKING_TEXT, toolCallTokens } from '../../../bin/local/upstreams/script.ts';
import type { SimulatedUpstream } from '../../../bin/local/upstreams/types.ts';
import { estimateTokens, shortenToolName, translateRequest } from '../../../lambdas/providers/chat-completions/request.ts';
import { OPENAI_DIALECT } from '../../../lambdas/providers/openai/dialect.ts';
import { openaiProvider } from '../../../lambdas/providers/openai/index.ts';
import type { MessagesRequest, ProviderRequest, ProviderResult } from '../../../lambdas/providers/types.ts';

let up: SimulatedUpstream;
beforeAll(async () => {
  up = await startOpenAIUpstream();
});
afterAll(() => up.close());
beforeEach(() => {
  up.requests.length = 0;
});

function request(fields: Record<string, unknown>, over: Partial<ProviderRequest> = {}): ProviderRequest {
  const body = { model: 'gpt-4o', max_tokens: 200, ...fields } as MessagesRequest;
  return {
    body,
    rawBody: JSON.stringify(body),
    upstreamModel: body.model,
    baseUrl: `${up.url}/v1`,
    apiKey: 'sk-project-key',
    headers: { anthropicVersion: '2023-06-01' },
    signal: new AbortController().signal,
    timeoutMs: 5_000,
    ...over,
  };
}
const say = (text: string, fields: Record<string, unknown> = {}, over: Partial<ProviderRequest> = {}) =>
  request({ messages: [{ role: 'user', content: text }], ...fields }, over);

function message(r: ProviderResult) {
  if (r.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(r)}`);
  return r.message;
}

async function sse(r: ProviderResult): Promise<{ raw: string; events: { event: string; data: Record<string, unknown> }[] }> {
  if (r.kind !== 'stream') throw new Error(`expected a stream, got ${JSON.stringify(r)}`);
  const raw = await new Response(r.body).text();
  const blocks = raw.split('\n\n');
  expect(blocks.pop()).toBe('');
  const events = blocks.map((block) => {
    const m = /^event: ([a-z_]+)\ndata: (.+)$/.exec(block);
    expect(m, block).not.toBeNull();
    const data = JSON.parse(m![2]!) as Record<string, unknown>;
    expect(data.type).toBe(m![1]);
    return { event: m![1]!, data };
  });
  return { raw, events };
}

describe('openaiProvider.send (simulated OpenAI)', () => {
  it('sends exactly the translated request, with the project key, to /v1/chat/completions', async () => {
    const long = `mcp__github_enterprise_server__${'list_repository_pull_request_review_comments'}`;
    const fields = {
      system: 'Be brief.',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look at this' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'call_x', name: long, input: { n: 1 } }] },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_x', content: 'done' },
            { type: 'text', text: 'Thanks [[words:2]]' },
          ],
        },
      ],
      tools: [
        { name: long, description: 'Lists', input_schema: { type: 'object', properties: { n: { type: 'number' } } }, cache_control: { type: 'ephemeral' } },
      ],
      tool_choice: { type: 'auto', disable_parallel_tool_use: true },
      temperature: 0.4,
      stop_sequences: ['STOP'],
      metadata: { user_id: 'end-user-7' },
    };
    const r = await openaiProvider.send(request(fields));
    expect(message(r).content).toEqual([{ type: 'text', text: 'word1 word2' }]);
    expect(up.requests).toHaveLength(1);
    const rec = up.requests[0]!;
    expect(rec.path).toBe('/v1/chat/completions');
    expect(rec.headers.authorization).toBe('Bearer sk-project-key');
    const short = shortenToolName(long);
    expect(rec.body).toEqual({
      model: 'gpt-4o',
      messages: [
        { role: 'system', content: 'Be brief.' },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Look at this' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,AAAA' } },
          ],
        },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_x', type: 'function', function: { name: short, arguments: '{"n":1}' } }] },
        { role: 'tool', tool_call_id: 'call_x', content: 'done' },
        { role: 'user', content: 'Thanks [[words:2]]' },
      ],
      tools: [{ type: 'function', function: { name: short, description: 'Lists', parameters: { type: 'object', properties: { n: { type: 'number' } } } } }],
      tool_choice: 'auto',
      parallel_tool_calls: false,
      stop: ['STOP'],
      temperature: 0.4,
      user: 'end-user-7',
      max_tokens: 200,
      stream: false,
    });
  });

  it('answers a tool-calling turn with parallel tool_use blocks, restored long names and exact usage', async () => {
    const long = `mcp__${'z'.repeat(70)}`;
    const text = `Use tools [[thinking]] [[cache:read=5]] [[tool:${shortenToolName(long)} {"q":"a"}]] [[tool:second {"n":[1,2]}]]`;
    const r = await openaiProvider.send(
      say(text, {
        tools: [
          { name: long, input_schema: { type: 'object' } },
          { name: 'second', input_schema: { type: 'object' } },
        ],
      }),
    );
    const msg = message(r);
    const sent = up.requests[0]!.body;
    const prompt = Math.max(estimateInputTokens(sent), 5);
    const output = 6 + 2 + toolCallTokens({ q: 'a' }) + toolCallTokens({ n: [1, 2] });
    expect(msg).toEqual({
      id: expect.stringMatching(/^msg_sim-\d+$/),
      type: 'message',
      role: 'assistant',
      model: 'gpt-4o',
      content: [
        { type: 'thinking', thinking: THINKING_TEXT, signature: '' },
        { type: 'text', text: 'Calling tools.' },
        { type: 'tool_use', id: expect.stringMatching(/^call_sim_\d+$/), name: long, input: { q: 'a' } },
        { type: 'tool_use', id: expect.stringMatching(/^call_sim_\d+$/), name: 'second', input: { n: [1, 2] } },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: prompt - 5, cache_creation_input_tokens: 0, cache_read_input_tokens: 5, output_tokens: output },
    });
  });

  it('reports max_tokens when the upstream stops at the length limit', async () => {
    const msg = message(await openaiProvider.send(say('[[words:50]]', { max_tokens: 7 })));
    expect(msg.stop_reason).toBe('max_tokens');
    expect(msg.usage.output_tokens).toBe(7);
    expect(msg.content).toEqual([{ type: 'text', text: 'word1 word2 word3 word4 word5 word6 word7' }]);
  });

  it('reports a content filter as a refusal', async () => {
    expect(message(await openaiProvider.send(say('x [[finish:content_filter]]'))).stop_reason).toBe('refusal');
  });

  it('sends max_completion_tokens and reasoning_effort to an o-series model', async () => {
    await openaiProvider.send(say('hi', { model: 'o3-mini', temperature: 0.2, thinking: { type: 'enabled', budget_tokens: 8000 } }));
    expect(up.requests[0]!.body).toEqual({
      model: 'o3-mini',
      messages: [{ role: 'user', content: 'hi' }],
      max_completion_tokens: 200,
      reasoning_effort: 'medium',
      stream: false,
    });
  });

  it.each([
    [400, 400, 'invalid_request_error', 'OpenAI rejected the request: Simulated upstream error (HTTP 400)'],
    [
      401,
      500,
      'api_error',
      `OpenAI rejected the project's OpenAI API key (set it with "gateway project set-provider-key"): Simulated upstream error (HTTP 401)`,
    ],
    [404, 404, 'not_found_error', 'OpenAI: not found: Simulated upstream error (HTTP 404)'],
    [429, 429, 'rate_limit_error', 'OpenAI is rate limiting requests: Simulated upstream error (HTTP 429)'],
    [500, 500, 'api_error', 'OpenAI failed with HTTP 500: Simulated upstream error (HTTP 500)'],
    [529, 529, 'overloaded_error', 'OpenAI is overloaded: Simulated upstream error (HTTP 529)'],
  ])('maps upstream HTTP %i to %i %s (non-stream and stream)', async (status, expected, type, text) => {
    for (const stream of [false, true]) {
      const r = await openaiProvider.send(say(`x [[error:${status}]]`, { stream }));
      expect(r).toEqual({ kind: 'error', status: expected, body: { type: 'error', error: { type, message: text } } });
    }
  });

  it('answers 500 api_error when the upstream cannot be reached or does not answer in time', async () => {
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    const refused = await openaiProvider.send(say('x', {}, { baseUrl: `http://127.0.0.1:${port}/v1` }));
    expect(refused).toEqual({
      kind: 'error',
      status: 500,
      body: { type: 'error', error: { type: 'api_error', message: expect.stringMatching(/^Could not reach OpenAI: .*ECONNREFUSED/) } },
    });
    for (const stream of [false, true]) {
      const slow = await openaiProvider.send(say('x [[hang]]', { stream }, { timeoutMs: 200 }));
      expect(slow).toEqual({
        kind: 'error',
        status: 500,
        body: { type: 'error', error: { type: 'api_error', message: 'OpenAI did not answer within 200 ms' } },
      });
    }
  });

  it('answers 400 for what cannot be translated, without calling the upstream', async () => {
    const r = await openaiProvider.send(
      request({ messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'x' } }] }] }),
    );
    expect(r).toEqual({
      kind: 'error',
      status: 400,
      body: {
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message:
            'messages.0.content.0: document (PDF / plain-text document) blocks cannot be sent to OpenAI, which serves this model; use a Claude model for them',
        },
      },
    });
    expect(up.requests).toHaveLength(0);
  });
});

describe('openaiProvider.send streaming (simulated OpenAI)', () => {
  it('streams Anthropic events with exact framing, one message_start, ordered blocks and final usage', async () => {
    const r = await openaiProvider.send(say('Go [[thinking]] [[cache:read=3]] [[words:2]] [[tool:lookup {"q":"x"}]]', { stream: true }));
    const { events } = await sse(r);
    const sent = up.requests[0]!.body as Record<string, unknown>;
    expect(sent.stream).toBe(true);
    expect(sent.stream_options).toEqual({ include_usage: true });
    expect(events.filter((e) => e.event === 'message_start')).toHaveLength(1);
    expect(events.map((e) => (e.event.startsWith('content_block') ? `${e.event}:${e.data.index}` : e.event))).toEqual([
      'message_start',
      'content_block_start:0',
      ...Array(6).fill('content_block_delta:0'),
      'content_block_stop:0',
      'content_block_start:1',
      'content_block_delta:1',
      'content_block_delta:1',
      'content_block_stop:1',
      'content_block_start:2',
      'content_block_delta:2',
      'content_block_delta:2',
      'content_block_delta:2',
      'content_block_stop:2',
      'message_delta',
      'message_stop',
    ]);
    const json = events
      .filter((e) => e.data.index === 2 && e.event === 'content_block_delta')
      .map((e) => (e.data.delta as { partial_json: string }).partial_json);
    expect(json.join('')).toBe('{"q":"x"}');
    const prompt = Math.max(estimateInputTokens(sent), 3);
    expect(events.at(-2)!.data).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'tool_use', stop_sequence: null },
      usage: { input_tokens: prompt - 3, cache_creation_input_tokens: 0, cache_read_input_tokens: 3, output_tokens: 6 + 2 + toolCallTokens({ q: 'x' }) },
    });
  });

  it('ends with an error event when the upstream sends an error mid-stream', async () => {
    const { events } = await sse(await openaiProvider.send(say('[[words:5]] [[stream-error-after:3]]', { stream: true })));
    expect(events.map((e) => e.event)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'error']);
    expect(events.at(-1)!.data).toEqual({ type: 'error', error: { type: 'api_error', message: 'OpenAI failed mid-stream: Upstream failure mid-stream' } });
  });

  it('ends with an error event when the connection breaks mid-stream', async () => {
    const { events } = await sse(await openaiProvider.send(say('[[words:5]] [[reset-after:3]]', { stream: true })));
    expect(events.map((e) => e.event)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_delta', 'error']);
    expect(events.at(-1)!.data).toEqual({
      type: 'error',
      error: { type: 'api_error', message: expect.stringMatching(/^The connection to OpenAI failed mid-stream: /) },
    });
  });

  it('ends with an error event when the upstream goes quiet for longer than the time-out', async () => {
    const { events } = await sse(await openaiProvider.send(say('[[words:3]] [[delay:1000]]', { stream: true }, { timeoutMs: 200 })));
    expect(events.at(-1)!.data).toEqual({
      type: 'error',
      error: { type: 'api_error', message: 'OpenAI stopped sending data for 200 ms in the middle of the stream' },
    });
  });

  it('aborts the upstream request when the consumer cancels, and when the client signal aborts', async () => {
    const closed: string[] = [];
    const server = http.createServer((req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      let n = 0;
      const timer = setInterval(() => {
        res.write(
          `data: ${JSON.stringify({ id: 'chatcmpl-slow', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta: { content: `w${n++} ` }, finish_reason: null }] })}\n\n`,
        );
      }, 10);
      res.on('close', () => {
        clearInterval(timer);
        closed.push(req.url ?? '');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
    try {
      const r = await openaiProvider.send(say('x', { stream: true }, { baseUrl: base }));
      if (r.kind !== 'stream') throw new Error('expected a stream');
      const reader = r.body.getReader();
      await reader.read();
      await reader.cancel();
      await expect.poll(() => closed.length).toBe(1);

      const client = new AbortController();
      const r2 = await openaiProvider.send(say('x', { stream: true }, { baseUrl: base, signal: client.signal }));
      if (r2.kind !== 'stream') throw new Error('expected a stream');
      const reader2 = r2.body.getReader();
      await reader2.read();
      client.abort();
      await expect.poll(() => closed.length).toBe(2);
      reader2.cancel().catch(() => undefined);
    } finally {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(resolve));
    }
  });
});

describe('openaiProvider.countTokens', () => {
  it('estimates ceil(chars / 4) of the translated messages and tools, without calling the upstream', async () => {
    const req = request({
      system: 'Sys',
      messages: [{ role: 'user', content: 'How many tokens is this?' }],
      tools: [{ name: 't', input_schema: { type: 'object' } }],
    });
    const expected = estimateTokens(translateRequest(req.body, { upstreamModel: 'gpt-4o', dialect: OPENAI_DIALECT, stream: false }).params);
    expect(await openaiProvider.countTokens(req)).toEqual({ kind: 'count', input_tokens: expected, estimated: true });
    expect(expected).toBe(
      Math.ceil(
        JSON.stringify({
          messages: [
            { role: 'system', content: 'Sys' },
            { role: 'user', content: 'How many tokens is this?' },
          ],
          tools: [{ type: 'function', function: { name: 't', parameters: { type: 'object' } } }],
        }).length / 4,
      ),
    );
    expect(up.requests).toHaveLength(0);
  });

  it('answers 400 for what cannot be translated', async () => {
    const r = await openaiProvider.countTokens(
      request({ messages: [{ role: 'user', content: [{ type: 'search_result', source: 's', title: 't', content: [] }] }] }),
    );
    expect(r).toMatchObject({ kind: 'error', status: 400, body: { error: { type: 'invalid_request_error' } } });
  });
});
