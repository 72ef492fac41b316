import { describe, expect, it } from 'vitest';
import { TranslationError } from '../../../lambdas/providers/chat-completions/errors.ts';
import { createHash } from 'node:crypto';
import {
  effortForBudget,
  estimateTokens,
  shortenToolName,
  translateRequest,
  type TranslatedRequest,
} from '../../../lambdas/providers/chat-completions/request.ts';
import { OPENAI_DIALECT } from '../../../lambdas/providers/openai/dialect.ts';
import { OPENROUTER_DIALECT } from '../../../lambdas/providers/openrouter/dialect.ts';
import type { MessagesRequest } from '../../../lambdas/providers/types.ts';

const body = (fields: Record<string, unknown>): MessagesRequest =>
  ({ model: 'gpt-4o', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }], ...fields }) as MessagesRequest;

const openai = (fields: Record<string, unknown>, upstreamModel = 'gpt-4o', stream = false): TranslatedRequest =>
  translateRequest(body(fields), { upstreamModel, dialect: OPENAI_DIALECT, stream });

const params = (fields: Record<string, unknown>, upstreamModel?: string) => openai(fields, upstreamModel).params;

const LONG = `mcp__${'very_long_server_name_'.repeat(3)}__search_the_knowledge_base_documents`;

describe('translateRequest: messages', () => {
  it('sends the upstream model name and max_tokens, nothing else for a minimal request', () => {
    expect(params({ model: 'or:x' }, 'gpt-4o-mini')).toEqual({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 100 });
  });

  it('turns a string system prompt into one system message first', () => {
    expect(params({ system: 'Be brief.' }).messages).toEqual([
      { role: 'system', content: 'Be brief.' },
      { role: 'user', content: 'Hi' },
    ]);
  });

  it('joins system text blocks into ONE system message, without cache_control', () => {
    const p = params({
      system: [
        { type: 'text', text: 'Rule one.', cache_control: { type: 'ephemeral' } },
        { type: 'text', text: 'Rule two.' },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'system', content: 'Rule one.\n\nRule two.' },
      { role: 'user', content: 'Hi' },
    ]);
  });

  it('keeps multi-turn text in order, a single text block as a string and several as text parts', () => {
    const p = params({
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'One', cache_control: { type: 'ephemeral' } }] },
        { role: 'assistant', content: [{ type: 'text', text: 'Two' }] },
        {
          role: 'user',
          content: [
            { type: 'text', text: 'Three' },
            { type: 'text', text: 'Four' },
          ],
        },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'user', content: 'One' },
      { role: 'assistant', content: 'Two' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Three' },
          { type: 'text', text: 'Four' },
        ],
      },
    ]);
  });

  it('turns a base64 image into a data URL and a URL image into image_url.url', () => {
    const p = params({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
            { type: 'text', text: 'What are these?' },
          ],
        },
      ],
    });
    expect(p.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg' } },
          { type: 'text', text: 'What are these?' },
        ],
      },
    ]);
  });

  it('turns tool_use into assistant tool_calls with JSON-string arguments and null content', () => {
    const p = params({
      messages: [
        { role: 'user', content: 'Weather?' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'weather', input: { city: 'Paris', days: [1, 2] } }] },
      ],
    });
    expect(p.messages[1]).toEqual({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'toolu_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Paris","days":[1,2]}' } }],
    });
  });

  it('places tool results right after the calling assistant turn, in CALL order, and trailing text after them', () => {
    const p = params({
      messages: [
        { role: 'user', content: 'Go' },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'Calling.' },
            { type: 'tool_use', id: 'call_a', name: 'a', input: {} },
            { type: 'tool_use', id: 'call_b', name: 'b', input: { x: 1 } },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_b', content: 'B result' },
            { type: 'tool_result', tool_use_id: 'call_a', content: 'A result' },
            { type: 'text', text: 'Now summarise.' },
          ],
        },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'user', content: 'Go' },
      {
        role: 'assistant',
        content: 'Calling.',
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'a', arguments: '{}' } },
          { id: 'call_b', type: 'function', function: { name: 'b', arguments: '{"x":1}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: 'A result' },
      { role: 'tool', tool_call_id: 'call_b', content: 'B result' },
      { role: 'user', content: 'Now summarise.' },
    ]);
  });

  it('joins tool_result text blocks, notes is_error, and accepts empty content', () => {
    const p = params({
      messages: [
        {
          role: 'assistant',
          content: [
            { type: 'tool_use', id: 't1', name: 'a', input: {} },
            { type: 'tool_use', id: 't2', name: 'b', input: {} },
            { type: 'tool_use', id: 't3', name: 'c', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 't1',
              content: [
                { type: 'text', text: 'line 1' },
                { type: 'text', text: 'line 2' },
              ],
            },
            { type: 'tool_result', tool_use_id: 't2', content: 'file not found', is_error: true },
            { type: 'tool_result', tool_use_id: 't3' },
          ],
        },
      ],
    });
    expect(p.messages.slice(1)).toEqual([
      { role: 'tool', tool_call_id: 't1', content: 'line 1\nline 2' },
      { role: 'tool', tool_call_id: 't2', content: 'Error: file not found' },
      { role: 'tool', tool_call_id: 't3', content: '' },
    ]);
  });

  it('moves images of a tool result into the user message after the tool messages', () => {
    const p = params({
      messages: [
        { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'screenshot', input: {} }] },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 't1',
              content: [
                { type: 'text', text: 'Captured.' },
                { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: 'AAAA' } },
              ],
            },
          ],
        },
      ],
    });
    expect(p.messages.slice(1)).toEqual([
      { role: 'tool', tool_call_id: 't1', content: 'Captured.' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Image output of tool call t1:' },
          { type: 'image_url', image_url: { url: 'data:image/jpeg;base64,AAAA' } },
        ],
      },
    ]);
  });

  it('drops thinking blocks of earlier assistant turns (their signatures mean nothing upstream)', () => {
    const p = params({
      messages: [
        { role: 'user', content: 'Q' },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'redacted_thinking', data: 'xyz' },
            { type: 'text', text: 'A' },
          ],
        },
        { role: 'user', content: 'Q2' },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'user', content: 'Q' },
      { role: 'assistant', content: 'A' },
      { role: 'user', content: 'Q2' },
    ]);
  });
});

