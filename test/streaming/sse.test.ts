import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { encodeSse, SseDecoder, type SseEvent } from '../../lambdas/streaming/sse.ts';
import { FUZZ_SEED, runs } from '../support/fuzz.ts';

/**
 * SseDecoder framing (the upstream SSE every provider stream is read through) and encodeSse (what the gateway
 * writes). Chunks may split anywhere, even inside a UTF-8 character. The properties are seeded like test/fuzz
 * (FUZZ_SEED, FUZZ_RUNS).
 */

const enc = new TextEncoder();
const bytes = (text: string) => enc.encode(text);

/** Feeds the chunks one by one, then ends the input; every event in order. */
function decode(chunks: Uint8Array[]): SseEvent[] {
  const decoder = new SseDecoder();
  const events = chunks.flatMap((chunk) => decoder.push(chunk));
  return [...events, ...decoder.end()];
}

const decodeText = (text: string) => decode([bytes(text)]);

/** The bytes cut at the given offsets (any order, repeats and out-of-range ones ignored). */
function splitAt(all: Uint8Array, offsets: number[]): Uint8Array[] {
  const cuts = [...new Set(offsets.filter((o) => o > 0 && o < all.length))].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let start = 0;
  for (const cut of [...cuts, all.length]) {
    chunks.push(all.subarray(start, cut));
    start = cut;
  }
  return chunks;
}

const ev = (event: string | undefined, data: string): SseEvent => ({ event, data });

describe('SseDecoder: fields', () => {
  it('an event with a type and one data line', () => {
    expect(decodeText('event: message_start\ndata: {"type":"message_start"}\n\n')).toEqual([ev('message_start', '{"type":"message_start"}')]);
  });

  it('a data-only event (OpenAI) has no type', () => {
    expect(decodeText('data: {"id":"c1"}\n\ndata: [DONE]\n\n')).toEqual([ev(undefined, '{"id":"c1"}'), ev(undefined, '[DONE]')]);
  });

  it('several data lines are joined with \\n', () => {
    expect(decodeText('event: e\ndata: one\ndata: two\ndata:\ndata: four\n\n')).toEqual([ev('e', 'one\ntwo\n\nfour')]);
  });

  it('one space after the colon is dropped, no more; no space is fine; a colon-less line is a field with an empty value', () => {
    expect(decodeText('data:  two spaces\n\n')).toEqual([ev(undefined, ' two spaces')]);
    expect(decodeText('data:tight\n\n')).toEqual([ev(undefined, 'tight')]);
    expect(decodeText('data: a: b: c\n\n')).toEqual([ev(undefined, 'a: b: c')]);
    expect(decodeText('data\n\n')).toEqual([ev(undefined, '')]);
    expect(decodeText('event\ndata: x\n\n')).toEqual([ev('', 'x')]);
  });

  it('the last event: line of a block wins', () => {
    expect(decodeText('event: a\nevent: b\ndata: x\n\n')).toEqual([ev('b', 'x')]);
  });

  it('comments (":" lines) are ignored, alone or inside an event', () => {
    expect(decodeText(': ping\n\n')).toEqual([]);
    expect(decodeText(':\n\n')).toEqual([]);
    expect(decodeText(': keep-alive\nevent: e\n: between\ndata: x\n: after\n\n')).toEqual([ev('e', 'x')]);
  });

  it('fields other than event and data (id, retry, unknown) are ignored; field names are case-sensitive', () => {
    expect(decodeText('id: 7\nretry: 1000\nfoo: bar\nDATA: no\nEvent: no\ndata: yes\n\n')).toEqual([ev(undefined, 'yes')]);
    expect(decodeText('id: 7\nretry: 1000\n\n')).toEqual([]);
  });

  it('an event: line without data is still an event with empty data (as implemented; the SSE standard would drop it)', () => {
    expect(decodeText('event: ping\n\n')).toEqual([ev('ping', '')]);
  });

  it('extra blank lines between events produce nothing', () => {
    expect(decodeText('\n\n\ndata: a\n\n\n\n\ndata: b\n\n\n')).toEqual([ev(undefined, 'a'), ev(undefined, 'b')]);
  });

  it('push returns exactly the events the chunk completed', () => {
    const decoder = new SseDecoder();
    expect(decoder.push(bytes('event: a\ndata: 1\n\nevent: b\nda'))).toEqual([ev('a', '1')]);
    expect(decoder.push(bytes('ta: 2\n'))).toEqual([]);
    expect(decoder.push(bytes('\n'))).toEqual([ev('b', '2')]);
    expect(decoder.push(new Uint8Array(0))).toEqual([]);
    expect(decoder.end()).toEqual([]);
  });
});

