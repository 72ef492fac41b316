import type Anthropic from '@anthropic-ai/sdk';
import { describe, expect, it } from 'vitest';
import type { StreamEvent } from '../../lambdas/metering/accumulator.ts';
import { anthropicRequest, DEFAULT_MAX_TOKENS, JSON_OBJECT_INSTRUCTION } from '../../lambdas/openai-ingress/request.ts';
import { ChunkTranslator, chatCompletion } from '../../lambdas/openai-ingress/response.ts';
import { EFFORT_BUDGETS, effortForBudget, finishForStop, stopForFinish } from '../../lambdas/providers/chat-completions/mapping.ts';
import { Refused } from '../../lambdas/refusals/refusal.ts';

/** The OpenAI → Anthropic request translation and the Anthropic → OpenAI answer translation (docs/openai.md). */
const MODEL = 'claude-sonnet-4-6';

function refusal(chat: Record<string, unknown>) {
  try {
    anthropicRequest({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...chat });
  } catch (err) {
    if (err instanceof Refused && err.refusal.kind === 'invalid_request') return err.refusal;
    throw err;
  }
  throw new Error('not refused');
}

describe('request: OpenAI → Anthropic', () => {
  it('leading system and developer messages are the system prompt; a later one stays in place as a system message', () => {
    const { body } = anthropicRequest({
      model: MODEL,
      messages: [
        { role: 'system', content: 'A' },
        { role: 'developer', content: [{ type: 'text', text: 'B' }] },
        { role: 'user', content: 'hi' },
        { role: 'assistant', content: 'hello' },
        { role: 'system', content: 'C' },
        { role: 'user', content: 'again' },
      ],
    });
    expect(body.system).toBe('A\n\nB');
    expect(body.messages).toEqual([
      { role: 'user', content: 'hi' },
      { role: 'assistant', content: 'hello' },
      { role: 'system', content: 'C' },
      { role: 'user', content: 'again' },
    ]);
    expect(body.max_tokens).toBe(DEFAULT_MAX_TOKENS);
  });

  it('content parts: text, data: URL images as base64, https images as url; other parts 400 naming them', () => {
    const { body } = anthropicRequest({
      model: MODEL,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'look' },
            { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0K' } },
            { type: 'image_url', image_url: { url: 'https://example.com/a.jpg', detail: 'high' } },
          ],
        },
      ],
    });
    expect(body.messages[0]!.content).toEqual([
      { type: 'text', text: 'look' },
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0K' } },
      { type: 'image', source: { type: 'url', url: 'https://example.com/a.jpg' } },
    ]);
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: {} }] }] }).param).toBe('messages[0].content[0].type');
    expect(refusal({ messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'ftp://x' } }] }] }).param).toBe(
      'messages[0].content[0].image_url.url',
    );
  });

  it('tool calls → tool_use blocks, consecutive tool messages → one user message of tool_results, in order', () => {
    const { body } = anthropicRequest({
      model: MODEL,
      messages: [
        { role: 'user', content: 'go' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'a', arguments: '{"x":1}' } },
            { id: 'call_2', type: 'function', function: { name: 'b', arguments: 'not json' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_1', content: 'one' },
        { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: 'two' }] },
        { role: 'user', content: 'thanks' },
      ],
    });
    expect(body.messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: [
          { type: 'tool_use', id: 'call_1', name: 'a', input: { x: 1 } },
          { type: 'tool_use', id: 'call_2', name: 'b', input: {} },
        ],
      },
      {
        role: 'user',
        content: [
          { type: 'tool_result', tool_use_id: 'call_1', content: 'one' },
          { type: 'tool_result', tool_use_id: 'call_2', content: 'two' },
        ],
      },
      { role: 'user', content: 'thanks' },
    ]);
  });

  it('tools and tool_choice (auto / none / required / named, parallel_tool_calls false)', () => {
    const tools = [{ type: 'function', function: { name: 'f', description: 'd', parameters: { type: 'object', properties: { q: { type: 'string' } } } } }];
    const choice = (tool_choice: unknown, extra: Record<string, unknown> = {}) =>
      anthropicRequest({ model: MODEL, messages: [{ role: 'user', content: 'x' }], tools, tool_choice, ...extra }).body.tool_choice;
    expect(anthropicRequest({ model: MODEL, messages: [], tools }).body.tools).toEqual([
      { name: 'f', description: 'd', input_schema: { type: 'object', properties: { q: { type: 'string' } } } },
    ]);
    expect(choice('auto')).toEqual({ type: 'auto' });
    expect(choice('none')).toEqual({ type: 'none' });
    expect(choice('required')).toEqual({ type: 'any' });
    expect(choice({ type: 'function', function: { name: 'f' } })).toEqual({ type: 'tool', name: 'f' });
    expect(choice(undefined, { parallel_tool_calls: false })).toEqual({ type: 'auto', disable_parallel_tool_use: true });
    expect(choice('required', { parallel_tool_calls: false })).toEqual({ type: 'any', disable_parallel_tool_use: true });
    expect(anthropicRequest({ model: MODEL, messages: [], tool_choice: 'auto' }).body.tool_choice).toBeUndefined();
  });

  it('response_format: json_schema → output_config.format; json_object → an instruction in the system prompt; text → nothing', () => {
    const schema = { type: 'object', properties: { a: { type: 'number' } }, required: ['a'], additionalProperties: false };
    expect(
      anthropicRequest({ model: MODEL, messages: [], response_format: { type: 'json_schema', json_schema: { name: 'x', schema, strict: true } } }).body,
    ).toMatchObject({
      output_config: { format: { type: 'json_schema', schema } },
    });
    expect(anthropicRequest({ model: MODEL, messages: [{ role: 'system', content: 'S' }], response_format: { type: 'json_object' } }).body.system).toBe(
      `S\n\n${JSON_OBJECT_INSTRUCTION}`,
    );
    expect(anthropicRequest({ model: MODEL, messages: [], response_format: { type: 'text' } }).body.output_config).toBeUndefined();
  });

  it('reasoning_effort → a thinking budget (the table both directions read), lowered under a small limit, refused under 1,025', () => {
    for (const effort of ['low', 'medium', 'high'] as const) {
      const { body } = anthropicRequest({ model: MODEL, messages: [], reasoning_effort: effort });
      expect(body.thinking).toEqual({ type: 'enabled', budget_tokens: EFFORT_BUDGETS[effort] });
      expect(body.max_tokens).toBe(DEFAULT_MAX_TOKENS + EFFORT_BUDGETS[effort]);
      expect(effortForBudget(EFFORT_BUDGETS[effort])).toBe(effort);
    }
    expect(anthropicRequest({ model: MODEL, messages: [], reasoning_effort: 'minimal' }).body.thinking).toBeUndefined();
    expect(anthropicRequest({ model: MODEL, messages: [], reasoning_effort: 'high', max_completion_tokens: 5000 }).body).toMatchObject({
      max_tokens: 5000,
      thinking: { budget_tokens: 4999 },
    });
    expect(refusal({ reasoning_effort: 'low', max_tokens: 1000 }).param).toBe('reasoning_effort');
  });

  it('stop, temperature, top_p, user, max_completion_tokens over max_tokens, stream and include_usage', () => {
    const r = anthropicRequest({
      model: MODEL,
      messages: [],
      stop: ['a', 'b'],
      temperature: 0.5,
      top_p: 0.9,
      user: 'u-1',
      max_tokens: 10,
      max_completion_tokens: 20,
      stream: true,
      stream_options: { include_usage: true },
      seed: 7,
      store: false,
    });
    expect(r.body).toEqual({
      model: MODEL,
      messages: [],
      max_tokens: 20,
      stop_sequences: ['a', 'b'],
      temperature: 0.5,
      top_p: 0.9,
      metadata: { user_id: 'u-1' },
      stream: true,
    });
    expect(r).toMatchObject({ stream: true, includeUsage: true });
    expect(anthropicRequest({ model: MODEL, messages: [], stop: 'x' }).body.stop_sequences).toEqual(['x']);
    expect(anthropicRequest({ model: MODEL, messages: [], stream: true }).includeUsage).toBe(false);
  });

  it.each([
    ['n', { n: 2 }],
    ['logprobs', { logprobs: true }],
    ['top_logprobs', { top_logprobs: 2 }],
    ['logit_bias', { logit_bias: { 1: 5 } }],
    ['audio', { audio: { voice: 'alloy' } }],
    ['modalities', { modalities: ['audio'] }],
    ['frequency_penalty', { frequency_penalty: 0.5 }],
    ['functions', { functions: [] }],
    ['messages[0].role', { messages: [{ role: 'function', content: 'x' }] }],
  ])('%s is refused with 400 naming it', (param, chat) => {
    const r = refusal(chat);
    expect(r.param).toBe(param);
    expect(r.message).toContain(param);
  });

  it('neutral values of refused fields are accepted (what SDKs send by default)', () => {
    expect(() =>
      anthropicRequest({ model: MODEL, messages: [], n: 1, logprobs: false, frequency_penalty: 0, presence_penalty: 0, modalities: ['text'] }),
    ).not.toThrow();
  });
});