describe('translateRequest: system messages in the middle of the conversation', () => {
  it('puts a role:"system" message (string content) at its own position, after the top-level system prompt', () => {
    const p = params({
      system: 'Opening rules.',
      messages: [
        { role: 'user', content: 'First' },
        { role: 'assistant', content: 'Reply one' },
        { role: 'system', content: 'From now on, answer in French.' },
        { role: 'user', content: 'Second' },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'system', content: 'Opening rules.' },
      { role: 'user', content: 'First' },
      { role: 'assistant', content: 'Reply one' },
      { role: 'system', content: 'From now on, answer in French.' },
      { role: 'user', content: 'Second' },
    ]);
  });

  it('joins text blocks like the top-level system prompt (blank line, cache_control and per-turn fields dropped)', () => {
    // The shape Claude Code sends: text blocks with cache_control, a per-turn output_config on the message itself,
    // and the system message LAST, after the user's turn.
    const p = params({
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: '<system-reminder>r</system-reminder>' },
            { type: 'text', text: 'hi' },
          ],
        },
        {
          role: 'system',
          content: [
            { type: 'text', text: '# Environment' },
            { type: 'text', text: 'Today is Sunday.', cache_control: { type: 'ephemeral' } },
          ],
          output_config: { effort: 'medium' },
        },
      ],
    });
    expect(p.messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'text', text: '<system-reminder>r</system-reminder>' },
          { type: 'text', text: 'hi' },
        ],
      },
      { role: 'system', content: '# Environment\n\nToday is Sunday.' },
    ]);
  });

  it('sends nothing for an empty system message, as for an empty top-level system prompt', () => {
    expect(
      params({
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'system', content: '' },
          { role: 'system', content: [] },
        ],
      }).messages,
    ).toEqual([{ role: 'user', content: 'Hi' }]);
  });

  it('keeps role "system" for reasoning models (like the top-level prompt) and for OpenRouter', () => {
    const messages = [
      { role: 'user', content: 'Hi' },
      { role: 'system', content: 'Be brief.' },
    ];
    expect(params({ system: 'S', messages }, 'o3').messages).toEqual([
      { role: 'system', content: 'S' },
      { role: 'user', content: 'Hi' },
      { role: 'system', content: 'Be brief.' },
    ]);
    const viaRouter = translateRequest(body({ messages }), { upstreamModel: 'meta-llama/llama-3.3-70b-instruct', dialect: OPENROUTER_DIALECT, stream: false });
    expect(viaRouter.params.messages).toEqual([
      { role: 'user', content: 'Hi' },
      { role: 'system', content: 'Be brief.' },
    ]);
  });

  it('places a system message met between tool calls and their results AFTER the tool messages (OpenAI wants them adjacent)', () => {
    const p = params({
      messages: [
        { role: 'user', content: 'Go' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'call_a', name: 'a', input: {} }] },
        { role: 'system', content: 'Tool a is slow today.' },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_a', content: 'A result' },
            { type: 'text', text: 'Go on.' },
          ],
        },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'call_b', name: 'b', input: {} }] },
        { role: 'system', content: 'Last word.' },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'user', content: 'Go' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_a', type: 'function', function: { name: 'a', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_a', content: 'A result' },
      { role: 'system', content: 'Tool a is slow today.' },
      { role: 'user', content: 'Go on.' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_b', type: 'function', function: { name: 'b', arguments: '{}' } }] },
      // Nothing follows: the held message is placed at the end rather than lost.
      { role: 'system', content: 'Last word.' },
    ]);
  });

  it('drops a clear_at:"next_user_message" system message once a later user message exists (Anthropic hides it then)', () => {
    const p = params({
      messages: [
        { role: 'user', content: 'One' },
        { role: 'system', content: 'Only for turn one.', clear_at: 'next_user_message' },
        { role: 'assistant', content: 'Reply' },
        { role: 'system', content: 'Kept.', clear_at: 'never' },
        { role: 'user', content: 'Two' },
        { role: 'system', content: 'For turn two.', clear_at: 'next_user_message' },
      ],
    });
    expect(p.messages).toEqual([
      { role: 'user', content: 'One' },
      { role: 'assistant', content: 'Reply' },
      { role: 'system', content: 'Kept.' },
      { role: 'user', content: 'Two' },
      { role: 'system', content: 'For turn two.' },
    ]);
  });

  it('refuses non-text blocks in a system message, naming where they are', () => {
    expect(() =>
      openai({
        messages: [
          { role: 'user', content: 'Hi' },
          {
            role: 'system',
            content: [
              { type: 'text', text: 'a' },
              { type: 'image', source: {} },
            ],
          },
        ],
      }),
    ).toThrowError(new TranslationError('messages.1.content.1: only text blocks are allowed in a system prompt'));
    expect(() =>
      openai({
        messages: [
          { role: 'user', content: 'Hi' },
          { role: 'system', content: [{ type: 'tool_addition', tool: { type: 'tool_reference', name: 'x' } }] },
        ],
      }),
    ).toThrowError(
      new TranslationError(
        'messages.1.content.0: mid-conversation tool changes (tool_addition) cannot be sent to OpenAI, which serves this model; use a Claude model for them',
      ),
    );
  });

  it.each([
    ['developer', 'messages.1.role: "developer" cannot be sent to OpenAI, which serves this model; a message\'s role must be "user", "assistant" or "system"'],
    ['tool', 'messages.1.role: "tool" cannot be sent to OpenAI, which serves this model; a message\'s role must be "user", "assistant" or "system"'],
    ['', 'messages.1.role: "" cannot be sent to OpenAI, which serves this model; a message\'s role must be "user", "assistant" or "system"'],
  ])('refuses any other role (%j) with a 400 naming the index and the role', (role, message) => {
    expect(() =>
      openai({
        messages: [
          { role: 'user', content: 'Hi' },
          { role, content: 'x' },
        ],
      }),
    ).toThrowError(new TranslationError(message));
  });

  it('names OpenRouter in the refusal when OpenRouter serves the model', () => {
    expect(() =>
      translateRequest(body({ messages: [{ role: 'function', content: 'x' }] }), { upstreamModel: 'x/y', dialect: OPENROUTER_DIALECT, stream: false }),
    ).toThrowError(
      new TranslationError(
        'messages.0.role: "function" cannot be sent to OpenRouter, which serves this model; a message\'s role must be "user", "assistant" or "system"',
      ),
    );
  });
});

