import { promises as dns } from 'node:dns';
import type { LookupFunction } from 'node:net';
// undici from npm, not Node's global fetch: the global one's Agent is not importable, and an Agent from one undici
// copy handed as `dispatcher` to another copy's fetch is not supported. Importing both from the same package keeps
// the connect-time DNS check (below) and fetch in agreement.
import { Agent, fetch as undiciFetch, type RequestInit as UndiciRequestInit } from 'undici';
import { OUTBOUND_CONNECT_TIMEOUT_MS, OUTBOUND_TIMEOUT_MS } from '../config/timing.ts';
import { instanceValue, onInstanceReset } from '../instance/state.ts';
import { checkUrl, currentAddressPolicy, isForbiddenAddress, OutboundRefused, type AddressPolicy } from './guard.ts';

/**
 * The one way the gateway calls a URL on a user's behalf (remote tools, MCP servers, webhooks): docs/contract.md,
 * "Outbound safety". The URL is checked before the call (`checkUrl`); every address a host name resolves to is checked
 * at connect time, inside the socket's own DNS lookup, so the address checked is the address connected to (no DNS
 * rebinding between the two). Redirects are never followed, every call has a total time-out, and bodies are read
 * through `readCapped`.
 */

/** 100 KiB. */
export const DEFAULT_MAX_BYTES = 100 * 1024;

export interface OutboundOptions {
  /** The whole call, body included (default 30 s): a TimeoutError when it passes. */
  timeoutMs?: number;
  /** Resolving and connecting (default 5 s): a TimeoutError when it passes. undici keeps it on a coarse (~0.5 s) clock. */
  connectTimeoutMs?: number;
  /** The caller's own abort. */
  signal?: AbortSignal;
}

export interface ResolvedAddress {
  address: string;
  family: number;
}

/** Host name → every address it resolves to. The default is the system resolver (`dns.lookup`, as sockets use). */
export type OutboundResolver = (hostname: string) => Promise<readonly ResolvedAddress[]>;

const systemResolver: OutboundResolver = (hostname) => dns.lookup(hostname, { all: true, order: 'verbatim' });
let resolver: OutboundResolver = systemResolver;

/**
 * Replaces the resolver behind the connect-time check (tests: a name that resolves to a private address without real
 * DNS). Without an argument, or after resetInstanceState(), it is the system resolver again.
 */
export function setOutboundResolver(replacement?: OutboundResolver): void {
  resolver = replacement ?? systemResolver;
}
onInstanceReset(() => setOutboundResolver());

/**
 * The socket's DNS lookup. A name is refused as a whole when any of its addresses is forbidden (a name that mixes
 * public and private answers is a rebinding attempt, not a server). The error reaches `outboundFetch` as the cause of
 * undici's "fetch failed".
 */
