import { request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { startAnthropicUpstream } from '../../../bin/local/upstreams/anthropic.ts';
import { startOpenAIUpstream } from '../../../bin/local/upstreams/openai.ts';
import { REQUEST_HISTORY_LIMIT } from '../../../bin/local/upstreams/script.ts';
import type { RecordedRequest, SimulatedUpstream } from '../../../bin/local/upstreams/types.ts';

/**
 * The simulated upstreams keep a bounded history: the last REQUEST_HISTORY_LIMIT requests (what tests read:
 * `requests.at(-1)`, `requests[0]` after clearing, a filter over the recent ones) and the count of all of them. A
 * long `npm start` session or a soak run once grew by every body it had been sent (RSS 172 → 787 MB over 18,000
 * requests). Each test starts its own upstream, so a retried test counts from zero again.
 */

/** POSTs `body` on a connection of its own and reads the answer to its end. */
function post(up: SimulatedUpstream, path: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const headers = { 'content-type': 'application/json', 'x-api-key': 'k', authorization: 'Bearer k', 'content-length': Buffer.byteLength(body) };
    const req = request(`${up.url}${path}`, { method: 'POST', agent: false, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const BODY_BYTES = 100_000;
/** A request body of about `bytes` bytes that says its number. */
const bodyOf = (i: number, model: string, bytes: number) => {
  const text = `request ${i} [[words:1]] `;
  return JSON.stringify({ model, max_tokens: 10, messages: [{ role: 'user', content: text + 'x'.repeat(bytes - text.length) }] });
};
const numberOf = (r: RecordedRequest) => Number(/request (\d+) /.exec(JSON.stringify(r.body))?.[1]);
/** The bytes of the bodies the history holds. */
const retainedBytes = (up: SimulatedUpstream) => up.requests.reduce((sum, r) => sum + Buffer.byteLength(JSON.stringify(r.body ?? null)), 0);

/** Sends requests `from`..`to` (numbered in their bodies), eight at a time. */
async function send(up: SimulatedUpstream, path: string, model: string, from: number, to: number, bytes: number) {
  for (let i = from; i <= to; i += 8) {
    const batch = Array.from({ length: Math.min(8, to - i + 1) }, (_, k) => post(up, path, bodyOf(i + k, model, bytes)));
    expect(new Set(await Promise.all(batch))).toEqual(new Set([200]));
  }
}

async function withUpstream(start: () => Promise<SimulatedUpstream>, test: (up: SimulatedUpstream) => Promise<void>) {
  const up = await start();
  try {
    await test(up);
  } finally {
    await up.close();
  }
}

describe('the simulated upstreams keep the last REQUEST_HISTORY_LIMIT requests', () => {
  it('is a documented 1,000', () => {
    expect(REQUEST_HISTORY_LIMIT).toBe(1_000);
  });

  it('Anthropic: 2,000 requests of 100 KB leave the newest 1,000 in the history, their bytes bounded, and count all 2,000', async () => {
    await withUpstream(startAnthropicUpstream, async (up) => {
      const total = 2_000;
      await send(up, '/v1/messages', 'claude-sonnet-4-6', 1, total, BODY_BYTES);
      expect(up.requests).toHaveLength(REQUEST_HISTORY_LIMIT);
      expect(up.received).toBe(total);
      // The newest are kept, in arrival order (the eight of a batch arrive in any order among themselves).
      const kept = up.requests.map(numberOf).sort((a, b) => a - b);
      expect(kept[0]).toBeGreaterThan(total - REQUEST_HISTORY_LIMIT - 8);
      expect(kept.at(-1)).toBe(total);
      expect(numberOf(up.requests.at(-1)!)).toBeGreaterThan(total - 8);
      // What the history holds is bounded by its length, not by the requests ever received.
      expect(retainedBytes(up)).toBeGreaterThan(REQUEST_HISTORY_LIMIT * BODY_BYTES);
      expect(retainedBytes(up)).toBeLessThanOrEqual(REQUEST_HISTORY_LIMIT * (BODY_BYTES + 200));

      // Clearing works as before; the count of all requests goes on.
      up.requests.length = 0;
      await send(up, '/v1/messages', 'claude-sonnet-4-6', total + 1, total + 1, 1_000);
      expect(up.requests.map(numberOf)).toEqual([total + 1]);
      expect(up.received).toBe(total + 1);
    });
  }, 120_000);

  it('OpenAI (the same recorder): one request past the limit drops the oldest', async () => {
    await withUpstream(startOpenAIUpstream, async (up) => {
      // The first alone, so that it is the oldest.
      await send(up, '/v1/chat/completions', 'gpt-4o', 1, 1, 1_000);
      await send(up, '/v1/chat/completions', 'gpt-4o', 2, REQUEST_HISTORY_LIMIT + 1, 1_000);
      expect(up.requests).toHaveLength(REQUEST_HISTORY_LIMIT);
      expect(up.received).toBe(REQUEST_HISTORY_LIMIT + 1);
      expect(Math.min(...up.requests.map(numberOf))).toBe(2);
    });
  }, 60_000);
});