describe('SseDecoder: line endings', () => {
  it.each([
    ['LF', '\n'],
    ['CR', '\r'],
    ['CRLF', '\r\n'],
  ])('%s', (_, eol) => {
    const text = ['event: a', 'data: 1', 'data: 2', '', ': c', 'data: 3', '', ''].join(eol);
    expect(decodeText(text)).toEqual([ev('a', '1\n2'), ev(undefined, '3')]);
  });

  it('mixed within one stream', () => {
    expect(decodeText('event: a\r\ndata: 1\rdata: 2\n\r\ndata: 3\r\rdata: 4\n\n')).toEqual([ev('a', '1\n2'), ev(undefined, '3'), ev(undefined, '4')]);
  });

  it('CRLF split anywhere but between its CR and LF', () => {
    const text = 'event: a\r\ndata: 1\r\ndata: 2\r\n\r\ndata: 3\r\n\r\n';
    const all = bytes(text);
    for (let i = 1; i < all.length; i++) {
      if (all[i - 1] === 0x0d && all[i] === 0x0a) continue;
      expect(decode(splitAt(all, [i])), `split at ${i}`).toEqual([ev('a', '1\n2'), ev(undefined, '3')]);
    }
  });

  // A CRLF split between chunks (CR ending one, LF starting the next) is one line ending, not a blank line.
  it('CRLF split between its CR and LF is still one line ending', () => {
    expect(decode([bytes('event: a\r'), bytes('\ndata: 1\r\n\r\n')])).toEqual([ev('a', '1')]);
    expect(decode([bytes('data: 1\r'), bytes('\ndata: 2\r\n\r\n')])).toEqual([ev(undefined, '1\n2')]);
  });
});

describe('SseDecoder: end()', () => {
  it('flushes a final event not followed by a blank line', () => {
    const decoder = new SseDecoder();
    expect(decoder.push(bytes('event: a\ndata: 1\n\nevent: b\ndata: 2'))).toEqual([ev('a', '1')]);
    expect(decoder.end()).toEqual([ev('b', '2')]);
  });

  it('flushes a final event followed by a single line ending, of any kind', () => {
    expect(decodeText('data: x\n')).toEqual([ev(undefined, 'x')]);
    expect(decodeText('data: x\r')).toEqual([ev(undefined, 'x')]);
    expect(decodeText('data: x\r\n')).toEqual([ev(undefined, 'x')]);
  });

  it('has nothing to flush after complete events, blank lines, whitespace or a comment', () => {
    expect(decodeText('data: x\n\n')).toEqual([ev(undefined, 'x')]);
    expect(decodeText('')).toEqual([]);
    expect(decodeText('\n\n\n')).toEqual([]);
    expect(decodeText('  \n ')).toEqual([]);
    expect(decodeText(': trailing comment')).toEqual([]);
  });

  it('a second end() finds nothing more', () => {
    const decoder = new SseDecoder();
    decoder.push(bytes('data: x'));
    expect(decoder.end()).toEqual([ev(undefined, 'x')]);
    expect(decoder.end()).toEqual([]);
  });
});

