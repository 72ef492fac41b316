import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { decodeSegment, normalizePath } from '../../lambdas/http/path.ts';
import { FUZZ_SEED, runs } from '../support/fuzz.ts';
import { refusalOf } from './refusal.ts';

/**
 * The one path normalisation (routing and the local runtime's choice of app) and the percent-decoding of a route
 * parameter. Seeded like test/fuzz (FUZZ_SEED, FUZZ_RUNS).
 */

describe('normalizePath', () => {
  it.each([
    ['', '/'],
    ['/', '/'],
    ['v1/messages', '/v1/messages'],
    ['/v1/messages', '/v1/messages'],
    ['//v1/messages', '/v1/messages'],
    ['///v1////messages', '/v1/messages'],
    ['/v1/messages//', '/v1/messages/'],
    ['/v1/messages/', '/v1/messages/'], // a trailing slash is kept: the router accepts it
    ['/V1/messages', '/v1/messages'],
    ['/V1', '/v1'],
    ['/V1/', '/v1/'],
    ['//V1//messages', '/v1/messages'],
    ['/V1/MESSAGES', '/v1/MESSAGES'], // only the version prefix loses its case
    ['/v1/models/Claude-X', '/v1/models/Claude-X'],
    ['/V10/x', '/V10/x'], // not the v1 prefix
    ['/V1abc', '/V1abc'],
    ['/x/V1/y', '/x/V1/y'],
    ['/USAGE', '/USAGE'],
    ['/v1/./models/../x', '/v1/./models/../x'], // dot segments are the URL parser's business, not this one's
    ['/v1/a%2F%2Fb', '/v1/a%2F%2Fb'], // encoded slashes are not slashes
    ['/v1\\messages', '/v1\\messages'],
  ])('%j → %j', (raw, normalised) => {
    expect(normalizePath(raw)).toBe(normalised);
  });

  it('is idempotent, always absolute, never has a repeated slash, and keeps everything after /v1 as it was', () => {
    const segment = fc.oneof(fc.constantFrom('v1', 'V1', 'usage', 'messages', 'models', ''), fc.string({ maxLength: 6 }));
    const rawPath = fc.array(segment, { maxLength: 6 }).map((parts) => parts.join('/'));
    fc.assert(
      fc.property(rawPath, (raw) => {
        const once = normalizePath(raw);
        expect(normalizePath(once)).toBe(once);
        expect(once.startsWith('/')).toBe(true);
        expect(once).not.toMatch(/\/\//);
        // Apart from the prefix's case, the same characters in the same order (slashes collapsed).
        const collapsed = `/${raw}`.replace(/\/{2,}/g, '/');
        expect(once.toLowerCase()).toBe(collapsed.toLowerCase());
        expect(once.slice(3)).toBe(collapsed.slice(3));
      }),
      { seed: FUZZ_SEED, numRuns: runs(500) },
    );
  });
});

describe('decodeSegment', () => {
  it.each([
    ['abc', 'abc'],
    ['claude-sonnet-4-6', 'claude-sonnet-4-6'],
    ['a%20b', 'a b'],
    ['%41%42', 'AB'],
    ['%e2%9c%93', '✓'], // lower-case hex
    ['%E7%94%A8%E6%88%B7', '用户'],
    ['%F0%9F%99%82', '🙂'],
    ['a%2Fb', 'a/b'],
    ['%25', '%'],
    ['%2525', '%25'], // decoded once, not twice
    ['a+b', 'a+b'], // not form decoding
    ['', ''],
  ])('%j → %j', (segment, decoded) => {
    expect(decodeSegment(segment)).toBe(decoded);
  });

  it.each([
    ['%'],
    ['%F'],
    ['abc%'],
    ['%G0'],
    ['%FF'],
    ['%E2%9C'], // a multi-byte character cut short
    ['%C0%AF'], // overlong encoding of "/"
    ['%ED%A0%80'], // a UTF-16 surrogate encoded as UTF-8
    ['%80'], // a lone continuation byte
  ])('%j → 400 invalid_request naming the segment', (segment) => {
    expect(refusalOf(() => decodeSegment(segment))).toEqual({
      status: 400,
      kind: 'invalid_request',
      message: `The path segment "${segment}" is not valid percent-encoded UTF-8`,
    });
  });

  it('quotes at most 64 characters of a long malformed segment', () => {
    const segment = `%FF${'x'.repeat(500)}`;
    const { message } = refusalOf(() => decodeSegment(segment));
    expect(message).toBe(`The path segment "${segment.slice(0, 64)}" is not valid percent-encoded UTF-8`);
  });

  it('inverts encodeURIComponent for any well-formed text', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), (text) => {
        expect(decodeSegment(encodeURIComponent(text))).toBe(text);
      }),
      { seed: FUZZ_SEED, numRuns: runs(500) },
    );
  });
});
