import Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
let token: string;
beforeAll(async () => {
  gw = await startTestGateway();
  token = await gw.token();
});
afterAll(() => gw?.stop());

describe('streaming is not buffered', () => {
  it('keeps the upstream chunk timing: events sent 50 ms apart arrive apart, with event: lines intact', async () => {
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': token, 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: 50, stream: true, messages: [{ role: 'user', content: '[[words:6]] [[delay:50]]' }] }),
    });
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const reader = res.body!.getReader();
    const decoder = new TextDecoder();
    let text = '';
    const deltaTimes: number[] = [];
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const chunk = decoder.decode(value, { stream: true });
      text += chunk;
      for (const _ of chunk.matchAll(/event: content_block_delta/g)) deltaTimes.push(performance.now());
    }
    expect(deltaTimes).toHaveLength(6);
    const gaps = deltaTimes.slice(1).map((t, i) => t - deltaTimes[i]!);
    // Buffered output would deliver all deltas within a millisecond or two. On a loaded machine one late read can
    // join two deltas (its gap shrinks, the next grows), so the median gap is what must stay near the 50 ms the upstream
    // spaced them by, and the first delta must arrive long before the last.
    expect([...gaps].sort((a, b) => a - b)[2]).toBeGreaterThan(25);
    expect(deltaTimes.at(-1)! - deltaTimes[0]!).toBeGreaterThan(200);
    const names = [...text.matchAll(/^event: (\w+)$/gm)].map((m) => m[1]);
    expect(names).toEqual([
      'message_start',
      'ping',
      'content_block_start',
      ...Array(6).fill('content_block_delta'),
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
  });

  it('delivers SDK text events as they come, not at the end', async () => {
    const client = gw.client(token);
    const times: number[] = [];
    const started = performance.now();
    const stream = client.messages.stream({ model: 'claude-sonnet-4-6', max_tokens: 50, messages: [{ role: 'user', content: '[[words:5]] [[delay:60]]' }] });
    stream.on('text', () => times.push(performance.now() - started));
    const final = await stream.finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'word1 word2 word3 word4 word5' }]);
    expect(times).toHaveLength(5);
    expect(times.at(-1)! - times[0]!).toBeGreaterThan(180);
    expect(final).toBeInstanceOf(Object);
    expect(Anthropic).toBeDefined();
  });
});