describe('translateRequest: tools', () => {
  it('maps input_schema to function.parameters and never leaks type:"custom" or cache_control', () => {
    const schema = { type: 'object', properties: { q: { type: 'string' } }, required: ['q'] };
    const p = params({
      tools: [
        { type: 'custom', name: 'search', description: 'Searches', input_schema: schema, cache_control: { type: 'ephemeral' } },
        { name: 'noop', input_schema: { type: 'object' } },
      ],
    });
    expect(p.tools).toEqual([
      { type: 'function', function: { name: 'search', description: 'Searches', parameters: schema } },
      { type: 'function', function: { name: 'noop', parameters: { type: 'object' } } },
    ]);
    expect(JSON.stringify(p)).not.toMatch(/custom|cache_control/);
  });

  it('shortens names over 64 characters deterministically, the same in tools, tool_choice and history', () => {
    expect(LONG.length).toBeGreaterThan(64);
    const short = shortenToolName(LONG);
    expect(short).toHaveLength(64);
    expect(short).toMatch(/^[A-Za-z0-9_-]{53}_[0-9a-f]{10}$/);
    expect(short.startsWith(LONG.slice(0, 53))).toBe(true);
    expect(shortenToolName(LONG)).toBe(short);
    expect(shortenToolName(`${LONG}2`)).not.toBe(short);
    expect(shortenToolName('short_name')).toBe('short_name');

    const t = openai({
      tools: [{ name: LONG, input_schema: { type: 'object' } }],
      tool_choice: { type: 'tool', name: LONG },
      messages: [
        { role: 'user', content: 'go' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'c1', name: LONG, input: {} }] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'c1', content: 'ok' }] },
      ],
    });
    expect(t.params.tools?.[0]).toEqual({ type: 'function', function: { name: short, parameters: { type: 'object' } } });
    expect(t.params.tool_choice).toEqual({ type: 'function', function: { name: short } });
    expect((t.params.messages[1] as { tool_calls: { function: { name: string } }[] }).tool_calls[0]!.function.name).toBe(short);
    expect(t.names.restore(short)).toBe(LONG);
    expect(t.names.restore('other')).toBe('other');
  });

  it.each([
    [{ type: 'auto' }, { tool_choice: 'auto' }],
    [{ type: 'any' }, { tool_choice: 'required' }],
    [{ type: 'tool', name: 'search' }, { tool_choice: { type: 'function', function: { name: 'search' } } }],
    [{ type: 'none' }, { tool_choice: 'none' }],
    [
      { type: 'auto', disable_parallel_tool_use: true },
      { tool_choice: 'auto', parallel_tool_calls: false },
    ],
    [
      { type: 'any', disable_parallel_tool_use: true },
      { tool_choice: 'required', parallel_tool_calls: false },
    ],
  ])('maps tool_choice %j', (choice, expected) => {
    const p = params({ tools: [{ name: 'search', input_schema: { type: 'object' } }], tool_choice: choice });
    expect({ tool_choice: p.tool_choice, ...(p.parallel_tool_calls !== undefined ? { parallel_tool_calls: p.parallel_tool_calls } : {}) }).toEqual(expected);
  });

  it('sends a deferred tool only once a tool_reference (tool search answer) has loaded it; the reference becomes a line', () => {
    // Claude Code's shape: ToolSearch is a custom tool; WebFetch is deferred until ToolSearch answers with a
    // tool_reference naming it. Names over 64 characters are referred to by the name the upstream knows.
    const tools = [
      { name: 'ToolSearch', input_schema: { type: 'object' } },
      { name: 'WebFetch', input_schema: { type: 'object' }, defer_loading: true },
      { name: LONG, input_schema: { type: 'object' }, defer_loading: true },
      { name: 'Cron', input_schema: { type: 'object' }, defer_loading: true },
    ];
    const before = params({ tools, tool_choice: { type: 'auto' } });
    expect(before.tools!.map((t) => (t as { function: { name: string } }).function.name)).toEqual(['ToolSearch']);
    const after = params({
      tools,
      messages: [
        { role: 'user', content: 'Fetch it' },
        { role: 'assistant', content: [{ type: 'tool_use', id: 'call_1', name: 'ToolSearch', input: { query: 'select:WebFetch' } }] },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 'call_1',
              content: [
                { type: 'tool_reference', tool_name: 'WebFetch' },
                { type: 'tool_reference', tool_name: LONG, cache_control: { type: 'ephemeral' } },
              ],
            },
          ],
        },
      ],
    });
    expect(after.tools!.map((t) => (t as { function: { name: string } }).function.name)).toEqual(['ToolSearch', 'WebFetch', shortenToolName(LONG)]);
    expect(after.messages[2]).toEqual({ role: 'tool', tool_call_id: 'call_1', content: `Tool loaded: WebFetch\nTool loaded: ${shortenToolName(LONG)}` });
  });

  it('sends no tools (and no tool_choice) when every tool is deferred and none is loaded', () => {
    const p = params({ tools: [{ name: 'a', input_schema: { type: 'object' }, defer_loading: true }], tool_choice: { type: 'any' } });
    expect(p).not.toHaveProperty('tools');
    expect(p).not.toHaveProperty('tool_choice');
  });

  it('omits tool_choice when there are no tools (OpenAI refuses it alone)', () => {
    const p = params({ tool_choice: { type: 'auto' } });
    expect(p).not.toHaveProperty('tool_choice');
    expect(p).not.toHaveProperty('tools');
  });
});

