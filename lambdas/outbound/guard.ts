import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { env } from '../config/env.ts';

/**
 * Which URLs and addresses the gateway may call on a user's behalf (docs/contract.md, "Outbound safety"). This module
 * decides; `fetch.ts` applies the decision to the URL before the call and to every resolved address at connect time.
 *
 * Addresses are parsed by ipaddr.js (a maintained parser that understands IPv4-mapped, IPv4-compatible, NAT64 and 6to4
 * forms and zone ids), and matched against the CIDR lists below, never by string prefix.
 */

export type OutboundRefusalReason = 'scheme' | 'credentials' | 'address' | 'invalid_url';

/** The gateway will not call this URL or address. Raised before the call, or at connect time for a resolved name. */
export class OutboundRefused extends Error {
  override readonly name = 'OutboundRefused';
  constructor(
    readonly reason: OutboundRefusalReason,
    message: string,
  ) {
    super(message);
  }
}

export interface AddressPolicy {
  /** Let loopback through (127/8, ::1, ::ffff:127/104): `ALLOW_LOOPBACK_URLS=1`, tests and the local runtime only. */
  allowLoopback?: boolean;
}

type Cidr = [ipaddr.IPv4 | ipaddr.IPv6, number];
const cidrs = (list: string[]): Cidr[] => list.map((c) => ipaddr.parseCIDR(c));

const IPV4_LOOPBACK = cidrs(['127.0.0.0/8']);
/** Every IPv4 range the gateway refuses, loopback included (it is let through separately, when allowed). */
const IPV4_FORBIDDEN = cidrs([
  '0.0.0.0/8', // "this network"
  '10.0.0.0/8', // private
  '100.64.0.0/10', // carrier-grade NAT
  '127.0.0.0/8', // loopback
  '169.254.0.0/16', // link-local, including the instance metadata service 169.254.169.254
  '172.16.0.0/12', // private
  '192.0.0.0/24', // IETF protocol assignments
  '192.0.2.0/24', // TEST-NET-1
  '192.88.99.0/24', // 6to4 relay anycast
  '192.168.0.0/16', // private
  '198.18.0.0/15', // benchmarking
  '198.51.100.0/24', // TEST-NET-2
  '203.0.113.0/24', // TEST-NET-3
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, and 255.255.255.255 (broadcast) within it
]);

/**
 * IPv6: only global unicast (2000::/3) is reachable, less the ranges below; everything outside it (::/8 reserved,
 * fc00::/7 unique local, fe80::/10 link-local, fec0::/10 site-local, ff00::/8 multicast, 100::/64 discard…) is refused.
 * The forms that embed an IPv4 address are checked by that address first (`isForbiddenV6`).
 */
const IPV6_GLOBAL_UNICAST = ipaddr.parseCIDR('2000::/3');
const IPV6_FORBIDDEN = cidrs([
  '2001::/32', // Teredo: tunnels to an obfuscated IPv4 address, no server lives there
  '2001:2::/48', // benchmarking
  '2001:db8::/32', // documentation
  '3fff::/20', // documentation (RFC 9637)
]);
const NAT64_LOCAL = ipaddr.parseCIDR('64:ff9b:1::/48'); // local-use NAT64 (RFC 8215): the operator's own networks

const IPV4_MAPPED = ipaddr.parseCIDR('::ffff:0:0/96');
const IPV4_TRANSLATED = ipaddr.parseCIDR('::ffff:0:0:0/96'); // SIIT (RFC 6145)
const IPV4_COMPATIBLE = ipaddr.parseCIDR('::/96');
const NAT64 = ipaddr.parseCIDR('64:ff9b::/96'); // well-known prefix (RFC 6052)
const SIX_TO_FOUR = ipaddr.parseCIDR('2002::/16');

const inAny = (addr: ipaddr.IPv4 | ipaddr.IPv6, list: Cidr[]) => list.some((range) => addr.kind() === range[0].kind() && addr.match(range));

function isForbiddenV4(addr: ipaddr.IPv4, allowLoopback: boolean): boolean {
  if (allowLoopback && inAny(addr, IPV4_LOOPBACK)) return false;
  return inAny(addr, IPV4_FORBIDDEN);
}

/** The IPv4 address held in two 16-bit parts of an IPv6 address. */
const v4From = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);

function isForbiddenV6(addr: ipaddr.IPv6, allowLoopback: boolean): boolean {
  const p = addr.parts as [number, number, number, number, number, number, number, number];
  // ::ffff:a.b.c.d is the IPv4 socket itself (a dual-stack socket connects to a.b.c.d), so the loopback allowance
  // applies to it. The other embeddings reach a.b.c.d through a translator or a tunnel: never loopback.
  if (addr.match(IPV4_MAPPED)) return isForbiddenV4(v4From(p[6], p[7]), allowLoopback);
  if (addr.match(IPV4_COMPATIBLE)) {
    if (p[6] === 0 && p[7] === 1) return !allowLoopback; // ::1
    return isForbiddenV4(v4From(p[6], p[7]), false); // :: itself embeds 0.0.0.0
  }
  if (addr.match(IPV4_TRANSLATED) || addr.match(NAT64)) return isForbiddenV4(v4From(p[6], p[7]), false);
  if (addr.match(SIX_TO_FOUR)) return isForbiddenV4(v4From(p[1], p[2]), false);
  if (addr.match(NAT64_LOCAL) || !addr.match(IPV6_GLOBAL_UNICAST)) return true;
  return inAny(addr, IPV6_FORBIDDEN);
}

/**
 * Whether the gateway refuses to connect to `ip` (IPv4 or IPv6, brackets and a zone id tolerated). Anything that does
 * not parse as an address is refused too: the answer is "may connect", and a non-address never may.
 */
export function isForbiddenAddress(ip: string, opts: AddressPolicy = {}): boolean {
  const text = ip.startsWith('[') && ip.endsWith(']') ? ip.slice(1, -1) : ip;
  let addr: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    addr = ipaddr.parse(text);
  } catch {
    return true;
  }
  const allowLoopback = opts.allowLoopback ?? false;
  return addr.kind() === 'ipv4' ? isForbiddenV4(addr as ipaddr.IPv4, allowLoopback) : isForbiddenV6(addr as ipaddr.IPv6, allowLoopback);
}

/** The policy of this instance: `ALLOW_LOOPBACK_URLS=1` lets loopback through, nothing else. */
export function currentAddressPolicy(): Required<AddressPolicy> {
  return { allowLoopback: env().ALLOW_LOOPBACK_URLS };
}

/**
 * Parses `url` and refuses what can be refused before any connection: a scheme other than http: or https:, credentials
 * in the URL, or a literal IP address that is forbidden (the WHATWG parser has already turned decimal, octal, hex and
 * short IPv4 forms into dotted quads). A host name passes; its addresses are checked when the connection is made.
 */
export function checkUrl(url: string | URL, opts: AddressPolicy = currentAddressPolicy()): URL {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new OutboundRefused('invalid_url', 'not a valid absolute URL');
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new OutboundRefused('scheme', `scheme ${parsed.protocol} is not allowed: http: and https: only`);
  }
  if (parsed.username !== '' || parsed.password !== '') {
    throw new OutboundRefused('credentials', 'credentials in the URL are not allowed');
  }
  const host = parsed.hostname.startsWith('[') ? parsed.hostname.slice(1, -1) : parsed.hostname;
  if (host === '') throw new OutboundRefused('invalid_url', 'the URL has no host');
  if (isIP(host) !== 0 && isForbiddenAddress(host, opts)) {
    throw new OutboundRefused('address', `address ${host} is not allowed`);
  }
  return parsed;
}
