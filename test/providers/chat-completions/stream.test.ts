import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { UpstreamError } from '../../../lambdas/providers/chat-completions/errors.ts';
import { shortenToolName, ToolNames } from '../../../lambdas/providers/chat-completions/request.ts';
import type { AnswerContext } from '../../../lambdas/providers/chat-completions/response.ts';
import { anthropicSseStream, StreamTranslator, type StreamEvent } from '../../../lambdas/providers/chat-completions/stream.ts';
import { OPENAI_DIALECT } from '../../../lambdas/providers/openai/dialect.ts';
import { OPENROUTER_DIALECT } from '../../../lambdas/providers/openrouter/dialect.ts';

type Chunk = OpenAI.Chat.ChatCompletionChunk;
type Delta = Record<string, unknown>;

const LONG = `mcp__${'y'.repeat(70)}__tool`;

function ctx(over: Partial<AnswerContext> = {}): AnswerContext {
  const names = new ToolNames();
  names.upstream(LONG);
  return { requestedModel: 'gpt-4o', names, dialect: OPENAI_DIALECT, stopSequences: [], ...over };
}

const chunk = (delta: Delta, finish: string | null = null): Chunk =>
  ({
    id: 'chatcmpl-s1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt-4o',
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
  }) as Chunk;
const usageChunk = (prompt: number, completion: number, cached = 0): Chunk =>
  ({
    id: 'chatcmpl-s1',
    object: 'chat.completion.chunk',
    created: 1,
    model: 'gpt-4o',
    choices: [],
    usage: { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: cached } },
  }) as Chunk;
const toolDelta = (index: number, fields: { id?: string; name?: string; args?: string }): Delta => ({
  tool_calls: [
    {
      index,
      ...(fields.id ? { id: fields.id, type: 'function' } : {}),
      function: { ...(fields.name ? { name: fields.name } : {}), ...(fields.args !== undefined ? { arguments: fields.args } : {}) },
    },
  ],
});

function run(chunks: Chunk[], c = ctx(), inputEstimate = 0): { events: StreamEvent[]; translator: StreamTranslator } {
  const translator = new StreamTranslator(c, inputEstimate);
  const events = chunks.flatMap((ch) => translator.push(ch));
  events.push(...translator.end());
  return { events, translator };
}

const START = {
  event: 'message_start',
  data: {
    type: 'message_start',
    message: {
      id: 'msg_s1',
      type: 'message',
      role: 'assistant',
      model: 'gpt-4o',
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
    },
  },
};
const ev = (data: { type: string } & Record<string, unknown>): StreamEvent => ({ event: data.type, data });