describe('translateRequest: parameters', () => {
  it('maps stop_sequences, temperature, top_p and metadata.user_id; drops top_k and other Anthropic-only fields', () => {
    const p = params({
      stop_sequences: ['END', '###'],
      temperature: 0.3,
      top_p: 0.9,
      top_k: 40,
      metadata: { user_id: 'user-42' },
      service_tier: 'auto',
      cache_control: { type: 'ephemeral' },
    });
    expect(p).toEqual({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'Hi' }],
      stop: ['END', '###'],
      temperature: 0.3,
      top_p: 0.9,
      user: 'user-42',
      max_tokens: 100,
    });
  });

  it.each(['o1', 'o1-mini', 'o3-mini', 'o4-mini', 'gpt-5', 'gpt-5-mini'])(
    'sends max_completion_tokens and no temperature/top_p to the reasoning model %s',
    (model) => {
      const p = params({ temperature: 0.5, top_p: 0.8 }, model);
      expect(p.max_completion_tokens).toBe(100);
      expect(p).not.toHaveProperty('max_tokens');
      expect(p).not.toHaveProperty('temperature');
      expect(p).not.toHaveProperty('top_p');
    },
  );

  it('keeps max_tokens, temperature and top_p for other models', () => {
    const p = params({ temperature: 0.5, top_p: 0.8 }, 'gpt-4.1');
    expect([p.max_tokens, p.temperature, p.top_p, p.max_completion_tokens]).toEqual([100, 0.5, 0.8, undefined]);
  });

  it('maps the thinking budget to reasoning_effort at 4096 and 16384', () => {
    expect([1024, 4095, 4096, 16383, 16384, 32000].map(effortForBudget)).toEqual(['low', 'low', 'medium', 'medium', 'high', 'high']);
    const effort = (budget: number) => params({ thinking: { type: 'enabled', budget_tokens: budget } }, 'o3').reasoning_effort;
    expect([effort(2048), effort(4096), effort(16384)]).toEqual(['low', 'medium', 'high']);
  });

  it('sends no reasoning_effort to models that do not reason, and none without thinking', () => {
    expect(params({ thinking: { type: 'enabled', budget_tokens: 20000 } }, 'gpt-4o')).not.toHaveProperty('reasoning_effort');
    expect(params({ thinking: { type: 'disabled' } }, 'o3')).not.toHaveProperty('reasoning_effort');
  });

  it('maps output_config.effort and output_config.format', () => {
    const schema = { type: 'object', properties: { answer: { type: 'string' } } };
    const p = params({ output_config: { effort: 'max', format: { type: 'json_schema', schema } } }, 'gpt-5');
    expect(p.reasoning_effort).toBe('high');
    expect(p.response_format).toEqual({ type: 'json_schema', json_schema: { name: 'output', schema } });
  });

  it('sends a metadata.user_id over 64 characters as its SHA-256 (upstreams refuse long ids; Claude Code sends ~150)', () => {
    const claudeCodeId = JSON.stringify({ device_id: 'd'.repeat(64), account_uuid: '', session_id: '9c377142-9156-41af-a026-bbfa403fc5eb' });
    expect(claudeCodeId.length).toBe(150);
    const sent = params({ metadata: { user_id: claudeCodeId } }).user;
    expect(sent).toBe(createHash('sha256').update(claudeCodeId).digest('hex'));
    expect(sent).toHaveLength(64);
    expect(params({ metadata: { user_id: 'u'.repeat(64) } }).user).toBe('u'.repeat(64));
    expect(params({ metadata: { user_id: 'u'.repeat(65) } }).user).toBe(createHash('sha256').update('u'.repeat(65)).digest('hex'));
  });

  it('asks for a stream with usage in its last chunk', () => {
    const p = openai({}, 'gpt-4o', true).params;
    expect(p.stream).toBe(true);
    expect(p.stream_options).toEqual({ include_usage: true });
    expect(openai({}).params).not.toHaveProperty('stream');
  });

  it('OpenRouter: max_tokens for every model, reasoning.max_tokens from the budget, usage accounting', () => {
    const t = translateRequest(body({ thinking: { type: 'enabled', budget_tokens: 5000 }, temperature: 0.2 }), {
      upstreamModel: 'openai/o3',
      dialect: OPENROUTER_DIALECT,
      stream: true,
    });
    expect(t.params).toEqual({
      model: 'openai/o3',
      messages: [{ role: 'user', content: 'Hi' }],
      temperature: 0.2,
      max_tokens: 100,
      reasoning: { max_tokens: 5000 },
      usage: { include: true },
      stream: true,
      stream_options: { include_usage: true },
    });
    const effort = translateRequest(body({ output_config: { effort: 'low' } }), { upstreamModel: 'x/y', dialect: OPENROUTER_DIALECT, stream: false });
    expect(effort.params.reasoning).toEqual({ effort: 'low' });
  });
});

