import type OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import { shortenToolName, ToolNames } from '../../../lambdas/providers/chat-completions/request.ts';
import { messageId, parseArguments, translateResponse, type AnswerContext } from '../../../lambdas/providers/chat-completions/response.ts';
import { OPENAI_DIALECT } from '../../../lambdas/providers/openai/dialect.ts';
import { OPENROUTER_DIALECT } from '../../../lambdas/providers/openrouter/dialect.ts';

const LONG = `mcp__${'x'.repeat(70)}__tool`;

function ctx(over: Partial<AnswerContext> = {}): AnswerContext {
  const names = new ToolNames();
  names.upstream(LONG);
  return { requestedModel: 'gpt-4o', names, dialect: OPENAI_DIALECT, stopSequences: [], ...over };
}

function completion(message: Record<string, unknown>, finish: string, extra: Record<string, unknown> = {}): OpenAI.Chat.ChatCompletion {
  return {
    id: 'chatcmpl-abc123',
    object: 'chat.completion',
    created: 1,
    model: 'gpt-4o-2024-08-06',
    choices: [{ index: 0, message: { role: 'assistant', content: null, refusal: null, ...message }, finish_reason: finish, logprobs: null, ...extra }],
    usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120, prompt_tokens_details: { cached_tokens: 30 } },
  } as OpenAI.Chat.ChatCompletion;
}

describe('translateResponse', () => {
  it('builds an Anthropic message: thinking first (empty signature), text, tool_use with parsed input and restored name', () => {
    const msg = translateResponse(
      completion(
        {
          content: 'Let me check.',
          reasoning_content: 'The user wants weather.',
          tool_calls: [
            { id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_2', type: 'function', function: { name: shortenToolName(LONG), arguments: '{}' } },
          ],
        },
        'tool_calls',
      ),
      ctx({ requestedModel: 'or:meta-llama/llama-3.3-70b' }),
    );
    expect(msg).toEqual({
      id: 'msg_abc123',
      type: 'message',
      role: 'assistant',
      model: 'or:meta-llama/llama-3.3-70b',
      content: [
        { type: 'thinking', thinking: 'The user wants weather.', signature: '' },
        { type: 'text', text: 'Let me check.' },
        { type: 'tool_use', id: 'call_1', name: 'weather', input: { city: 'Paris' } },
        { type: 'tool_use', id: 'call_2', name: LONG, input: {} },
      ],
      stop_reason: 'tool_use',
      stop_sequence: null,
      usage: { input_tokens: 70, cache_creation_input_tokens: 0, cache_read_input_tokens: 30, output_tokens: 20 },
    });
  });

  it.each([
    ['stop', 'end_turn'],
    ['length', 'max_tokens'],
    ['tool_calls', 'tool_use'],
    ['content_filter', 'refusal'],
    ['function_call', 'tool_use'],
  ])('maps finish_reason %s to stop_reason %s', (finish, stop) => {
    expect(translateResponse(completion({ content: 'x' }, finish), ctx()).stop_reason).toBe(stop);
  });

  it('says tool_use when a server finishes tool calls with "stop"', () => {
    const msg = translateResponse(completion({ tool_calls: [{ id: 'c', type: 'function', function: { name: 'a', arguments: '{}' } }] }, 'stop'), ctx());
    expect(msg.stop_reason).toBe('tool_use');
  });

  it('reports stop_sequence only when the server names the matched sequence (vLLM-style choice.stop_reason)', () => {
    const c = ctx({ stopSequences: ['END', '###'] });
    expect(translateResponse(completion({ content: 'x' }, 'stop', { stop_reason: '###' }), c)).toMatchObject({
      stop_reason: 'stop_sequence',
      stop_sequence: '###',
    });
    expect(translateResponse(completion({ content: 'x' }, 'stop', { stop_reason: 'other' }), c)).toMatchObject({
      stop_reason: 'end_turn',
      stop_sequence: null,
    });
    expect(translateResponse(completion({ content: 'x' }, 'stop'), c)).toMatchObject({ stop_reason: 'end_turn', stop_sequence: null });
  });

  it('turns a refusal into its text with stop_reason refusal', () => {
    const msg = translateResponse(completion({ refusal: 'I cannot help with that.' }, 'stop'), ctx());
    expect(msg.content).toEqual([{ type: 'text', text: 'I cannot help with that.' }]);
    expect(msg.stop_reason).toBe('refusal');
  });

  it('keeps tool arguments that are not a JSON object as {}', () => {
    expect(parseArguments('{"a":')).toEqual({});
    expect(parseArguments('[1,2]')).toEqual({});
    expect(parseArguments('')).toEqual({});
    expect(parseArguments(undefined)).toEqual({});
    expect(parseArguments('{"a":[1]}')).toEqual({ a: [1] });
    const msg = translateResponse(
      completion({ tool_calls: [{ id: 'c', type: 'function', function: { name: 'a', arguments: '{"broken' } }] }, 'tool_calls'),
      ctx(),
    );
    expect(msg.content).toEqual([{ type: 'tool_use', id: 'c', name: 'a', input: {} }]);
  });

  it('reads reasoning from the dialect field: reasoning_content (OpenAI), reasoning (OpenRouter)', () => {
    const onlyReasoning = completion({ content: 'Hi', reasoning: 'OpenRouter thought' }, 'stop');
    expect(translateResponse(onlyReasoning, ctx({ dialect: OPENROUTER_DIALECT })).content[0]).toEqual({
      type: 'thinking',
      thinking: 'OpenRouter thought',
      signature: '',
    });
    expect(translateResponse(onlyReasoning, ctx()).content).toEqual([{ type: 'text', text: 'Hi' }]);
  });

  it('handles no usage and no choices without inventing content', () => {
    const c = { id: 'gen-17-xyz', object: 'chat.completion', created: 1, model: 'm', choices: [] } as unknown as OpenAI.Chat.ChatCompletion;
    expect(translateResponse(c, ctx())).toEqual({
      id: 'msg_17-xyz',
      type: 'message',
      role: 'assistant',
      model: 'gpt-4o',
      content: [],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, output_tokens: 0 },
    });
  });

  it('makes Anthropic-style ids', () => {
    expect(messageId('chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT')).toBe('msg_B9MBs8CjcvOU2jLn4n570S5qMJKcT');
    expect(messageId('gen-1750000000-AbC')).toBe('msg_1750000000-AbC');
    expect(messageId(undefined)).toMatch(/^msg_[0-9a-f]{24}$/);
  });
});
