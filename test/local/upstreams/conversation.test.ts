/**
 * Scripted multi-turn conversations in the simulated upstreams (turn-scoped `[[N> ...]]`
 * directives read from the prompt, the tool-results echo, `[[json:...]]` / `[[json-invalid]]`),
 * driven through the real SDK clients against both simulators, JSON and streamed.
 */
import { describe, it, expect, beforeAll, afterAll } from 'vitest';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startAnthropicUpstream } from '../../../bin/local/upstreams/anthropic.ts';
import { startOpenAIUpstream } from '../../../bin/local/upstreams/openai.ts';
import {
  anthropicConversation,
  countWords,
  EMPTY_ECHO_TEXT,
  estimateInputTokens,
  INVALID_JSON_TEXT,
  openaiConversation,
  parseDirectives,
  scriptConversation,
  THINKING_SIGNATURE,
  THINKING_TEXT,
  toolCallTokens,
} from '../../../bin/local/upstreams/script.ts';
import type { SimulatedUpstream } from '../../../bin/local/upstreams/types.ts';

let anthropicUp: SimulatedUpstream;
let openaiUp: SimulatedUpstream;
let anthropic: Anthropic;
let openai: OpenAI;
let openrouter: OpenAI;

beforeAll(async () => {
  [anthropicUp, openaiUp] = await Promise.all([startAnthropicUpstream(), startOpenAIUpstream()]);
  anthropic = new Anthropic({ apiKey: 'sk-ant-test', baseURL: anthropicUp.url, maxRetries: 0 });
  openai = new OpenAI({ apiKey: 'sk-test', baseURL: `${openaiUp.url}/v1`, maxRetries: 0 });
  openrouter = new OpenAI({ apiKey: 'sk-or-test', baseURL: `${openaiUp.url}/api/v1`, maxRetries: 0 });
});

afterAll(async () => {
  await Promise.all([anthropicUp.close(), openaiUp.close()]);
});

const THINKING_WORDS = countWords(THINKING_TEXT); // 6

/**
 * Turn 1: two parallel tool calls; turn 2: one more tool call; turn 3: a JSON answer (with a
 * space inside, so it is 2 "words"). `[[thinking]]` is unscoped: every turn has thinking.
 */
const PROMPT =
  'Plan my day. [[thinking]] [[1> tool:get_weather {"city":"Paris"}]] [[1> tool:get_time {"tz":"CET"}]] ' +
  '[[2> tool:get_weather {"city":"Oslo"}]] [[3> json:{"plan":"walk","hours":[9, 17]}]]';
const FINAL_JSON = '{"plan":"walk","hours":[9, 17]}';
const TURN2_TEXT = 'Tool results: 18°C, sunny | 14:00';

/** What each tool "returns" in the tests' loops. */
function toolResult(name: string, input: unknown): string {
  const city = (input as { city?: string }).city;
  if (name === 'get_weather') return city === 'Paris' ? '18°C, sunny' : '5°C, rain';
  return '14:00';
}

function turnOutputTokens(): number[] {
  return [
    THINKING_WORDS + 2 + toolCallTokens({ city: 'Paris' }) + toolCallTokens({ tz: 'CET' }),
    THINKING_WORDS + countWords(TURN2_TEXT) + toolCallTokens({ city: 'Oslo' }),
    THINKING_WORDS + 2,
  ];
}