describe('translateRequest: what cannot be translated is a clear 400', () => {
  const refused = (fields: Record<string, unknown>) => () => openai(fields);

  it('refuses document blocks, naming where they are', () => {
    expect(
      refused({ messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } }] }] }),
    ).toThrowError(
      new TranslationError(
        'messages.0.content.0: document (PDF / plain-text document) blocks cannot be sent to OpenAI, which serves this model; use a Claude model for them',
      ),
    );
  });

  it('refuses documents inside tool results, server tools, file images and the MCP connector', () => {
    expect(
      refused({
        messages: [
          { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'a', input: {} }] },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: [{ type: 'document', source: {} }] }] },
        ],
      }),
    ).toThrow(/^messages\.1\.content\.0\.content\.0: document/);
    expect(refused({ tools: [{ type: 'web_search_20250305', name: 'web_search' }] })).toThrow(
      /tools\.0: the server \/ Anthropic-defined tool "web_search_20250305"/,
    );
    expect(refused({ messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'file', file_id: 'f1' } }] }] })).toThrow(/image source "file"/);
    expect(refused({ mcp_servers: [{ type: 'url', url: 'https://x', name: 'x' }] })).toThrow(/MCP connector/);
    expect(refused({ system: [{ type: 'image', source: {} }] })).toThrow(/system\.0: only text blocks/);
  });
});