describe('SseDecoder: UTF-8 split across chunks', () => {
  it.each([
    ['é (2 bytes)', 'é'],
    ['✓ (3 bytes)', '✓'],
    ['🙂 (4 bytes)', '🙂'],
    ['a ZWJ sequence', '👩‍💻'],
  ])('%s, cut at every byte', (_, char) => {
    const all = bytes(`event: t${char}\ndata: {"text":"${char}${char}"}\n\n`);
    for (let i = 1; i < all.length; i++) {
      expect(decode(splitAt(all, [i])), `split at ${i}`).toEqual([ev(`t${char}`, `{"text":"${char}${char}"}`)]);
    }
  });

  it('byte by byte', () => {
    const text = 'event: content_block_delta\ndata: {"delta":{"text":"用户 🙂 café"}}\n\n';
    const all = bytes(text);
    expect(decode(Array.from(all, (b) => Uint8Array.of(b)))).toEqual([ev('content_block_delta', '{"delta":{"text":"用户 🙂 café"}}')]);
  });

  it('a character cut off by the end of input becomes U+FFFD, not an exception', () => {
    const all = bytes('data: 🙂');
    expect(decode([all.subarray(0, all.length - 1)])).toEqual([ev(undefined, '\ufffd')]);
  });
});

/** An Anthropic-like stream: types, multi-byte text, comments, a multi-line data field, CR-free LF framing. */
const SAMPLE = [
  ': stream opened',
  'event: message_start',
  'data: {"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":1}}}',
  '',
  'event: ping',
  'data: {"type": "ping"}',
  '',
  'event: content_block_delta',
  ': keep-alive inside an event',
  'data: {"type":"content_block_delta","delta":{"text":"Héllo, 世界 🙂"}}',
  '',
  'data: first line',
  'data: second line',
  '',
  'event: message_stop',
  'data: {"type":"message_stop"}',
  '',
  '',
].join('\n');
const SAMPLE_EVENTS = [
  ev('message_start', '{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":12,"output_tokens":1}}}'),
  ev('ping', '{"type": "ping"}'),
  ev('content_block_delta', '{"type":"content_block_delta","delta":{"text":"Héllo, 世界 🙂"}}'),
  ev(undefined, 'first line\nsecond line'),
  ev('message_stop', '{"type":"message_stop"}'),
];

describe('SseDecoder: chunk boundaries', () => {
  it('whole, the sample decodes to its events', () => {
    expect(decodeText(SAMPLE)).toEqual(SAMPLE_EVENTS);
  });

  it('cut in two at every byte offset, the same events', () => {
    const all = bytes(SAMPLE);
    for (let i = 1; i < all.length; i++) expect(decode(splitAt(all, [i])), `split at ${i}`).toEqual(SAMPLE_EVENTS);
  });

  it('cut in three at every pair of offsets around each event boundary and multi-byte character', () => {
    const all = bytes(SAMPLE);
    // Offsets near the interesting places: blank lines and the first byte of each multi-byte character.
    const near = new Set<number>();
    all.forEach((b, i) => {
      if (b === 0x0a || b >= 0xc0) for (let d = -2; d <= 2; d++) near.add(i + d);
    });
    const offsets = [...near].filter((o) => o > 0 && o < all.length);
    for (const i of offsets) for (const j of offsets) if (i < j) expect(decode(splitAt(all, [i, j])), `split at ${i}, ${j}`).toEqual(SAMPLE_EVENTS);
  });

  it('byte by byte, the same events', () => {
    expect(decode(Array.from(bytes(SAMPLE), (b) => Uint8Array.of(b)))).toEqual(SAMPLE_EVENTS);
  });
});

/** Text that can stand on one SSE line: anything but CR and LF (U+2028, U+0085, NUL… are ordinary characters). */
const lineText = fc.string({ unit: 'grapheme', maxLength: 24 }).filter((s) => !/[\r\n]/.test(s));
const streamEvent = fc.record({
  event: fc.option(lineText, { nil: undefined }),
  data: fc.array(lineText, { minLength: 1, maxLength: 4 }),
  comment: fc.option(lineText, { nil: undefined }),
});