describe('StreamTranslator', () => {
  it('turns reasoning, text and two tool calls into ordered blocks with one message_start and final usage', () => {
    const { events } = run([
      chunk({ role: 'assistant', content: '' }),
      chunk({ reasoning_content: 'Think ' }),
      chunk({ reasoning_content: 'hard.' }),
      chunk({ content: 'Calling ' }),
      chunk({ content: 'tools.' }),
      chunk(toolDelta(0, { id: 'call_1', name: 'get', args: '{"a"' })),
      chunk(toolDelta(0, { args: ':1}' })),
      chunk(toolDelta(1, { id: 'call_2', name: shortenToolName(LONG), args: '' })),
      chunk(toolDelta(1, { args: '{}' })),
      chunk({}, 'tool_calls'),
      usageChunk(50, 12, 8),
    ]);
    expect(events).toEqual([
      START,
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Think ' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'hard.' } }),
      ev({ type: 'content_block_stop', index: 0 }),
      ev({ type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } }),
      ev({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Calling ' } }),
      ev({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'tools.' } }),
      ev({ type: 'content_block_stop', index: 1 }),
      ev({ type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 'call_1', name: 'get', input: {} } }),
      ev({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"a"' } }),
      ev({ type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: ':1}' } }),
      ev({ type: 'content_block_stop', index: 2 }),
      ev({ type: 'content_block_start', index: 3, content_block: { type: 'tool_use', id: 'call_2', name: LONG, input: {} } }),
      ev({ type: 'content_block_delta', index: 3, delta: { type: 'input_json_delta', partial_json: '{}' } }),
      ev({ type: 'content_block_stop', index: 3 }),
      ev({
        type: 'message_delta',
        delta: { stop_reason: 'tool_use', stop_sequence: null },
        usage: { input_tokens: 42, cache_creation_input_tokens: 0, cache_read_input_tokens: 8, output_tokens: 12 },
      }),
      ev({ type: 'message_stop' }),
    ]);
  });

  it('keeps the FIRST argument fragment, which arrives with the id and name', () => {
    const { events } = run([chunk(toolDelta(0, { id: 'call_9', name: 'f', args: '{"whole":true}' })), chunk({}, 'tool_calls')]);
    expect(events.filter((e) => e.event === 'content_block_delta')).toEqual([
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"whole":true}' } }),
    ]);
  });

  it('holds message_delta until the end of the stream, after the usage chunk', () => {
    const t = new StreamTranslator(ctx());
    const early = [...t.push(chunk({ content: 'Hi' })), ...t.push(chunk({}, 'stop'))];
    expect(early.map((e) => e.event)).toEqual(['message_start', 'content_block_start', 'content_block_delta']);
    expect(t.push(usageChunk(10, 1))).toEqual([]);
    const tail = t.end();
    expect(tail).toEqual([
      ev({ type: 'content_block_stop', index: 0 }),
      ev({
        type: 'message_delta',
        delta: { stop_reason: 'end_turn', stop_sequence: null },
        usage: { input_tokens: 10, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 1 },
      }),
      ev({ type: 'message_stop' }),
    ]);
  });

  it('starts with the input estimate and, without a usage chunk, ends with it and about four characters an output token', () => {
    const { events } = run([chunk({ content: 'abcdefghij' }), chunk({ content: 'kl' }), chunk({}, 'length')], ctx(), 77);
    expect((events[0]!.data as { message: { usage: unknown } }).message.usage).toEqual({
      input_tokens: 77,
      cache_creation_input_tokens: 0,
      cache_read_input_tokens: 0,
      output_tokens: 0,
    });
    expect(events.at(-2)).toEqual(
      ev({
        type: 'message_delta',
        delta: { stop_reason: 'max_tokens', stop_sequence: null },
        usage: { input_tokens: 77, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 3 },
      }),
    );
  });

  it('opens no block for empty content and reads OpenRouter reasoning from `reasoning`', () => {
    const { events } = run(
      [chunk({ role: 'assistant', content: '' }), chunk({ reasoning: 'R', reasoning_content: 'ignored' }), chunk({}, 'stop')],
      ctx({ dialect: OPENROUTER_DIALECT }),
    );
    expect(events.slice(1, 4)).toEqual([
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'R' } }),
      ev({ type: 'content_block_stop', index: 0 }),
    ]);
  });

  it('sends fragments of interleaved parallel calls to their own block index', () => {
    const { events } = run([
      chunk({
        tool_calls: [
          { index: 0, id: 'a', type: 'function', function: { name: 'f', arguments: '{"x"' } },
          { index: 1, id: 'b', type: 'function', function: { name: 'g', arguments: '{"y"' } },
        ],
      }),
      chunk(toolDelta(0, { args: ':1}' })),
      chunk(toolDelta(1, { args: ':2}' })),
      chunk({}, 'tool_calls'),
    ]);
    const deltas = events.filter((e) => e.event === 'content_block_delta').map((e) => e.data as { index: number; delta: { partial_json: string } });
    expect(deltas.map((d) => [d.index, d.delta.partial_json])).toEqual([
      [0, '{"x"'],
      [1, '{"y"'],
      [0, ':1}'],
      [1, ':2}'],
    ]);
  });

  it('ends with one error event and nothing after it', () => {
    const t = new StreamTranslator(ctx());
    t.push(chunk({ content: 'Hi' }));
    const failed = t.fail({ type: 'error', error: { type: 'api_error', message: 'boom' } });
    expect(failed).toEqual([{ event: 'error', data: { type: 'error', error: { type: 'api_error', message: 'boom' } } }]);
    expect(t.end()).toEqual([]);
    expect(t.push(chunk({ content: 'more' }))).toEqual([]);
  });
});

