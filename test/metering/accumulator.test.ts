import { describe, expect, it } from 'vitest';
import { MessageAccumulator } from '../../lambdas/metering/accumulator.ts';

/** The accumulator meters usage as Anthropic sends it (distrusting only what is really implausible) and rebuilds the message. */
const sse = (events: object[]) =>
  new TextEncoder().encode(events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join(''));

function meter(events: object[]): MessageAccumulator {
  const m = new MessageAccumulator();
  m.push(sse(events));
  m.end();
  return m;
}

const start = { type: 'message_start', message: { usage: { input_tokens: 40, output_tokens: 1, cache_read_input_tokens: 5, cache_creation_input_tokens: 0 } } };
const deltas = [1, 2, 3].map((i) => ({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: `w${i} ` } }));

describe('MessageAccumulator: usage', () => {
  it('a final usage that gives the counts it does not repeat as null is trusted, and the earlier figures kept', () => {
    const m = meter([
      start,
      ...deltas,
      {
        type: 'message_delta',
        delta: { stop_reason: 'end_turn' },
        usage: { input_tokens: null, output_tokens: 7, cache_read_input_tokens: null, server_tool_use: null },
      },
      { type: 'message_stop' },
    ]);
    expect(m.usageUntrusted).toBe(false);
    expect(m.tokens(999, 100)).toEqual({
      input_tokens: 40,
      output_tokens: 7,
      cache_read_input_tokens: 5,
      cache_creation_input_tokens: 0,
      web_search_requests: 0,
    });
  });

  it('an implausible figure makes the whole usage object untrusted; the charge falls back to what was produced', () => {
    const m = meter([start, ...deltas, { type: 'message_delta', usage: { output_tokens: 1e301 } }, { type: 'message_stop' }]);
    expect(m.usageUntrusted).toBe(true);
    expect(m.tokens(999, 100).output_tokens).toBe(3);
  });
});

describe('MessageAccumulator: the message, rebuilt once from the stream', () => {
  const message = {
    id: 'msg_1',
    type: 'message',
    role: 'assistant',
    model: 'claude-x',
    content: [],
    stop_reason: null,
    stop_sequence: null,
    usage: start.message.usage,
  };
  const events = [
    { type: 'message_start', message },
    { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'Let me ' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'think.' } },
    { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } },
    { type: 'content_block_stop', index: 0 },
    { type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } },
    { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Hello ' } },
    { type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'world' } },
    { type: 'content_block_stop', index: 1 },
    { type: 'content_block_start', index: 2, content_block: { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} } },
    { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: '{"city": "Pa' } },
    { type: 'content_block_delta', index: 2, delta: { type: 'input_json_delta', partial_json: 'ris", "days": [1, 2]}' } },
    { type: 'content_block_stop', index: 2 },
    { type: 'content_block_start', index: 3, content_block: { type: 'tool_use', id: 'toolu_2', name: 'now', input: {} } },
    { type: 'content_block_stop', index: 3 },
    { type: 'message_delta', delta: { stop_reason: 'tool_use', stop_sequence: null }, usage: { output_tokens: 9 } },
    { type: 'message_stop' },
  ];

  it('text, thinking with its signature, and tool_use blocks with their input parsed from the JSON deltas', () => {
    const m = meter(events);
    expect(m.message()).toEqual({
      ...message,
      stop_reason: 'tool_use',
      content: [
        { type: 'thinking', thinking: 'Let me think.', signature: 'sig' },
        { type: 'text', text: 'Hello world' },
        { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris', days: [1, 2] } },
        { type: 'tool_use', id: 'toolu_2', name: 'now', input: {} },
      ],
    });
    expect(m.tokens(0, 100).output_tokens).toBe(9);
  });

  it('the same message whatever the chunking: split at every byte of the stream', () => {
    const bytes = sse(events);
    const whole = meter(events).message();
    for (let cut = 1; cut < bytes.length; cut += 7) {
      const m = new MessageAccumulator();
      m.push(bytes.subarray(0, cut));
      m.push(bytes.subarray(cut));
      m.end();
      expect(m.message()).toEqual(whole);
    }
  });

  it('hands every decoded event to listeners, in order, once', () => {
    const seen: string[] = [];
    const m = new MessageAccumulator().onEvent((e) => seen.push(e.type));
    m.push(sse(events));
    m.end();
    expect(seen).toEqual(events.map((e) => e.type));
  });

  it('a stream cut inside a tool input keeps the block as started and names no stop reason; an error event is kept', () => {
    const m = meter([...events.slice(0, 12), { type: 'error', error: { type: 'overloaded_error', message: 'Overloaded' } }]);
    const out = m.message()!;
    expect(out.stop_reason).toBeNull();
    expect(out.content[2]).toEqual({ type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: {} });
    expect(m.error).toEqual({ type: 'overloaded_error', message: 'Overloaded' });
  });

  it('no message before message_start', () => {
    expect(meter(deltas).message()).toBeUndefined();
  });
});
