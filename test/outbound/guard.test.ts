import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { checkUrl, isForbiddenAddress, OutboundRefused } from '../../lambdas/outbound/guard.ts';

/**
 * The outbound guard without a network: which URLs checkUrl refuses before any connection, and which addresses
 * isForbiddenAddress refuses (the predicate the connect-time lookup applies too), at the edges of every range.
 */

function refusal(fn: () => unknown): OutboundRefused {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(OutboundRefused);
    return err as OutboundRefused;
  }
  throw new Error('expected an OutboundRefused');
}

beforeEach(() => {
  delete process.env.ALLOW_LOOPBACK_URLS;
  resetInstanceState();
});
afterEach(() => {
  delete process.env.ALLOW_LOOPBACK_URLS;
  resetInstanceState();
});

describe('checkUrl', () => {
  it('accepts http and https URLs with a public address or a name', () => {
    expect(checkUrl('https://example.com/a?b=c').href).toBe('https://example.com/a?b=c');
    expect(checkUrl(new URL('http://93.184.215.14:8080/')).port).toBe('8080');
    expect(checkUrl('http://[2606:4700::1111]/').hostname).toBe('[2606:4700::1111]');
    // Names pass here; their addresses are checked when the connection is made.
    expect(checkUrl('http://localhost:3000/').hostname).toBe('localhost');
  });

  it.each([
    'file:///etc/passwd',
    'ftp://example.com/x',
    'data:text/plain,hi',
    'ws://example.com/',
    'wss://example.com/',
    'gopher://example.com/',
    'javascript:alert(1)',
  ])('refuses the scheme of %s', (url) => {
    expect(refusal(() => checkUrl(url)).reason).toBe('scheme');
  });

  it.each(['http://user:pw@example.com/', 'https://user@example.com/', 'http://:pw@example.com/'])('refuses credentials in %s', (url) => {
    expect(refusal(() => checkUrl(url)).reason).toBe('credentials');
  });

  it.each(['not a url', '/relative/path', 'http://', 'http://[::1/'])('refuses the invalid URL %j', (url) => {
    expect(refusal(() => checkUrl(url)).reason).toBe('invalid_url');
  });

  it.each([
    'http://127.0.0.1/',
    'http://127.0.0.1:8080/x',
    'http://[::1]/',
    'http://[::ffff:127.0.0.1]/',
    'http://[::ffff:7f00:1]/',
    'http://169.254.169.254/latest/meta-data/',
    'http://10.0.0.1/',
    'http://100.64.0.1/',
    'http://172.16.5.4/',
    'http://192.168.1.1/',
    'http://0.0.0.0/',
    'http://[::]/',
    'http://[fe80::1]/',
    'http://[fc00::1]/',
    'http://[64:ff9b::a00:1]/',
    'http://[2002:a00:1::]/',
    'http://[::10.0.0.1]/',
    // The WHATWG parser turns decimal, octal, hex and short IPv4 forms into dotted quads before the check.
    'http://2130706433/',
    'http://0177.0.0.1/',
    'http://0x7f.1/',
    'http://0x7f000001/',
    'http://127.1/',
    'http://127.0.0.1./',
    'http://0/',
    'https://[::ffff:a9fe:a9fe]/',
  ])('refuses the literal address in %s', (url) => {
    expect(refusal(() => checkUrl(url)).reason).toBe('address');
  });

  it('lets loopback literals through with ALLOW_LOOPBACK_URLS=1, and nothing else', () => {
    process.env.ALLOW_LOOPBACK_URLS = '1';
    resetInstanceState();
    for (const url of ['http://127.0.0.1:9/', 'http://127.1/', 'http://2130706433/', 'http://[::1]/', 'http://[::ffff:127.0.0.1]/']) {
      expect(checkUrl(url).protocol).toBe('http:');
    }
    for (const url of [
      'http://10.0.0.1/',
      'http://169.254.169.254/',
      'http://192.168.1.1/',
      'http://0.0.0.0/',
      'http://[fe80::1]/',
      'http://[64:ff9b::7f00:1]/',
    ]) {
      expect(refusal(() => checkUrl(url)).reason).toBe('address');
    }
  });

  it('reads the allowance only after resetInstanceState', () => {
    process.env.ALLOW_LOOPBACK_URLS = '1';
    resetInstanceState();
    expect(checkUrl('http://127.0.0.1/').hostname).toBe('127.0.0.1');
    process.env.ALLOW_LOOPBACK_URLS = '0';
    resetInstanceState();
    expect(refusal(() => checkUrl('http://127.0.0.1/')).reason).toBe('address');
    process.env.ALLOW_LOOPBACK_URLS = 'true'; // only `1` allows
    resetInstanceState();
    expect(refusal(() => checkUrl('http://127.0.0.1/')).reason).toBe('address');
  });
});