describe('turn-scoped directive parsing', () => {
  it('applies [[N> ...]] only on turn N, unscoped directives on every turn', () => {
    const text = 'Go [[1> tool:a {"x":1}]] [[2>words:3]] [[thinking]] [[3> json:[1, 2]]] [[1> nope]] now';
    const t1 = parseDirectives(text, 1);
    expect(t1.errors).toEqual([]);
    expect(t1.text).toBe('Go     [[1> nope]] now');
    expect(t1.directives).toMatchObject({ tools: [{ name: 'a', input: { x: 1 } }], thinking: true });
    expect(t1.directives.words).toBeUndefined();
    expect(parseDirectives(text, 2).directives).toMatchObject({ tools: [], words: 3, thinking: true });
    expect(parseDirectives(text, 3).directives).toMatchObject({ tools: [], json: '[1, 2]', thinking: true });
    expect(parseDirectives(text, 4).directives).toMatchObject({ tools: [], thinking: true });
    expect(parseDirectives(text).entries?.map((e) => e.turn)).toEqual([1, 2, undefined, 3]);
  });

  it("lets the turn's own value win, unscoped tools first; the last text directive wins", () => {
    const text = '[[2> words:3]] [[words:5]] [[2> tool:b]] [[tool:a]]';
    expect(parseDirectives(text, 1).directives).toMatchObject({ words: 5, tools: [{ name: 'a', input: {} }] });
    expect(parseDirectives(text, 2).directives).toMatchObject({
      words: 3,
      tools: [
        { name: 'a', input: {} },
        { name: 'b', input: {} },
      ],
    });
    const json = parseDirectives('[[words:2]] [[json: {"a":1} ]]').directives;
    expect(json.json).toBe('{"a":1}');
    expect(json.words).toBeUndefined();
    const words = parseDirectives('[[json-invalid]] [[words:2]]').directives;
    expect(words.json).toBeUndefined();
    expect(words.words).toBe(2);
    expect(parseDirectives('[[json-invalid]]').directives.json).toBe(INVALID_JSON_TEXT);
  });

  it('reports malformed directives whatever their turn', () => {
    expect(parseDirectives('[[0> words:1]]').errors).toEqual(['Invalid directive [[0> words:1]]: the turn must be 1 or more']);
    expect(parseDirectives('[[3> words:x]]', 1).errors).toHaveLength(1);
    expect(parseDirectives('[[json:{bad}]]').errors).toHaveLength(1);
    expect(parseDirectives('[[json:]]').errors).toHaveLength(1);
  });

  it('keeps unscripted conversations as they were: only the last user message, no tool-results echo', () => {
    const body = {
      messages: [
        { role: 'user', content: 'Weather? [[tool:get {"a":1}]]' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'get', input: { a: 1 } }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1', content: 'Sunny' }] },
      ],
    };
    const script = scriptConversation(anthropicConversation(body));
    expect(script.turn).toBe(2);
    expect(script.directives.tools).toEqual([]);
    expect(script.toolResults).toBeUndefined();
    expect(script.text).toBe('');
  });

  it('reads the prompt in a scripted conversation unless the last user message has directives of its own', () => {
    const base = [
      { role: 'system', content: '[[2> words:9]]' },
      { role: 'user', content: 'Q [[1> tool:get]] [[2> words:4]]' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'get', arguments: '{}' } }] },
      {
        role: 'tool',
        tool_call_id: 'c1',
        content: [
          { type: 'text', text: 'a' },
          { type: 'text', text: 'b' },
        ],
      },
    ];
    const fromPrompt = scriptConversation(openaiConversation({ messages: base }));
    expect(fromPrompt).toMatchObject({ turn: 2, text: '', toolResults: ['a\nb'] });
    expect(fromPrompt.directives.words).toBe(4);
    const own = scriptConversation(openaiConversation({ messages: [...base, { role: 'user', content: 'More [[thinking]]' }] }));
    expect(own).toMatchObject({ turn: 2, text: 'More', toolResults: ['a\nb'] });
    expect(own.directives.words).toBeUndefined();
    expect(own.directives.thinking).toBe(true);
  });
});