describe('shared tables', () => {
  it('stop reasons map both ways', () => {
    expect(['end_turn', 'stop_sequence', 'max_tokens', 'tool_use', 'refusal', 'pause_turn', 'model_context_window_exceeded', null].map(finishForStop)).toEqual([
      'stop',
      'stop',
      'length',
      'tool_calls',
      'content_filter',
      'stop',
      'length',
      'stop',
    ]);
    expect(['stop', 'length', 'tool_calls', 'function_call', 'content_filter'].map(stopForFinish)).toEqual([
      'end_turn',
      'max_tokens',
      'tool_use',
      'tool_use',
      'refusal',
    ]);
  });
});

const message = (over: Partial<Anthropic.Message> = {}) =>
  ({
    id: 'msg_abc',
    type: 'message',
    role: 'assistant',
    model: MODEL,
    content: [{ type: 'text', text: 'hi' }],
    stop_reason: 'end_turn',
    stop_sequence: null,
    usage: { input_tokens: 10, cache_read_input_tokens: 5, cache_creation_input_tokens: 7, output_tokens: 3 },
    ...over,
  }) as Anthropic.Message;

describe('answer: Anthropic → OpenAI', () => {
  it('a message → chat.completion, prompt_tokens including cache reads and writes', () => {
    expect(chatCompletion(message(), { model: MODEL, created: 123 })).toEqual({
      id: 'chatcmpl-abc',
      object: 'chat.completion',
      created: 123,
      model: MODEL,
      choices: [{ index: 0, message: { role: 'assistant', content: 'hi', refusal: null }, finish_reason: 'stop', logprobs: null }],
      usage: { prompt_tokens: 22, completion_tokens: 3, total_tokens: 25, prompt_tokens_details: { cached_tokens: 5 } },
    });
  });

  it('tool_use → tool_calls (content null without text), thinking → reasoning_content, max_tokens → length', () => {
    const c = chatCompletion(
      message({
        content: [
          { type: 'thinking', thinking: 'hmm', signature: 's' },
          { type: 'tool_use', id: 'toolu_1', name: 'f', input: { a: 1 } },
        ] as Anthropic.ContentBlock[],
        stop_reason: 'tool_use',
      }),
      { model: MODEL, created: 1 },
    );
    expect(c.choices[0]!.message).toEqual({
      role: 'assistant',
      content: null,
      refusal: null,
      reasoning_content: 'hmm',
      tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
    });
    expect(c.choices[0]!.finish_reason).toBe('tool_calls');
    expect(chatCompletion(message({ stop_reason: 'max_tokens' }), { model: MODEL, created: 1 }).choices[0]!.finish_reason).toBe('length');
  });

  const events: StreamEvent[] = [
    { type: 'message_start', message: message({ content: [], stop_reason: null, usage: { input_tokens: 10, output_tokens: 1 } as Anthropic.Usage }) },
    { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } } as StreamEvent,
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Hel' } } as StreamEvent,
    { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'lo' } } as StreamEvent,
    { type: 'content_block_stop', index: 0 },
    { type: 'content_block_start', index: 1, content_block: { type: 'tool_use', id: 'toolu_9', name: 'f', input: {} } } as StreamEvent,
    { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '{"a":' } } as StreamEvent,
    { type: 'content_block_delta', index: 1, delta: { type: 'input_json_delta', partial_json: '1}' } } as StreamEvent,
    { type: 'content_block_stop', index: 1 },
    { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 12 } } as StreamEvent,
    { type: 'message_stop' },
  ];
  const parse = (lines: string[]) =>
    lines
      .join('')
      .split('\n\n')
      .filter(Boolean)
      .map((l) => l.replace(/^data: /, ''))
      .map((d) => (d === '[DONE]' ? d : JSON.parse(d)));

  it('a stream → chunks: role, content, tool call deltas by index, finish, usage chunk (asked), [DONE]', () => {
    const t = new ChunkTranslator({ model: MODEL, created: 5, includeUsage: true });
    const chunks = parse(events.flatMap((e) => t.push(e)));
    expect(chunks.map((c) => (c === '[DONE]' ? c : (c.choices[0]?.delta ?? { usage: c.usage })))).toEqual([
      { role: 'assistant', content: '' },
      { content: 'Hel' },
      { content: 'lo' },
      { tool_calls: [{ index: 0, id: 'toolu_9', type: 'function', function: { name: 'f', arguments: '' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '{"a":' } }] },
      { tool_calls: [{ index: 0, function: { arguments: '1}' } }] },
      {},
      { usage: { prompt_tokens: 10, completion_tokens: 12, total_tokens: 22, prompt_tokens_details: { cached_tokens: 0 } } },
      '[DONE]',
    ]);
    expect(chunks[6].choices[0].finish_reason).toBe('tool_calls');
    expect(chunks[7].choices).toEqual([]);
    expect(chunks[0]).toMatchObject({ id: 'chatcmpl-abc', object: 'chat.completion.chunk', created: 5, model: MODEL, usage: null });
    expect(t.end()).toEqual([]);
  });

  it('without include_usage: no usage chunk and no usage field; a broken stream ends with an error chunk and no [DONE]', () => {
    const t = new ChunkTranslator({ model: MODEL, created: 5, includeUsage: false });
    const chunks = parse(events.flatMap((e) => t.push(e)));
    expect(chunks.some((c) => c !== '[DONE]' && 'usage' in c)).toBe(false);
    expect(chunks.at(-1)).toBe('[DONE]');
    const broken = new ChunkTranslator({ model: MODEL, created: 5, includeUsage: false });
    for (const e of events.slice(0, 3)) broken.push(e);
    expect(parse(broken.end())).toEqual([{ error: { message: expect.stringMatching(/ended before/), type: 'api_error', param: null, code: null } }]);
    const failed = new ChunkTranslator({ model: MODEL, created: 5, includeUsage: false });
    failed.push(events[0]!);
    expect(parse(failed.push({ type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }))).toEqual([
      { error: { message: 'Overloaded', type: 'api_error', param: null, code: null } },
    ]);
  });
});