/** The events as SSE text; `unterminated` line endings (0, 1 or 2) are left off the end, for end() to flush. */
function frame(events: Array<{ event?: string; data: string[]; comment?: string }>, eol: string, unterminated: number): string {
  const blocks = events.map((e) => [
    ...(e.comment === undefined ? [] : [`:${e.comment}`]),
    ...(e.event === undefined ? [] : [`event: ${e.event}`]),
    ...e.data.map((d) => `data: ${d}`),
  ]);
  const text = blocks.map((lines) => lines.join(eol) + eol + eol).join('');
  return text.slice(0, text.length - unterminated * eol.length);
}

describe('SseDecoder: properties', () => {
  it.each([
    ['LF', '\n'],
    ['CR', '\r'],
  ])('any events framed with %s, cut anywhere, decode to themselves', (_, eol) => {
    fc.assert(
      fc.property(
        fc.array(streamEvent, { minLength: 1, maxLength: 6 }),
        fc.constantFrom(0, 1, 2),
        fc.array(fc.nat({ max: 2_000 }), { maxLength: 12 }),
        (events, unterminated, cuts) => {
          const all = bytes(frame(events, eol, unterminated));
          const expected = events.map((e) => ev(e.event, e.data.join('\n')));
          expect(decode(splitAt(all, cuts))).toEqual(expected);
        },
      ),
      { seed: FUZZ_SEED, numRuns: runs(300) },
    );
  });

  it('any events framed with CRLF, cut anywhere except between CR and LF, decode to themselves', () => {
    fc.assert(
      fc.property(
        fc.array(streamEvent, { minLength: 1, maxLength: 6 }),
        fc.constantFrom(0, 1, 2),
        fc.array(fc.nat({ max: 2_000 }), { maxLength: 12 }),
        (events, unterminated, cuts) => {
          const all = bytes(frame(events, '\r\n', unterminated));
          const safe = cuts.filter((c) => !(all[c - 1] === 0x0d && all[c] === 0x0a));
          expect(decode(splitAt(all, safe))).toEqual(events.map((e) => ev(e.event, e.data.join('\n'))));
        },
      ),
      { seed: FUZZ_SEED, numRuns: runs(300) },
    );
  });
});

describe('encodeSse', () => {
  it('writes `event: <type>\\ndata: <json>\\n\\n`', () => {
    expect(new TextDecoder().decode(encodeSse('message_stop', { type: 'message_stop' }))).toBe('event: message_stop\ndata: {"type":"message_stop"}\n\n');
  });

  it('newlines inside the data stay escaped in the JSON, so one data line carries any value', () => {
    const value = { text: 'line 1\nline 2\r\n\u2028end' };
    const out = new TextDecoder().decode(encodeSse('content_block_delta', value));
    expect(out.split('\n')).toHaveLength(4); // event, data, blank, ''
    expect(decode([encodeSse('content_block_delta', value)])).toEqual([ev('content_block_delta', JSON.stringify(value))]);
  });

  it('round-trips through the decoder: any JSON value and type, many events in one stream, cut anywhere', () => {
    const eventName = fc.string({ unit: 'grapheme', maxLength: 20 }).filter((s) => !/[\r\n]/.test(s));
    fc.assert(
      fc.property(
        fc.array(fc.tuple(eventName, fc.jsonValue({ stringUnit: 'grapheme', maxDepth: 3 })), { minLength: 1, maxLength: 5 }),
        fc.array(fc.nat({ max: 4_000 }), { maxLength: 10 }),
        (events, cuts) => {
          const parts = events.map(([name, value]) => encodeSse(name, value));
          const all = new Uint8Array(Buffer.concat(parts));
          const decoded = decode(splitAt(all, cuts));
          expect(decoded.map((e) => e.event)).toEqual(events.map(([name]) => name));
          expect(decoded.map((e) => JSON.parse(e.data) as unknown)).toEqual(events.map(([, value]) => JSON.parse(JSON.stringify(value)) as unknown));
        },
      ),
      { seed: FUZZ_SEED, numRuns: runs(300) },
    );
  });
});