describe('anthropicSseStream', () => {
  /** An upstream of chunks that records how far it has been read and whether it was closed. */
  function source(chunks: Chunk[], opts: { failAfter?: number; error?: unknown; stallAfter?: number } = {}) {
    const state = { pulled: 0, returned: false };
    async function* gen(): AsyncGenerator<Chunk> {
      try {
        for (const [i, c] of chunks.entries()) {
          if (opts.failAfter === i) throw opts.error;
          if (opts.stallAfter === i) await new Promise(() => undefined);
          state.pulled++;
          yield c;
        }
      } finally {
        state.returned = true;
      }
    }
    return { chunks: gen(), state };
  }

  const read = (s: ReadableStream<Uint8Array>) => new Response(s).text();

  it('frames every event as `event: <type>\\ndata: <json>\\n\\n`', async () => {
    const { chunks } = source([chunk({ content: 'Hi' }), chunk({}, 'stop'), usageChunk(3, 1)]);
    const text = await read(
      anthropicSseStream({ chunks, translator: new StreamTranslator(ctx()), provider: 'openai', timeoutMs: 1000, abort: () => undefined }),
    );
    expect(text).toBe(
      [
        `event: message_start\ndata: ${JSON.stringify(START.data)}\n\n`,
        'event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n',
        'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}\n\n',
        'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n',
        'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":1}}\n\n',
        'event: message_stop\ndata: {"type":"message_stop"}\n\n',
      ].join(''),
    );
  });

  it('reads nothing from the upstream until the consumer pulls, and cancel aborts it', async () => {
    const { chunks, state } = source([chunk({ content: 'a' }), chunk({ content: 'b' }), chunk({ content: 'c' }), chunk({}, 'stop')]);
    const aborted: unknown[] = [];
    const stream = anthropicSseStream({ chunks, translator: new StreamTranslator(ctx()), provider: 'openai', timeoutMs: 1000, abort: (r) => aborted.push(r) });
    await new Promise((r) => setTimeout(r, 20));
    expect(state.pulled).toBe(0);
    const reader = stream.getReader();
    await reader.read();
    expect(state.pulled).toBe(1);
    await reader.cancel('client left');
    expect(aborted).toEqual(['client left']);
    expect(state.returned).toBe(true);
  });

  it('writes an error event for an {error} chunk (chatCompletionChunks throws it) and ends normally', async () => {
    const err = new UpstreamError({ message: 'Upstream failure mid-stream', type: 'server_error', code: 'server_error' });
    const { chunks } = source([chunk({ content: 'Hi' }), chunk({ content: 'more' })], { failAfter: 1, error: err });
    const aborted: unknown[] = [];
    const text = await read(
      anthropicSseStream({ chunks, translator: new StreamTranslator(ctx()), provider: 'openai', timeoutMs: 1000, abort: (r) => aborted.push(r) }),
    );
    expect(
      text.endsWith('event: error\ndata: {"type":"error","error":{"type":"api_error","message":"OpenAI failed mid-stream: Upstream failure mid-stream"}}\n\n'),
    ).toBe(true);
    expect(text).not.toContain('message_stop');
    expect(aborted).toEqual([err]);
  });

  it('maps a rate-limit error chunk to rate_limit_error', async () => {
    const err = new UpstreamError({ message: 'slow down', code: 429 });
    const { chunks } = source([chunk({ content: 'Hi' })], { failAfter: 0, error: err });
    const text = await read(
      anthropicSseStream({ chunks, translator: new StreamTranslator(ctx()), provider: 'openrouter', timeoutMs: 1000, abort: () => undefined }),
    );
    expect(text).toBe('event: error\ndata: {"type":"error","error":{"type":"rate_limit_error","message":"OpenRouter failed mid-stream: slow down"}}\n\n');
  });

  it('ends with an error event when the upstream goes quiet for longer than the time-out', async () => {
    const { chunks } = source([chunk({ content: 'Hi' }), chunk({}, 'stop')], { stallAfter: 1 });
    const aborted: unknown[] = [];
    const started = Date.now();
    const text = await read(
      anthropicSseStream({ chunks, translator: new StreamTranslator(ctx()), provider: 'openai', timeoutMs: 150, abort: (r) => aborted.push(r) }),
    );
    expect(Date.now() - started).toBeGreaterThanOrEqual(140);
    expect(
      text.endsWith(
        'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"OpenAI stopped sending data for 150 ms in the middle of the stream"}}\n\n',
      ),
    ).toBe(true);
    expect((aborted[0] as Error).name).toBe('TimeoutError');
  });

  it('treats a stream that ends without a finish reason as a failure', async () => {
    const { chunks } = source([chunk({ content: 'Hi' })]);
    const text = await read(
      anthropicSseStream({ chunks, translator: new StreamTranslator(ctx()), provider: 'openai', timeoutMs: 1000, abort: () => undefined }),
    );
    expect(
      text.endsWith(
        'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"The connection to OpenAI failed mid-stream: the stream ended before OpenAI finished its answer"}}\n\n',
      ),
    ).toBe(true);
  });
});
