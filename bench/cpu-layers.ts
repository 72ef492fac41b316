import type { CpuProfile } from './inspector.ts';

/**
 * The gateway's CPU per request split by the layer that spent it (issue 32: "measure each layer's share of CPU per
 * request"), from a V8 sampling profile of a load run (bench/inspector.ts).
 *
 * Each sample goes to one layer: walking from the sampled function towards the root of its stack, the first frame
 * in a file of a known layer decides (Node's own `node:` frames are skipped, so a socket write or a crypto call is
 * charged to the code that made it: SigV4's HMACs to the AWS SDK, the upstream request to the proxy). A stack with
 * no such frame ran on its own: Node's fetch reading the upstream's answer, the HTTP server parsing a request, a
 * timer, the garbage collector. Idle samples are not CPU and are left out.
 *
 * The shares are the profile's; the milliseconds are those shares of the CPU per request measured without the
 * profiler (its sampling adds its own cost, spread over every layer).
 */

export interface Layer {
  name: string;
  /** What it holds, for the report. */
  what: string;
  /** A frame's script URL that belongs to the layer. */
  matches: (url: string) => boolean;
}

const inPackage =
  (...names: string[]) =>
  (url: string) =>
    names.some((n) => url.includes(`/node_modules/${n}/`));
const inFolder =
  (...folders: string[]) =>
  (url: string) =>
    !url.includes('/node_modules/') && folders.some((f) => url.includes(`/${f}/`));

/** In order: the first that matches a frame wins (the packages before the project's folders). */
export const LAYERS: readonly Layer[] = [
  {
    name: 'AWS SDK',
    what: 'the SDK: SigV4 signing and the retry strategy the store wire borrows for the conditional writes (store/wire.ts); the whole command stack of any other store call',
    matches: inPackage('@aws-sdk', '@smithy', '@aws-crypto'),
  },
  { name: 'middy', what: 'the handler middleware chain', matches: inPackage('@middy') },
  { name: 'Powertools', what: 'logger and metrics', matches: inPackage('@aws-lambda-powertools') },
  { name: 'zod', what: 'schema validation of request bodies', matches: inPackage('zod') },
  { name: 'jose', what: 'the token signature check', matches: inPackage('jose') },
  { name: 'other packages', what: 'every other dependency', matches: (url) => url.includes('/node_modules/') },
  {
    name: 'local runtime',
    what: 'bin/local: HTTP ↔ function-URL event, the response-stream shim (Lambda’s runtime client in AWS)',
    matches: inFolder('bin/local', 'bin'),
  },
  {
    name: 'HTTP layer',
    what: 'lambdas/http and lambdas/handlers: the request, routing, errors, the response',
    matches: inFolder('lambdas/http', 'lambdas/handlers'),
  },
  { name: 'auth', what: 'lambdas/auth: reading and checking the token', matches: inFolder('lambdas/auth') },
  {
    name: 'metering and budgets',
    what: 'lambdas/metering, budgets, store, activity, alerts, plans: the worst case, the ledger’s writes and their wire (store/wire.ts), the charge',
    matches: inFolder('lambdas/metering', 'lambdas/budgets', 'lambdas/store', 'lambdas/activity', 'lambdas/alerts', 'lambdas/plans'),
  },
  {
    name: 'proxy and providers',
    what: 'lambdas/proxy, providers, routing, pricing, streaming: the upstream call and the answer',
    matches: inFolder('lambdas/proxy', 'lambdas/providers', 'lambdas/routing', 'lambdas/pricing', 'lambdas/streaming'),
  },
  { name: 'observability', what: 'lambdas/observability: the access record and its line', matches: inFolder('lambdas/observability') },
  { name: 'other gateway code', what: 'the rest of lambdas/', matches: inFolder('lambdas') },
];

/** Samples with no frame of a layer above, by what ran. */
const NODE_LAYERS = {
  fetch: { name: 'Node fetch (undici)', what: 'Node’s fetch reading the upstream’s answer, on its own callbacks' },
  http: { name: 'Node HTTP and sockets', what: 'the HTTP server and client parsers, socket reads and writes, on their own callbacks' },
  gc: { name: 'garbage collector', what: 'V8’s garbage collection' },
  other: { name: 'Node and V8, other', what: 'timers, promise jobs, compilation and native code with no JS caller' },
} as const;

export interface LayerShare {
  name: string;
  what: string;
  /** Of the profile's non-idle samples. */
  share: number;
  /** The share of the CPU per request measured without the profiler. */
  msPerRequest: number;
}

function nodeLayer(stack: readonly { functionName: string; url: string }[]): (typeof NODE_LAYERS)[keyof typeof NODE_LAYERS] {
  if (stack.some((f) => f.url.includes('internal/deps/undici'))) return NODE_LAYERS.fetch;
  if (stack.some((f) => /^node:(_http_|net|_tls_|tls|internal\/(streams|stream_base_commons|http))/.test(f.url))) return NODE_LAYERS.http;
  if (stack.some((f) => f.functionName === '(garbage collector)')) return NODE_LAYERS.gc;
  return NODE_LAYERS.other;
}

/**
 * The profile's samples by layer, largest first; `cpuMsPerRequest` is the figure to share out. Idle samples
 * (`(idle)`) are dropped before the shares are taken.
 */
export function layerShares(profile: CpuProfile, cpuMsPerRequest: number): LayerShare[] {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map<number, number>();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);

  // One decision per profile node (many samples share a node).
  const decided = new Map<number, { name: string; what: string } | null>();
  const layerOf = (id: number): { name: string; what: string } | null => {
    const known = decided.get(id);
    if (known !== undefined) return known;
    const stack: { functionName: string; url: string }[] = [];
    let result: { name: string; what: string } | null = null;
    for (let at: number | undefined = id; at !== undefined; at = parent.get(at)) {
      const frame = byId.get(at)!.callFrame;
      if (frame.functionName === '(idle)') break;
      stack.push(frame);
      if (!frame.url || frame.url.startsWith('node:')) continue;
      const layer = LAYERS.find((l) => l.matches(frame.url));
      if (layer) {
        result = layer;
        break;
      }
    }
    const first = byId.get(id)!.callFrame.functionName;
    if (first === '(idle)') result = null;
    else if (!result) result = nodeLayer(stack);
    decided.set(id, result);
    return result;
  };

  const micros = new Map<string, { what: string; us: number }>();
  let total = 0;
  profile.samples.forEach((id, i) => {
    const layer = layerOf(id);
    if (!layer) return;
    // timeDeltas[i] is the time since the previous sample: the time this sample stands for.
    const us = Math.max(0, profile.timeDeltas[i] ?? 0);
    const entry = micros.get(layer.name) ?? { what: layer.what, us: 0 };
    entry.us += us;
    micros.set(layer.name, entry);
    total += us;
  });
  return [...micros]
    .map(([name, { what, us }]) => ({ name, what, share: us / total, msPerRequest: (us / total) * cpuMsPerRequest }))
    .sort((a, b) => b.share - a.share);
}
