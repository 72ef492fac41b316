import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { normalize, OriginPattern, originList, originMatches } from '../../lambdas/origins/pattern.ts';

describe('origin patterns (lambdas/origins/pattern.ts)', () => {
  it('are written in the canonical form browsers send', () => {
    expect(normalize('HTTPS://App.Example.COM')).toBe('https://app.example.com');
    expect(normalize('https://app.example.com:443')).toBe('https://app.example.com');
    expect(normalize('http://localhost:80/')).toBe('http://localhost');
    expect(normalize('http://localhost:5173')).toBe('http://localhost:5173');
    expect(normalize('https://*.Example.com')).toBe('https://*.example.com');
    expect(normalize('http://127.0.0.1:*')).toBe('http://127.0.0.1:*');
    expect(normalize('http://[::1]:8080')).toBe('http://[::1]:8080');
    expect(normalize('capacitor://localhost')).toBe('capacitor://localhost');
    expect(normalize('null')).toBe('null');
  });

  it('refuse what is not an origin: paths, user info, queries, bare hosts, wildcards elsewhere, bad ports', () => {
    for (const bad of [
      'app.example.com',
      'https://app.example.com/path',
      'https://user@app.example.com',
      'https://app.example.com?x=1',
      'https://app.*.com',
      '*.example.com',
      'https://app.example.com:99999',
      'https://',
      '*',
      '',
      `https://${'a'.repeat(300)}.com`,
    ]) {
      expect(normalize(bad), bad).toBeUndefined();
    }
    expect(OriginPattern.safeParse('https://a.com/x').error?.issues[0]?.message).toBe(
      '"https://a.com/x" is not an origin: write scheme://host[:port] (e.g. https://app.example.com), optionally *. before the host or :* as the port, or null',
    );
    expect(originList(2).safeParse(['https://a.com', 'https://b.com', 'https://c.com']).error?.issues[0]?.message).toBe('at most 2 origins');
    expect(originList(5).parse(['https://A.com', 'https://a.com:443', 'https://b.com'])).toEqual(['https://a.com', 'https://b.com']);
  });

  it('match exactly, or any subdomain at any depth with *., or any port with :*', () => {
    const patterns = ['https://app.example.com', 'https://*.corp.example', 'http://localhost:*', 'null'];
    const cases: [string, boolean][] = [
      ['https://app.example.com', true],
      ['https://app.example.com:443', true],
      ['http://app.example.com', false],
      ['https://app.example.com:8443', false],
      ['https://evil-app.example.com', false],
      ['https://app.example.com.evil.com', false],
      ['https://a.corp.example', true],
      ['https://a.b.corp.example', true],
      ['https://corp.example', false],
      ['https://xcorp.example', false],
      ['http://localhost:5173', true],
      ['http://localhost', true],
      ['https://localhost:5173', false],
      ['null', true],
      ['not an origin', false],
      ['https://*.corp.example', false],
    ];
    for (const [origin, expected] of cases) expect(originMatches(origin, patterns), origin).toBe(expected);
    expect(originMatches('null', ['https://app.example.com'])).toBe(false);
  });

  it('an origin always matches itself, and its canonical form is stable (property)', () => {
    const origin = fc
      .tuple(fc.constantFrom('http', 'https', 'capacitor'), fc.domain(), fc.option(fc.integer({ min: 1, max: 65_535 }), { nil: undefined }))
      .map(([scheme, host, port]) => `${scheme}://${host}${port === undefined ? '' : `:${port}`}`);
    fc.assert(
      fc.property(origin, (o) => {
        const canonical = normalize(o);
        expect(canonical).toBeDefined();
        expect(normalize(canonical!)).toBe(canonical);
        expect(originMatches(o, [o])).toBe(true);
        expect(originMatches(canonical!, [o])).toBe(true);
        // A subdomain pattern never matches the host itself, and matches every subdomain of it.
        const [scheme, rest] = canonical!.split('://') as [string, string];
        expect(originMatches(canonical!, [`${scheme}://*.${rest}`])).toBe(false);
        expect(originMatches(`${scheme}://x.${rest}`, [`${scheme}://*.${rest}`])).toBe(true);
      }),
      { numRuns: 300 },
    );
  });
});