describe('scripted conversation: Anthropic simulator via @anthropic-ai/sdk', () => {
  const tools: Anthropic.Tool[] = [
    { name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
    { name: 'get_time', input_schema: { type: 'object', properties: { tz: { type: 'string' } } } },
  ];

  async function loop(stream: boolean): Promise<{ replies: Anthropic.Message[]; bodies: Record<string, unknown>[] }> {
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: PROMPT }];
    const replies: Anthropic.Message[] = [];
    const bodies: Record<string, unknown>[] = [];
    for (let turn = 1; turn <= 5; turn++) {
      const params = {
        model: 'claude-sonnet-4-6',
        max_tokens: 4096,
        thinking: { type: 'enabled' as const, budget_tokens: 2048 },
        tools,
        messages: [...messages],
      };
      const msg = stream ? await anthropic.messages.stream(params).finalMessage() : await anthropic.messages.create(params);
      replies.push(msg);
      bodies.push(anthropicUp.requests.at(-1)!.body as Record<string, unknown>);
      if (msg.stop_reason !== 'tool_use') break;
      messages.push({ role: 'assistant', content: msg.content });
      messages.push({
        role: 'user',
        content: msg.content
          .filter((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')
          .map((call) => ({
            type: 'tool_result' as const,
            tool_use_id: call.id,
            // one result as a string, the other as text blocks
            content: call.name === 'get_time' ? [{ type: 'text' as const, text: toolResult(call.name, call.input) }] : toolResult(call.name, call.input),
          })),
      });
    }
    return { replies, bodies };
  }

  for (const stream of [false, true]) {
    it(`runs a 3-turn scripted tool loop (${stream ? 'streamed' : 'JSON'})`, async () => {
      const { replies, bodies } = await loop(stream);
      const thinking = { type: 'thinking', thinking: THINKING_TEXT, signature: THINKING_SIGNATURE };
      const toolUse = (name: string, input: unknown): unknown => ({ type: 'tool_use', id: expect.stringMatching(/^toolu_sim_\d+$/), name, input });
      expect(replies.map((r) => [r.stop_reason, r.content])).toEqual([
        ['tool_use', [thinking, { type: 'text', text: 'Calling tools.' }, toolUse('get_weather', { city: 'Paris' }), toolUse('get_time', { tz: 'CET' })]],
        ['tool_use', [thinking, { type: 'text', text: TURN2_TEXT }, toolUse('get_weather', { city: 'Oslo' })]],
        ['end_turn', [thinking, { type: 'text', text: FINAL_JSON }]],
      ]);
      const final = replies[2]!.content[1] as Anthropic.TextBlock;
      expect(JSON.parse(final.text)).toEqual({ plan: 'walk', hours: [9, 17] });
      expect(replies.map((r) => r.usage.output_tokens)).toEqual(turnOutputTokens());
      expect(replies.map((r) => r.usage.input_tokens)).toEqual(bodies.map((b) => estimateInputTokens(b)));
      // The thinking budget reaches the upstream on every turn, and so do the tool results.
      expect(bodies.map((b) => b.thinking)).toEqual(Array(3).fill({ type: 'enabled', budget_tokens: 2048 }));
      expect(bodies.map((b) => (b.messages as unknown[]).length)).toEqual([1, 3, 5]);
    });
  }

  it('scripts a structured-output retry with [[json-invalid]]', async () => {
    const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'Answer in JSON. [[1> json-invalid]] [[2> json:{"ok":true}]]' }];
    const first = await anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 100, messages });
    expect(first.content).toEqual([{ type: 'text', text: INVALID_JSON_TEXT }]);
    expect(() => JSON.parse(INVALID_JSON_TEXT) as unknown).toThrow();
    expect(first.usage.output_tokens).toBe(2);
    messages.push({ role: 'assistant', content: first.content }, { role: 'user', content: 'That was not valid JSON; try again.' });
    const second = await anthropic.messages.stream({ model: 'claude-sonnet-4-6', max_tokens: 100, messages }).finalMessage();
    expect(second.content).toEqual([{ type: 'text', text: '{"ok":true}' }]);
    expect(second.stop_reason).toBe('end_turn');
    expect(second.usage.output_tokens).toBe(1);
  });

  it('scopes errors to a turn and reports malformed prompt directives on every turn', async () => {
    const convo = (prompt: string, turns: number): Anthropic.MessageParam[] => {
      const m: Anthropic.MessageParam[] = [{ role: 'user', content: prompt }];
      for (let i = 1; i < turns; i++) m.push({ role: 'assistant', content: 'ok' }, { role: 'user', content: 'next' });
      return m;
    };
    const create = (messages: Anthropic.MessageParam[]) => anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 100, messages });
    const one = await create(convo('Hi [[2> error:529]] [[1> words:1]]', 1));
    expect(one.content).toEqual([{ type: 'text', text: 'word1' }]);
    await expect(create(convo('Hi [[2> error:529]] [[1> words:1]]', 2))).rejects.toMatchObject({ status: 529 });
    // Turn 3: nothing scoped to it; the last user message's text is echoed.
    expect((await create(convo('Hi [[2> error:529]] [[1> words:1]]', 3))).content).toEqual([{ type: 'text', text: 'Echo: next' }]);
    await expect(create(convo('Hi [[1> words:1]] [[4> json:{nope}]]', 2))).rejects.toMatchObject({ status: 400 });
  });

  it('keeps an unscripted tool loop ending with the plain echo', async () => {
    const first = await anthropic.messages.create({
      model: 'claude-sonnet-4-6',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'Weather? [[tool:get_weather {"city":"Paris"}]]' }],
    });
    const call = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!;
    const second = await anthropic.messages.create({
      model: 'claude-sonnet-4-6',
      max_tokens: 100,
      messages: [
        { role: 'user', content: 'Weather? [[tool:get_weather {"city":"Paris"}]]' },
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Sunny' }] },
      ],
    });
    expect(second.content).toEqual([{ type: 'text', text: EMPTY_ECHO_TEXT }]);
    expect(second.stop_reason).toBe('end_turn');
  });
});