describe('isForbiddenAddress', () => {
  const forbidden = (ip: string) => expect(isForbiddenAddress(ip), ip).toBe(true);
  const allowed = (ip: string) => expect(isForbiddenAddress(ip), ip).toBe(false);

  it('refuses every IPv4 range, at both ends, and allows its neighbours', () => {
    const ranges: Array<[first: string, last: string, before: string | null, after: string | null]> = [
      ['0.0.0.0', '0.255.255.255', null, '1.0.0.0'],
      ['10.0.0.0', '10.255.255.255', '9.255.255.255', '11.0.0.0'],
      ['100.64.0.0', '100.127.255.255', '100.63.255.255', '100.128.0.0'],
      ['127.0.0.0', '127.255.255.255', '126.255.255.255', '128.0.0.0'],
      ['169.254.0.0', '169.254.255.255', '169.253.255.255', '169.255.0.0'],
      ['172.16.0.0', '172.31.255.255', '172.15.255.255', '172.32.0.0'],
      ['192.0.0.0', '192.0.0.255', '191.255.255.255', '192.0.1.0'],
      ['192.0.2.0', '192.0.2.255', '192.0.1.255', '192.0.3.0'],
      ['192.88.99.0', '192.88.99.255', '192.88.98.255', '192.88.100.0'],
      ['192.168.0.0', '192.168.255.255', '192.167.255.255', '192.169.0.0'],
      ['198.18.0.0', '198.19.255.255', '198.17.255.255', '198.20.0.0'],
      ['198.51.100.0', '198.51.100.255', '198.51.99.255', '198.51.101.0'],
      ['203.0.113.0', '203.0.113.255', '203.0.112.255', '203.0.114.0'],
      ['224.0.0.0', '239.255.255.255', '223.255.255.255', null],
      ['240.0.0.0', '255.255.255.255', null, null],
    ];
    for (const [first, last, before, after] of ranges) {
      forbidden(first);
      forbidden(last);
      if (before) allowed(before);
      if (after) allowed(after);
    }
    forbidden('169.254.169.254');
    allowed('8.8.8.8');
    allowed('1.1.1.1');
  });

  it('refuses the IPv6 ranges and allows global unicast', () => {
    const refused = ['::', '::1', 'fc00::1', 'fdff:ffff::1', 'fe80::1', 'febf:ffff::1', 'fe80::1%eth0', 'ff02::1', 'ff00::'];
    refused.push('2001:db8::1', '2001:db8:ffff::1', 'fec0::1', '2001::1', '2001:2::1', '3fff::1', '100::1', '64:ff9b:1::1');
    for (const ip of refused) forbidden(ip);
    // Outside global unicast (2000::/3): reserved or special, never a server.
    for (const ip of ['ff::1', '1fff:ffff::1', '4000::1', 'fbff:ffff::1', 'fe7f::1']) forbidden(ip);
    for (const ip of ['2606:4700:4700::1111', '2a00:1450:4001::200e', '2000::1', '3ffe::1', '2001:db9::1', '2001:db7::1', '2001:1::1']) {
      allowed(ip);
    }
  });

  it('checks the IPv4 address embedded in mapped, compatible, translated, NAT64 and 6to4 forms', () => {
    // IPv4-mapped, in both spellings.
    forbidden('::ffff:127.0.0.1');
    forbidden('::ffff:7f00:1');
    forbidden('::ffff:a9fe:a9fe');
    forbidden('::ffff:10.0.0.1');
    allowed('::ffff:8.8.8.8');
    // IPv4-compatible (deprecated).
    forbidden('::7f00:1');
    forbidden('::a00:1');
    allowed('::808:808');
    // IPv4-translated (SIIT).
    forbidden('::ffff:0:a00:1');
    allowed('::ffff:0:808:808');
    // NAT64 well-known prefix.
    forbidden('64:ff9b::a00:1');
    forbidden('64:ff9b::7f00:1');
    forbidden('64:ff9b::169.254.169.254');
    allowed('64:ff9b::808:808');
    // 6to4.
    forbidden('2002:a00:1::1');
    forbidden('2002:c0a8:101::');
    forbidden('2002:7f00:1::');
    allowed('2002:808:808::1');
  });

  it('refuses anything that is not an address', () => {
    for (const s of ['', 'localhost', 'example.com', '::g', '1.2.3.4.5', '[::1']) forbidden(s);
  });

  it('tolerates brackets around IPv6', () => {
    forbidden('[::1]');
    allowed('[2606:4700:4700::1111]');
  });

  it('lets only loopback through with allowLoopback', () => {
    const opts = { allowLoopback: true };
    for (const ip of ['127.0.0.1', '127.255.255.254', '::1', '::ffff:127.0.0.1', '::ffff:7f00:1']) {
      expect(isForbiddenAddress(ip, opts), ip).toBe(false);
    }
    for (const ip of [
      '10.0.0.1',
      '169.254.169.254',
      '192.168.1.1',
      '0.0.0.0',
      '::',
      'fe80::1',
      'fc00::1',
      '64:ff9b::7f00:1',
      '2002:7f00:1::',
      '::7f00:1',
      '100.64.0.1',
    ]) {
      expect(isForbiddenAddress(ip, opts), ip).toBe(true);
    }
  });
});
