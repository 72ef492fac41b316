import { describe, expect, it } from 'vitest';
import { StreamMeter } from '../../lambdas/proxy/stream-meter.ts';

/** The stream meter reads usage as Anthropic sends it, and distrusts only what is really implausible. */
const sse = (events: object[]) => new TextEncoder().encode(events.map((e) => `event: ${(e as { type: string }).type}\ndata: ${JSON.stringify(e)}\n\n`).join(''));

function meter(events: object[]): StreamMeter {
  const m = new StreamMeter();
  m.push(sse(events));
  m.end();
  return m;
}

const start = { type: 'message_start', message: { usage: { input_tokens: 40, output_tokens: 1, cache_read_input_tokens: 5, cache_creation_input_tokens: 0 } } };
const deltas = [1, 2, 3].map((i) => ({ type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: `w${i} ` } }));

describe('StreamMeter', () => {
  it('a final usage that gives the counts it does not repeat as null is trusted, and the earlier figures kept', () => {
    const m = meter([
      start,
      ...deltas,
      { type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { input_tokens: null, output_tokens: 7, cache_read_input_tokens: null, server_tool_use: null } },
      { type: 'message_stop' },
    ]);
    expect(m.usageUntrusted).toBe(false);
    expect(m.tokens(999, 100)).toEqual({ input_tokens: 40, output_tokens: 7, cache_read_input_tokens: 5, cache_creation_input_tokens: 0, web_search_requests: 0 });
  });

  it('an implausible figure makes the whole usage object untrusted; the charge falls back to what was produced', () => {
    const m = meter([start, ...deltas, { type: 'message_delta', usage: { output_tokens: 1e301 } }, { type: 'message_stop' }]);
    expect(m.usageUntrusted).toBe(true);
    expect(m.tokens(999, 100).output_tokens).toBe(3);
  });
});