function guardedLookup(policy: AddressPolicy): LookupFunction {
  return (hostname, options, callback) => {
    const answer = async (): Promise<readonly ResolvedAddress[]> => {
      const all = await resolver(hostname);
      const forbidden = all.find((a) => isForbiddenAddress(a.address, policy));
      if (forbidden) throw new OutboundRefused('address', `${hostname} resolves to ${forbidden.address}, which is not allowed`);
      const family = options.family === 4 || options.family === 'IPv4' ? 4 : options.family === 6 || options.family === 'IPv6' ? 6 : 0;
      const usable = family === 0 ? all : all.filter((a) => a.family === family);
      if (usable.length === 0) {
        throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${hostname}`), { code: 'ENOTFOUND', hostname });
      }
      return usable;
    };
    answer().then(
      (usable) => {
        if (options.all)
          callback(
            null,
            usable.map((a) => ({ address: a.address, family: a.family })),
          );
        else callback(null, usable[0]!.address, usable[0]!.family);
      },
      (err: NodeJS.ErrnoException) => callback(err, ''),
    );
  };
}

/**
 * undici Agents for this instance, one per connect time-out, all under the instance's address policy. Kept as an
 * instance value so resetInstanceState() (after ALLOW_LOOPBACK_URLS changes) builds them again with the new policy.
 */
const agents = instanceValue(
  () => ({ policy: currentAddressPolicy(), byConnectTimeout: new Map<number, Agent>() }),
  ({ byConnectTimeout }) => {
    for (const agent of byConnectTimeout.values()) agent.close().catch(() => undefined);
  },
);

function agentFor(connectTimeoutMs: number): { agent: Agent; policy: AddressPolicy } {
  const { policy, byConnectTimeout } = agents();
  let agent = byConnectTimeout.get(connectTimeoutMs);
  if (!agent) {
    agent = new Agent({ connect: { lookup: guardedLookup(policy), timeout: connectTimeoutMs } });
    byConnectTimeout.set(connectTimeoutMs, agent);
  }
  return { agent, policy };
}

/** A signal that aborts with a TimeoutError after `ms` (the timer does not keep the process alive). */
function timeoutSignal(ms: number): AbortSignal {
  const controller = new AbortController();
  setTimeout(() => controller.abort(new DOMException(`outbound call took longer than ${ms} ms`, 'TimeoutError')), ms).unref();
  return controller.signal;
}

/** What undici's "fetch failed" hides: a refusal at connect time, or a connect time-out. */
function surface(err: unknown, connectTimeoutMs: number, signal: AbortSignal): unknown {
  const seen = new Set<unknown>();
  const queue: unknown[] = [err];
  while (queue.length > 0) {
    const e = queue.shift();
    if (!(e instanceof Error) || seen.has(e)) continue;
    seen.add(e);
    if (e instanceof OutboundRefused) return e;
    if ((e as { code?: unknown }).code === 'UND_ERR_CONNECT_TIMEOUT') {
      return new DOMException(`no connection within ${connectTimeoutMs} ms`, 'TimeoutError');
    }
    queue.push(e.cause);
    if (e instanceof AggregateError) queue.push(...e.errors);
  }
  return signal.aborted ? signal.reason : err;
}

/**
 * `fetch` under the outbound rules. Rejects with OutboundRefused (before the call, or at connect time for a name),
 * with a TimeoutError (connect or total time-out) or the caller's abort reason, or with undici's TypeError for other
 * network failures. A 3xx comes back as the response, unfollowed. The total time-out also covers reading the body.
 */
export async function outboundFetch(url: string | URL, init: RequestInit = {}, opts: OutboundOptions = {}): Promise<Response> {
  const connectTimeoutMs = opts.connectTimeoutMs ?? OUTBOUND_CONNECT_TIMEOUT_MS;
  const { agent, policy } = agentFor(connectTimeoutMs);
  const target = checkUrl(url, policy);
  const signals = [timeoutSignal(opts.timeoutMs ?? OUTBOUND_TIMEOUT_MS), opts.signal, init.signal];
  const signal = AbortSignal.any(signals.filter((s): s is AbortSignal => s != null));
  try {
    const response = await undiciFetch(target, {
      ...(init as UndiciRequestInit),
      signal,
      redirect: 'manual',
      dispatcher: agent,
    });
    return response as unknown as Response;
  } catch (err) {
    throw surface(err, connectTimeoutMs, signal);
  }
}

/**
 * A `fetch` under the same rules, for libraries that take one (the MCP SDK transports' `fetch` option). Options apply
 * to every call it makes; the total time-out counts from each call's start.
 */
export function guardedFetchWith(opts: OutboundOptions = {}): typeof fetch {
  return async (input: RequestInfo | URL, init?: RequestInit) => {
    if (typeof input === 'string' || input instanceof URL) return outboundFetch(input, init, opts);
    // A Request (from any fetch implementation): its parts, overridden by init.
    const fromRequest: RequestInit & { duplex?: 'half' } = {
      method: input.method,
      headers: input.headers,
      signal: input.signal,
      ...(input.body ? { body: input.body, duplex: 'half' } : {}),
    };
    return outboundFetch(input.url, { ...fromRequest, ...init }, opts);
  };
}

/** A `fetch` with the same guard, for libraries that take one (the MCP SDK transports' `fetch` option). */
export const guardedFetch: typeof fetch = guardedFetchWith();

/**
 * Reads at most `maxBytes` of the body (default 100 KiB) as UTF-8 text. At the limit it stops, cancels the body (which
 * closes the connection: the rest is never read) and says `truncated`; a character cut by the limit is dropped.
 * `bytes` is how many body bytes were kept.
 */
export async function readCapped(res: Response, maxBytes: number = DEFAULT_MAX_BYTES): Promise<{ text: string; truncated: boolean; bytes: number }> {
  if (!res.body) return { text: '', truncated: false, bytes: 0 };
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let text = '';
  let bytes = 0;
  let truncated = false;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const room = maxBytes - bytes;
      if (value.byteLength > room) {
        text += decoder.decode(value.subarray(0, room), { stream: true });
        bytes += room;
        truncated = true;
        break;
      }
      text += decoder.decode(value, { stream: true });
      bytes += value.byteLength;
    }
  } catch (err) {
    reader.cancel(err).catch(() => undefined);
    throw err;
  }
  if (truncated) {
    await reader.cancel(new Error(`body truncated at ${maxBytes} bytes`)).catch(() => undefined);
    return { text, truncated, bytes };
  }
  return { text: text + decoder.decode(), truncated, bytes };
}