describe('scripted conversation: OpenAI simulator via the openai SDK', () => {
  const tools: OpenAI.ChatCompletionTool[] = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } },
    { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { tz: { type: 'string' } } } } },
  ];

  async function loop(
    client: OpenAI,
    stream: boolean,
    extra: Record<string, unknown>,
  ): Promise<{ replies: OpenAI.ChatCompletion[]; bodies: Record<string, unknown>[] }> {
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: PROMPT },
    ];
    const replies: OpenAI.ChatCompletion[] = [];
    const bodies: Record<string, unknown>[] = [];
    for (let turn = 1; turn <= 5; turn++) {
      const params = { model: 'gpt-4.1-mini', tools, messages: [...messages], ...extra } as OpenAI.ChatCompletionCreateParamsNonStreaming;
      const c = stream
        ? await client.chat.completions.stream({ ...params, stream: true, stream_options: { include_usage: true } }).finalChatCompletion()
        : await client.chat.completions.create(params);
      replies.push(c);
      bodies.push(openaiUp.requests.at(-1)!.body as Record<string, unknown>);
      const choice = c.choices[0]!;
      if (choice.finish_reason !== 'tool_calls') break;
      const calls = (choice.message.tool_calls ?? []).flatMap((t) => (t.type === 'function' ? [t] : []));
      messages.push({
        role: 'assistant',
        content: choice.message.content,
        tool_calls: calls.map((t) => ({ id: t.id, type: 'function', function: t.function })),
      });
      for (const call of calls) {
        const result = toolResult(call.function.name, JSON.parse(call.function.arguments));
        messages.push({
          role: 'tool',
          tool_call_id: call.id,
          // one result as a string, the other as text parts
          content: call.function.name === 'get_time' ? [{ type: 'text', text: result }] : result,
        });
      }
    }
    return { replies, bodies };
  }

  const cases = [
    { label: 'OpenAI, JSON', stream: false, router: false },
    { label: 'OpenAI, streamed', stream: true, router: false },
    { label: 'OpenRouter path, JSON', stream: false, router: true },
    { label: 'OpenRouter path, streamed', stream: true, router: true },
  ];
  for (const { label, stream, router } of cases) {
    it(`runs a 3-turn scripted tool loop (${label})`, async () => {
      const extra = router ? { reasoning: { max_tokens: 2048 } } : { reasoning_effort: 'high' };
      const { replies, bodies } = await loop(router ? openrouter : openai, stream, extra);
      const call = (name: string, args: string): unknown => ({
        id: expect.stringMatching(/^call_sim_\d+$/),
        type: 'function',
        function: { name, arguments: args },
      });
      expect(
        replies.map((r) => {
          const { finish_reason, message } = r.choices[0]!;
          return [
            finish_reason,
            message.content,
            (message.tool_calls ?? []).map((t) => ({ id: t.id, type: t.type, function: t.type === 'function' ? t.function : undefined })),
          ];
        }),
      ).toEqual([
        ['tool_calls', 'Calling tools.', [call('get_weather', '{"city":"Paris"}'), call('get_time', '{"tz":"CET"}')]],
        ['tool_calls', TURN2_TEXT, [call('get_weather', '{"city":"Oslo"}')]],
        ['stop', FINAL_JSON, []],
      ]);
      expect(JSON.parse(replies[2]!.choices[0]!.message.content!)).toEqual({ plan: 'walk', hours: [9, 17] });
      // Unscoped [[thinking]] applies on every turn.
      if (!stream) {
        for (const r of replies) expect((r.choices[0]!.message as unknown as { reasoning_content?: string }).reasoning_content).toBe(THINKING_TEXT);
      }
      expect(replies.map((r) => r.usage?.completion_tokens_details?.reasoning_tokens)).toEqual([THINKING_WORDS, THINKING_WORDS, THINKING_WORDS]);
      expect(replies.map((r) => r.usage?.completion_tokens)).toEqual(turnOutputTokens());
      expect(replies.map((r) => r.usage?.prompt_tokens)).toEqual(bodies.map((b) => estimateInputTokens(b)));
      // The reasoning setting reaches the upstream on every turn, on the path the client used.
      expect(openaiUp.requests.at(-1)!.path).toBe(router ? '/api/v1/chat/completions' : '/v1/chat/completions');
      for (const b of bodies) {
        if (router) expect(b.reasoning).toEqual({ max_tokens: 2048 });
        else expect(b.reasoning_effort).toBe('high');
      }
      expect(bodies.map((b) => (b.messages as unknown[]).length)).toEqual([2, 5, 7]);
    });
  }

  it('scripts a structured-output retry with [[json-invalid]]', async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: 'user', content: 'Answer in JSON. [[1> json-invalid]] [[2> json:{"ok":true}]]' }];
    const first = await openai.chat.completions.create({ model: 'gpt-4.1-mini', messages });
    expect(first.choices[0]!.message.content).toBe(INVALID_JSON_TEXT);
    expect(first.usage?.completion_tokens).toBe(2);
    messages.push({ role: 'assistant', content: INVALID_JSON_TEXT }, { role: 'user', content: 'That was not valid JSON; try again.' });
    const second = await openai.chat.completions
      .stream({ model: 'gpt-4.1-mini', messages, stream: true, stream_options: { include_usage: true } })
      .finalChatCompletion();
    expect(second.choices[0]!.message.content).toBe('{"ok":true}');
    expect(second.choices[0]!.finish_reason).toBe('stop');
    expect(second.usage?.completion_tokens).toBe(1);
  });
});