describe('estimateTokens', () => {
  it('is ceil(chars / 4) of the translated messages and tools', () => {
    const t = openai({ system: 'S', tools: [{ name: 'a', input_schema: { type: 'object' } }] });
    const json = JSON.stringify({ messages: t.params.messages, tools: t.params.tools });
    expect(estimateTokens(t.params)).toBe(Math.ceil(json.length / 4));
    expect(json).toBe(
      '{"messages":[{"role":"system","content":"S"},{"role":"user","content":"Hi"}],"tools":[{"type":"function","function":{"name":"a","parameters":{"type":"object"}}}]}',
    );
    expect(estimateTokens(t.params)).toBe(41);
  });

  it('counts an image as 1600 tokens, not by the length of its data URL', () => {
    const image = (data: string) =>
      openai({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'image', source: { type: 'base64', media_type: 'image/png', data } },
              { type: 'text', text: 'Hi' },
            ],
          },
        ],
      }).params;
    const small = estimateTokens(image('AAAA'));
    expect(estimateTokens(image('A'.repeat(400_000)))).toBe(small);
    expect(small).toBe(Math.ceil('{"messages":[{"role":"user","content":[{"type":"image_url"},{"type":"text","text":"Hi"}]}]}'.length / 4) + 1600);
  });
});
