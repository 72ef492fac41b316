import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { build } from 'esbuild';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildReplyPlan, estimateInputTokens, lastUserTextAnthropic, parseDirectives, type RecordedRequest } from '../../bin/local/upstreams/script.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { AUTH_DEADLINE_SECONDS } from '../../lambdas/config/timing.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { createProject } from '../../lambdas/registry/registry.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { CHROMIUM, CHROMIUM_CANDIDATES, CHROMIUM_FLAGS, IN_CI, SKIP_REASON } from '../support/chromium.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';

/**
 * The gateway from a web page (DESIGN §10, docs/browser.md), in a real Chromium: the page is docs/examples/browser.html
 * itself — the documentation's example, its URLs pointed at a local gateway and its SDK import at a bundle of the
 * installed `@anthropic-ai/sdk` — served by a static server of this file on another loopback port, so every call is
 * cross-origin, with the preflights, the CORS checks and the header exposure a browser really applies. A response
 * without the right CORS headers is not readable by the page at all (fetch rejects), so each exact value read here
 * also proves the headers were there.
 *
 * Chromium is Debian's (`apt-get install chromium`, which .ci/run does), driven by playwright-core; no browser is
 * downloaded (test/support/chromium.ts). Without one the file is skipped, with the reason in its name — except under
 * CI, where it fails.
 */

const ROOT = resolve(import.meta.dirname, '../..');
const EXAMPLE = join(ROOT, 'docs/examples/browser.html');
const SDK_VERSION = (JSON.parse(readFileSync(join(ROOT, 'node_modules/@anthropic-ai/sdk/package.json'), 'utf8')) as { version: string }).version;
/** What the example imports the SDK from, and what this test serves instead (the machine has no network). */
const CDN_SDK = `https://esm.sh/@anthropic-ai/sdk@${SDK_VERSION}`;
const LOCAL_SDK = '/anthropic-sdk.js';

const MODEL = 'claude-sonnet-4-6';
const BUDGET = { ai: 10_000_000, compute: 3600, window: 'day' as const };
const NOTE = 'Paris, 12–14 June. Walk along the Seine.';

// ---------------------------------------------------------------------------------------------------------------
// What the page exposes (docs/examples/browser.html), as the evaluated functions see it
// ---------------------------------------------------------------------------------------------------------------

interface PageSession {
  sessionId: string;
  send(message: string, onText?: (t: string) => void): Promise<Record<string, unknown>>;
  interrupt(): void;
  close(): void;
  closed: Promise<{ code: number; reason: string; error?: Record<string, unknown> }>;
}
interface PageGateway {
  // biome-ignore lint/suspicious/noExplicitAny: the SDK's client, bundled into the page
  anthropic: any;
  prompt(message: string, options?: Record<string, unknown>): Promise<{ result: Record<string, unknown>; messages: Record<string, unknown>[] }>;
  streamPrompt(
    message: string,
    options: Record<string, unknown>,
    onMessage: (m: Record<string, unknown>) => void,
  ): Promise<{ result: Record<string, unknown>; sessionId: string | null }>;
  usage(): Promise<Record<string, unknown>>;
  incubate(message: string, body: Record<string, unknown>): Promise<Record<string, unknown>>;
  vessel(id: string): Promise<Record<string, unknown>>;
  waitForVessel(id: string, intervalMs?: number): Promise<Record<string, unknown>>;
  cancelVessel(id: string): Promise<Record<string, unknown>>;
  openSession(opts?: {
    options?: Record<string, unknown>;
    tools?: Record<string, { description: string; input_schema: unknown; run(input: Record<string, unknown>): Promise<string> }>;
  }): Promise<PageSession>;
}
interface WsLogEntry {
  url: string;
  sent: Record<string, unknown>[];
  received: Record<string, unknown>[];
  close?: { code: number; reason: string; wasClean: boolean };
}
/** `window` in the page: the example's globals, and this test's WebSocket log (INIT_SCRIPT). */
interface PageWindow {
  gateway: PageGateway;
  gatewayConfig: Record<string, string>;
  createGateway(config: Record<string, unknown>): PageGateway;
  __wsLog: WsLogEntry[];
  __describeError(err: unknown, client: unknown): ReadError;
}
/** An error as the page reads it (INIT_SCRIPT's __describeError). */
interface ReadError {
  name: string;
  status?: number;
  code?: string;
  body?: unknown;
  message?: string;
  requestID?: string;
  requestId?: string;
  retryAfter?: string;
  shouldRetry?: string;
}

/**
 * Run in the page before its own scripts: a `__name` helper (vitest's transform may name the functions given to
 * page.evaluate with it) and a log of every WebSocket's frames both ways and its close event, which the example's
 * session does not keep.
 */
const INIT_SCRIPT = `
globalThis.__name = (f) => f;
globalThis.__wsLog = [];
const NativeWebSocket = WebSocket;
globalThis.WebSocket = class extends NativeWebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    const entry = { url: String(url), sent: [], received: [], close: undefined };
    this.__entry = entry;
    globalThis.__wsLog.push(entry);
    this.addEventListener('message', (e) => entry.received.push(JSON.parse(e.data)));
    this.addEventListener('close', (e) => { entry.close = { code: e.code, reason: e.reason, wasClean: e.wasClean }; });
  }
  send(data) {
    this.__entry.sent.push(JSON.parse(data));
    super.send(data);
  }
};
// What a page can read of an error: the SDK's (its class found by instanceof: the bundle may rename classes) or the
// example's GatewayError.
globalThis.__describeError = (e, client) => {
  const Sdk = client?.constructor ?? {};
  const kinds = ['RateLimitError', 'AuthenticationError', 'PermissionDeniedError', 'NotFoundError', 'BadRequestError', 'APIConnectionError', 'APIError'];
  const name = kinds.find((k) => typeof Sdk[k] === 'function' && e instanceof Sdk[k])
    ?? (typeof globalThis.GatewayError === 'function' && e instanceof globalThis.GatewayError ? 'GatewayError' : String(e?.constructor?.name));
  return {
    name,
    status: e?.status,
    code: e?.code,
    body: e?.error ?? e?.body,
    message: e?.message,
    requestID: e?.requestID,
    requestId: e?.requestId ?? e?.headers?.get?.('request-id') ?? undefined,
    retryAfter: e?.retryAfter ?? e?.headers?.get?.('retry-after') ?? undefined,
    shouldRetry: e?.headers?.get?.('x-should-retry') ?? undefined,
  };
};
`;

// ---------------------------------------------------------------------------------------------------------------
// The gateway, the app's static server, the browser
// ---------------------------------------------------------------------------------------------------------------

let gw: TestGateway;
let dataDir: string;
let site: { url: string; origin: string; close(): Promise<void> };
let browser: Browser;
let context: BrowserContext;
let page: Page;
/** What the page's console said and what it threw: shown when an expectation fails. */
const pageLog: string[] = [];
/** The token the static server's "backend" route hands the example page's own form. */
let backendToken: string;

/** The example page, its gateway URLs pointed at `gw` and its SDK import at the bundle; each rewrite must find its text. */
function rewriteExample(html: string, httpUrl: string, wsUrl: string): string {
  const replace = (text: string, from: string, to: string, times: number) => {
    const parts = text.split(from);
    if (parts.length - 1 !== times) throw new Error(`docs/examples/browser.html has ${parts.length - 1} × ${from}, this test expects ${times}`);
    return parts.join(to);
  };
  let out = replace(html, `'${CDN_SDK}'`, `'${LOCAL_SDK}'`, 1);
  out = replace(out, "'http://127.0.0.1:8787'", `'${httpUrl}'`, 3);
  out = replace(out, "'ws://127.0.0.1:8787/ws'", `'${wsUrl}'`, 1);
  return out;
}

/** The installed `@anthropic-ai/sdk` as one browser ES module (what the CDN URL serves a real page). */
async function bundleSdk(): Promise<string> {
  const out = await build({
    stdin: { contents: "export { default } from '@anthropic-ai/sdk';", resolveDir: ROOT, loader: 'js' },
    bundle: true,
    format: 'esm',
    platform: 'browser',
    target: 'chrome120',
    write: false,
    logLevel: 'silent',
  });
  return out.outputFiles[0]!.text;
}

async function startSite(html: string, sdk: string): Promise<typeof site> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((req, res) => {
    const path = new URL(req.url ?? '/', 'http://site').pathname;
    if (path === '/' || path === '/index.html') res.writeHead(200, { 'content-type': 'text/html; charset=utf-8' }).end(html);
    else if (path === LOCAL_SDK) res.writeHead(200, { 'content-type': 'text/javascript; charset=utf-8' }).end(sdk);
    // The app's backend: mints the signed-in user's token (here: hands out one minted by the test).
    else if (path === '/gateway-token')
      res.writeHead(200, { 'content-type': 'application/json', 'cache-control': 'no-store' }).end(JSON.stringify({ token: backendToken }));
    else res.writeHead(404).end();
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    origin: url,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}

/** Runs the operator CLI as an operator would, DATA_DIR pointing it at the running gateway (as test/cli/cli.test.ts). */
function cli(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(
      join(ROOT, 'node_modules/.bin/tsx'),
      ['bin/gateway.ts', ...args],
      {
        cwd: ROOT,
        env: { PATH: `${join(ROOT, 'node_modules/.bin')}:${process.env.PATH ?? ''}`, HOME: process.env.HOME ?? tmpdir(), DATA_DIR: dataDir },
        timeout: 60_000,
      },
      (err, stdout, stderr) => done({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr }),
    );
  });
}

/**
 * page.evaluate, with an error thrown in the page turned into a plain Error of this process: its message keeps what
 * happened and the page's console, without the page's stack frames (vitest would look for source maps of the page's
 * URLs on disk, and fail on them).
 */
async function inPage<R, A = undefined>(fn: (arg: A) => R | Promise<R>, arg?: A): Promise<R> {
  try {
    return (await page.evaluate(fn as (arg: unknown) => unknown, arg)) as R;
  } catch (err) {
    const message = String((err as Error).message ?? err)
      .split('\n')
      .filter((line) => !/^\s+at /.test(line))
      .join('\n');
    throw new Error(`in the page: ${message}\n${logs()}`);
  }
}

/** The user's window as a server reads it (no Origin), once every invocation has settled what it charged. */
interface Usage {
  [key: string]: unknown;
  ai: { used: number; reserved: number; remaining: number; budget: number; overrun: number };
  compute: { used: number; reserved: number; remaining: number; budget: number };
}
async function serverUsage(token: string): Promise<Usage> {
  await gw.invocationsDone();
  const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  return (await res.json()) as Usage;
}

/** Every item of the gateway's vessels table (vessels and idempotency keys): a refused request adds none. */
async function vesselItems(): Promise<number> {
  let count = 0;
  let start: Record<string, unknown> | undefined;
  do {
    const page = await documentClient().send(new ScanCommand({ TableName: gw.tables.VESSELS_TABLE, ExclusiveStartKey: start, ConsistentRead: true }));
    count += page.Items?.length ?? 0;
    start = page.LastEvaluatedKey;
  } while (start);
  return count;
}

/** What the simulated upstreams and the queues have been handed so far: a refused request changes none of it. */
function workDone() {
  const activity = gw.activity();
  return {
    anthropic: gw.upstreams.anthropic!.received,
    openai: gw.upstreams.openai!.received,
    queues: Object.fromEntries(Object.entries(activity.queues).map(([q, a]) => [q, JSON.stringify(a)])),
  };
}

/** The exact charge of one simulated Anthropic call (bin/local/upstreams/script.ts): its input estimate, its reply. */
function simulatedCharge(record: RecordedRequest): number {
  const body = record.body as { max_tokens?: number };
  const plan = buildReplyPlan(parseDirectives(lastUserTextAnthropic(body)), body.max_tokens);
  return charge(priceFor(MODEL, 'anthropic')!, { input_tokens: estimateInputTokens(body), output_tokens: plan.outputTokens }).microdollars;
}

/** The upstream calls whose last user text contains `marker`. */
const callsSaying = (marker: string) =>
  gw.upstreams.anthropic!.requests.filter((r) => r.path === '/v1/messages' && lastUserTextAnthropic(r.body).includes(marker));

/** Seconds until the next UTC midnight: a day window's `retry-after`. */
const secondsToMidnight = (now = Date.now()) =>
  Math.ceil((Date.UTC(new Date(now).getUTCFullYear(), new Date(now).getUTCMonth(), new Date(now).getUTCDate() + 1) - now) / 1000);

const REQUEST_ID = /^req_gw_[0-9a-f]{24}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const words = (n: number) => Array.from({ length: n }, (_, i) => `word${i + 1}`).join(' ');
const logs = () => `page console:\n${pageLog.join('\n')}`;

const describeBrowser = CHROMIUM ? describe : describe.skip;
const skipReason = SKIP_REASON;

describe('docs/browser.md', () => {
  it('quotes docs/examples/browser.html: every js block of the page is in the tested example, verbatim but for indentation', () => {
    const flat = (text: string) =>
      text
        .split('\n')
        .map((l) => l.trim())
        .filter(Boolean)
        .join('\n');
    const example = flat(readFileSync(EXAMPLE, 'utf8'));
    const blocks = [...readFileSync(join(ROOT, 'docs/browser.md'), 'utf8').matchAll(/```js\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(blocks.length).toBeGreaterThanOrEqual(5);
    for (const block of blocks) expect(example, block).toContain(flat(block));
    expect(readFileSync(join(ROOT, 'docs/browser.md'), 'utf8')).toContain(CDN_SDK);
  });
});

describe('Chromium for the browser tests', () => {
  it.runIf(IN_CI)('is installed on CI (.ci/run installs Debian’s chromium): the browser tests never skip there', () => {
    expect(CHROMIUM, `no Chromium at ${CHROMIUM_CANDIDATES.join(', ')}`).toBeDefined();
  });
});

describeBrowser(`the gateway from a web page on another origin (docs/examples/browser.html in Chromium)${skipReason}`, () => {
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'gw-browser-'));
    gw = await startTestGateway({ dataDir });
    backendToken = await gw.token({ user: 'page-user', budget: BUDGET });
    const html = rewriteExample(readFileSync(EXAMPLE, 'utf8'), gw.url, gw.websocket!.url);
    site = await startSite(html, await bundleSdk());
    expect(new URL(site.origin).port).not.toBe(new URL(gw.url).port);
    browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS });
    context = await browser.newContext();
    await context.addInitScript({ content: INIT_SCRIPT });
    page = await context.newPage();
    page.on('console', (m) => pageLog.push(`[${m.type()}] ${m.text()}`));
    page.on('pageerror', (e) => pageLog.push(`[pageerror] ${e.message}`));
    await page.goto(site.url);
    await page.waitForFunction(() => 'gateway' in window, undefined, { timeout: 10_000 });
  });

  afterAll(async () => {
    await browser?.close();
    await site?.close();
    await gw?.stop();
    if (dataDir) rmSync(dataDir, { recursive: true, force: true });
  });

  it('the example page loads its SDK and its config pointed at the gateway, from another origin', async () => {
    const config = await inPage(() => (window as unknown as PageWindow).gatewayConfig);
    expect(config).toEqual({ channelingUrl: gw.url, promptUrl: gw.url, conjureUrl: gw.url, sessionsUrl: gw.websocket!.url });
    expect(await inPage(() => location.origin)).toBe(site.origin);
    expect(site.origin).not.toBe(new URL(gw.url).origin);
  });

  it('Anthropic SDK messages.create: the answer, its cost and request-id headers readable, charged exactly', async () => {
    const token = await gw.token({ user: 'sdk-create', budget: BUDGET });
    const before = await serverUsage(token);
    const got = await inPage(
      async ({ token, model }) => {
        const w = window as unknown as PageWindow;
        const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
        const { data, response } = await gateway.anthropic.messages
          .create({ model, max_tokens: 256, messages: [{ role: 'user', content: 'Hello' }] })
          .withResponse();
        return {
          content: data.content,
          stop_reason: data.stop_reason,
          requestIdProp: data._request_id,
          requestId: response.headers.get('request-id'),
          cost: response.headers.get('x-gateway-cost-microdollars'),
          remaining: response.headers.get('x-gateway-budget-remaining-microdollars'),
        };
      },
      { token, model: MODEL },
    );
    expect(got.content, logs()).toEqual([{ type: 'text', text: 'Echo: Hello' }]);
    expect(got.stop_reason).toBe('end_turn');
    expect(got.requestId).toMatch(REQUEST_ID);
    expect(got.requestIdProp).toBe(got.requestId);
    // Hello with max_tokens 256: 12 input tokens × 3 µ$ + 2 output tokens × 15 µ$ (docs/local.md).
    const [call] = callsSaying('Hello').slice(-1);
    expect(simulatedCharge(call!)).toBe(66);
    expect(got.cost).toBe('66');
    expect(got.remaining).toBe(String(BUDGET.ai - 66));
    const after = await serverUsage(token);
    expect(after.ai.used - before.ai.used).toBe(66);
    expect(after.ai.reserved).toBe(0);
  });

  it('Anthropic SDK messages.stream: text arrives event by event, well before the final message; charged exactly', async () => {
    const token = await gw.token({ user: 'sdk-stream', budget: BUDGET });
    const before = await serverUsage(token);
    const marker = 'Stream to the page';
    const got = await inPage(
      async ({ token, model, content }) => {
        const w = window as unknown as PageWindow;
        const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
        const t0 = performance.now();
        const texts: { delta: string; at: number }[] = [];
        const stream = gateway.anthropic.messages.stream({ model, max_tokens: 256, messages: [{ role: 'user', content }] });
        stream.on('text', (delta: string) => texts.push({ delta, at: performance.now() - t0 }));
        const final = await stream.finalMessage();
        return { texts, finalAt: performance.now() - t0, final: { content: final.content, usage: final.usage, stop_reason: final.stop_reason } };
      },
      { token, model: MODEL, content: `${marker} [[words:8]] [[delay:120]]` },
    );
    expect(
      got.texts.map((t) => t.delta),
      logs(),
    ).toEqual(['word1 ', 'word2 ', 'word3 ', 'word4 ', 'word5 ', 'word6 ', 'word7 ', 'word8']);
    expect(got.final.content).toEqual([{ type: 'text', text: words(8) }]);
    expect(got.final.stop_reason).toBe('end_turn');
    // One event every 120 ms upstream: the page saw them spread out, the first long before the message ended.
    const first = got.texts[0]!.at;
    const last = got.texts.at(-1)!.at;
    expect(last - first).toBeGreaterThan(7 * 120 * 0.75);
    expect(got.finalAt - first).toBeGreaterThan(7 * 120 * 0.75);
    expect(got.finalAt).toBeGreaterThanOrEqual(last);
    const [call] = callsSaying(marker);
    const expected = simulatedCharge(call!);
    expect(got.final.usage).toMatchObject({ output_tokens: 8, input_tokens: estimateInputTokens(call!.body) });
    const after = await serverUsage(token);
    expect(after.ai.used - before.ai.used).toBe(expected);
    expect(after.ai.reserved).toBe(0);
  });

  it('POST /v1/chat/completions from the page (OpenAI format): JSON with its cost header, a stream read chunk by chunk, a 401 envelope; charged exactly', async () => {
    const token = await gw.token({ user: 'page-chat', budget: BUDGET });
    const before = await serverUsage(token);
    const marker = 'Chat from the page';
    const got = await inPage(
      async ({ token, model, marker }) => {
        const w = window as unknown as PageWindow;
        const url = `${w.gatewayConfig.channelingUrl}/v1/chat/completions`;
        const post = (body: unknown, key = token) =>
          fetch(url, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
        const json = await post({ model, messages: [{ role: 'user', content: `${marker} JSON [[words:3]]` }] });
        const answer = (await json.json()) as { object: string; choices: { message: { content: string }; finish_reason: string }[] };
        const streamed = await post({ model, stream: true, messages: [{ role: 'user', content: `${marker} SSE [[words:4]]` }] });
        const reader = streamed.body!.getReader();
        const decoder = new TextDecoder();
        let sse = '';
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          sse += decoder.decode(value, { stream: true });
        }
        const chunks = sse
          .split('\n\n')
          .filter((e) => e.startsWith('data: {'))
          .map((e) => JSON.parse(e.slice(6)) as { choices: { delta: { content?: string } }[] });
        const refused = await post({ model, messages: [{ role: 'user', content: 'hi' }] }, 'not-a-token');
        return {
          status: json.status,
          cost: json.headers.get('x-gateway-cost-microdollars'),
          requestId: json.headers.get('request-id'),
          object: answer.object,
          content: answer.choices[0]!.message.content,
          finish: answer.choices[0]!.finish_reason,
          streamStatus: streamed.status,
          streamedText: chunks.map((c) => c.choices[0]?.delta.content ?? '').join(''),
          done: sse.trimEnd().endsWith('data: [DONE]'),
          refusedStatus: refused.status,
          refusedBody: await refused.json(),
        };
      },
      { token, model: MODEL, marker },
    );
    expect(got, logs()).toMatchObject({
      status: 200,
      object: 'chat.completion',
      content: 'word1 word2 word3',
      finish: 'stop',
      streamStatus: 200,
      streamedText: 'word1 word2 word3 word4',
      done: true,
      refusedStatus: 401,
      refusedBody: { error: { type: 'invalid_request_error', code: 'invalid_api_key' } },
    });
    expect(got.requestId).toMatch(REQUEST_ID);
    const [jsonCall, sseCall] = callsSaying(marker);
    expect(got.cost).toBe(String(simulatedCharge(jsonCall!)));
    const after = await serverUsage(token);
    expect(after.ai.used - before.ai.used).toBe(simulatedCharge(jsonCall!) + simulatedCharge(sseCall!));
    expect(after.ai.reserved).toBe(0);
  });

  it('Anthropic SDK errors are readable: a 429 with request-id, retry-after and x-should-retry; a 401', async () => {
    const token = await gw.token({ user: 'sdk-broke', budget: { ...BUDGET, ai: 0 } });
    const funded = await gw.token({ user: 'sdk-upstream-errors', budget: BUDGET });
    const before = await serverUsage(token);
    const fundedBefore = await serverUsage(funded);
    const received = gw.upstreams.anthropic!.received;
    const earliest = secondsToMidnight();
    const got = await inPage(
      async ({ token, funded, model }) => {
        const w = window as unknown as PageWindow;
        const attempt = async (key: string) => {
          const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => key });
          try {
            await gateway.anthropic.messages.create({ model, max_tokens: 256, messages: [{ role: 'user', content: 'Hello' }] });
            return { ok: true };
          } catch (err) {
            return w.__describeError(err, gateway.anthropic);
          }
        };
        // The simulated upstream's own errors, passed on (no retries, to see each once).
        const upstream = async (status: number) => {
          const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => funded });
          try {
            await gateway.anthropic.messages.create(
              { model, max_tokens: 256, messages: [{ role: 'user', content: `Hi [[error:${status}]]` }] },
              { maxRetries: 0 },
            );
            return { ok: true };
          } catch (err) {
            return w.__describeError(err, gateway.anthropic);
          }
        };
        return { broke: await attempt(token), bad: await attempt('not-a-token'), upstream429: await upstream(429), upstream529: await upstream(529) };
      },
      { token, funded, model: MODEL },
    );
    const latest = secondsToMidnight();
    expect(got.broke, logs()).toMatchObject({ name: 'RateLimitError', status: 429, shouldRetry: 'false' });
    const broke = got.broke as ReadError & { body: { type: string; error: { type: string; message: string } }; requestId: string; retryAfter: string };
    expect(broke.body.type).toBe('error');
    expect(broke.body.error.type).toBe('rate_limit_error');
    expect(broke.body.error.message).toMatch(/^AI budget exhausted: 0 of 0 microdollars spent in the current day window \(started .*\); it resets at /);
    expect(broke.requestId).toMatch(REQUEST_ID);
    expect(broke.requestID).toBe(broke.requestId);
    // The seconds to the day window's reset (UTC midnight), as the page reads them.
    expect(Number(broke.retryAfter)).toBeGreaterThanOrEqual(latest);
    expect(Number(broke.retryAfter)).toBeLessThanOrEqual(earliest);
    expect(got.bad).toMatchObject({ name: 'AuthenticationError', status: 401, body: { type: 'error', error: { type: 'authentication_error' } } });
    expect((got.bad as ReadError).requestId).toMatch(REQUEST_ID);
    // The upstream's 429 and 529: readable, retryable, uncharged.
    expect(got.upstream429, JSON.stringify(got)).toMatchObject({
      name: 'RateLimitError',
      status: 429,
      shouldRetry: 'true',
      body: { type: 'error', error: { type: 'rate_limit_error' } },
    });
    expect(got.upstream529).toMatchObject({ name: 'APIError', status: 529, shouldRetry: 'true', body: { type: 'error', error: { type: 'overloaded_error' } } });
    for (const e of [got.upstream429, got.upstream529]) expect((e as ReadError).requestId).toMatch(REQUEST_ID);
    // The budget refusal and the bad token never reached the upstream; nothing was charged.
    expect(gw.upstreams.anthropic!.received - received).toBe(2);
    expect(await serverUsage(token)).toEqual(before);
    expect(await serverUsage(funded)).toEqual(fundedBefore);
  });

  it('/prompt as JSON, then /usage with a Bearer token: the page reads what a server reads', async () => {
    const token = await gw.token({ user: 'prompt-json', budget: BUDGET });
    const before = await serverUsage(token);
    const marker = 'JSON from the page';
    const out = await inPage(
      async ({ token, marker }) => {
        const w = window as unknown as PageWindow;
        const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
        return gateway.prompt(marker);
      },
      { token, marker },
    );
    expect(out.result, logs()).toMatchObject({ type: 'result', subtype: 'success', is_error: false, text: `Echo: ${marker}`, num_turns: 1, model: MODEL });
    const [call] = callsSaying(marker);
    const cost = simulatedCharge(call!);
    expect(out.result.total_cost_microdollars).toBe(cost);
    const after = await serverUsage(token);
    expect(after.ai.used - before.ai.used).toBe(cost);
    // Compute is the run's wall-clock seconds from its admission, rounded up; duration_secs is the time it was active,
    // which starts a little later: on a loaded machine the two round to neighbouring whole seconds.
    const computeCharged = after.compute.used - before.compute.used;
    expect(computeCharged - Math.ceil(out.result.duration_secs as number)).toBeOneOf([0, 1]);
    // The page's own /usage read, between two server reads that agree.
    const seen = await inPage(
      async ({ token }) => {
        const w = window as unknown as PageWindow;
        return w.createGateway({ ...w.gatewayConfig, getToken: async () => token }).usage();
      },
      { token },
    );
    expect(seen).toEqual(after);
    expect(await serverUsage(token)).toEqual(after);
  });

  it('/prompt as SSE: the page parses each event as it arrives (arrival times recorded), then the result', async () => {
    const token = await gw.token({ user: 'prompt-sse', budget: BUDGET });
    const before = await serverUsage(token);
    const marker = 'SSE to the page';
    const got = await inPage(
      async ({ token, message }) => {
        const w = window as unknown as PageWindow;
        const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
        const t0 = performance.now();
        const events: { type: unknown; text: unknown; at: number }[] = [];
        const { result, sessionId } = await gateway.streamPrompt(message, {}, (m) => events.push({ type: m.type, text: m.text, at: performance.now() - t0 }));
        return { events, result, sessionId, endAt: performance.now() - t0 };
      },
      { token, message: `${marker} [[words:6]] [[delay:150]]` },
    );
    const types = got.events.map((e) => e.type);
    expect(types.at(-1), logs()).toBe('result');
    const deltas = got.events.filter((e) => e.type === 'assistant');
    expect(types).toEqual([...deltas.map(() => 'assistant'), 'result']);
    expect(deltas.length).toBeGreaterThan(1);
    expect(deltas.map((e) => e.text).join('')).toBe(words(6));
    expect(got.result).toMatchObject({ type: 'result', subtype: 'success', text: words(6), num_turns: 1 });
    // Parsed as they came: the first word more than 5 × 150 ms (less slack) before the last, and before the result.
    expect(deltas.at(-1)!.at - deltas[0]!.at).toBeGreaterThan(5 * 150 * 0.75);
    expect(got.events.at(-1)!.at - deltas[0]!.at).toBeGreaterThan(5 * 150 * 0.75);
    // x-session-id is exposed to the page.
    expect(got.sessionId).toMatch(UUID);
    const [call] = callsSaying(marker);
    const after = await serverUsage(token);
    expect(got.result.total_cost_microdollars).toBe(simulatedCharge(call!));
    expect(after.ai.used - before.ai.used).toBe(got.result.total_cost_microdollars);
  });

  it('/incubate from the page: queued, replayed (idempotent-replayed readable), polled to its end; another scheduled and canceled', async () => {
    const token = await gw.token({ user: 'incubate-user', budget: BUDGET });
    const before = await serverUsage(token);
    const marker = 'Vessel from the page';
    const got = await inPage(
      async ({ token, marker }) => {
        const w = window as unknown as PageWindow;
        const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
        const queued = await gateway.incubate(marker, { idempotencyKey: 'page-now' });
        const replay = await gateway.incubate(marker, { idempotencyKey: 'page-now' });
        const polls: unknown[] = [];
        let done: Record<string, unknown>;
        for (;;) {
          done = await gateway.vessel(queued.vesselId as string);
          polls.push(done.status);
          if (done.isCompleted) break;
          await new Promise((r) => setTimeout(r, 200));
        }
        const waited = await gateway.waitForVessel(queued.vesselId as string);
        const laterAt = Date.now();
        const later = await gateway.incubate('Not now', { idempotencyKey: 'page-later', ttl: 3600 });
        const pending = await gateway.vessel(later.vesselId as string);
        const canceled = await gateway.cancelVessel(later.vesselId as string);
        const read = await gateway.vessel(later.vesselId as string);
        let again: unknown;
        try {
          await gateway.cancelVessel(later.vesselId as string);
        } catch (err) {
          const e = err as { status: number; code: string; body: unknown };
          again = { status: e.status, code: e.code, body: e.body };
        }
        return { queued, replay, polls, done, waited, laterAt, later, pending, canceled, read, again };
      },
      { token, marker },
    );
    expect(got.queued, logs()).toMatchObject({ idempotencyKey: 'page-now', status: 'queued', replayed: false });
    expect(got.queued.vesselId).toMatch(UUID);
    expect(got.replay).toEqual({ ...got.queued, replayed: true });
    expect(got.polls.at(-1)).toBe('COMPLETED');
    expect(got.done).toMatchObject({
      vesselId: got.queued.vesselId,
      status: 'COMPLETED',
      isCompleted: true,
      isSuccess: true,
      isFailed: false,
      isCanceled: false,
      attempts: 1,
      output: { success: true, text: `Echo: ${marker}`, result: { subtype: 'success' } },
    });
    expect(got.waited).toEqual(got.done);
    // Accepted as queued, due in an hour (whole seconds, rounded down); the record says PENDING until then.
    expect(got.later).toMatchObject({ idempotencyKey: 'page-later', status: 'queued', replayed: false });
    const dueIn = Date.parse(got.later.scheduledFor as string) - got.laterAt;
    expect(dueIn).toBeGreaterThan(3_598_000);
    expect(dueIn).toBeLessThanOrEqual(3_601_000);
    expect(got.pending).toMatchObject({ vesselId: got.later.vesselId, status: 'PENDING', isCompleted: false });
    expect(got.canceled).toMatchObject({ vesselId: got.later.vesselId, status: 'CANCELED', isCompleted: true, isCanceled: true, attempts: 0 });
    expect(got.read).toMatchObject({ status: 'CANCELED', isCanceled: true });
    expect(got.again).toMatchObject({ status: 409, code: 'vessel_not_cancelable', body: { status: 'CANCELED' } });
    // One model call, for the vessel that ran; the canceled one never reached the upstream.
    const calls = callsSaying(marker);
    expect(calls).toHaveLength(1);
    expect(callsSaying('Not now')).toHaveLength(0);
    const cost = simulatedCharge(calls[0]!);
    const result = (got.done.output as { result: { total_cost_microdollars: number } }).result;
    expect(result.total_cost_microdollars).toBe(cost);
    const after = await serverUsage(token);
    expect(after.ai.used - before.ai.used).toBe(cost);
  });

  it('/ws from the page: no token on the connection, the auth frame, session.start, a client tool the page runs, an interrupted turn', async () => {
    const token = await gw.token({ user: 'ws-user', budget: BUDGET });
    const before = await serverUsage(token);
    const got = await inPage(
      async ({ token, note }) => {
        const w = window as unknown as PageWindow;
        const from = w.__wsLog.length;
        const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
        const toolCalls: unknown[] = [];
        const session = await gateway.openSession({
          tools: {
            read_note: {
              description: "Read one of the user's notes by its title",
              input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
              run: async (input) => {
                toolCalls.push(input);
                return note;
              },
            },
          },
        });
        const texts1: string[] = [];
        const first = await session.send('What does my note say? [[1> tool:read_note {"title":"Paris trip"}]]', (t) => texts1.push(t));
        const texts2: string[] = [];
        let interruptedAt = -1;
        const second = await session.send('Tell me a long story [[words:300]] [[delay:30]]', (t) => {
          texts2.push(t);
          if (texts2.length === 3) {
            interruptedAt = texts2.join('').length;
            session.interrupt();
          }
        });
        session.close();
        const closed = await session.closed;
        return { sessionId: session.sessionId, toolCalls, first, texts1, second, texts2, interruptedAt, closed, log: w.__wsLog.slice(from) };
      },
      { token, note: NOTE },
    );
    expect(got.log, logs()).toHaveLength(1);
    const [conn] = got.log;
    // Connected without a token: not in the URL, and a browser cannot send a header.
    expect(conn!.url).toBe(gw.websocket!.url);
    expect(got.sessionId).toMatch(UUID);
    expect(conn!.sent.map((f) => f.type)).toEqual(['auth', 'session.start', 'user', 'tool_result', 'user', 'interrupt']);
    expect(conn!.sent[0]).toEqual({ type: 'auth', token });
    expect(conn!.sent[1]).toEqual({
      type: 'session.start',
      options: {
        tools: [
          {
            name: 'read_note',
            description: "Read one of the user's notes by its title",
            input_schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] },
          },
        ],
      },
    });
    const received = conn!.received;
    expect(received[0]).toEqual({ type: 'authenticated', userId: 'ws-user', expiresAt: decodeJwt(token).exp });
    expect(received[1]).toEqual({ type: 'session', sessionId: got.sessionId, resumed: false, state: 'idle', messages: 0 });
    // Turn 1: the model calls the client tool, the page answers it, the model reads the answer.
    const toolUse = received.find((f) => f.type === 'tool_use');
    expect(toolUse).toMatchObject({ type: 'tool_use', subtype: 'client', name: 'read_note', input: { title: 'Paris trip' } });
    expect(got.toolCalls).toEqual([{ title: 'Paris trip' }]);
    expect(conn!.sent[3]).toEqual({ type: 'tool_result', tool_use_id: toolUse!.id, content: NOTE });
    expect(got.first).toMatchObject({
      type: 'result',
      subtype: 'success',
      is_error: false,
      num_turns: 2,
      text: `Tool results: ${NOTE}`,
      sessionId: got.sessionId,
    });
    expect(got.texts1.join('')).toBe(`Calling tools.Tool results: ${NOTE}`);
    // Turn 2: interrupted after three deltas; its text is what was streamed, a prefix of the 300 words.
    expect(got.second).toMatchObject({ type: 'result', subtype: 'interrupted', is_error: true, sessionId: got.sessionId, error: 'The turn was interrupted' });
    const partial = got.second.text as string;
    expect(partial).toBe(got.texts2.join(''));
    expect(partial.length).toBeGreaterThanOrEqual(got.interruptedAt);
    expect(words(300).startsWith(partial)).toBe(true);
    expect(partial.length).toBeLessThan(words(300).length);
    expect(got.closed).toMatchObject({ code: 1000 });
    expect(received.filter((f) => f.type === 'error')).toEqual([]);
    // The turns' results add up to what the user's meter grew by.
    const after = await serverUsage(token);
    expect(after.ai.used - before.ai.used).toBe((got.first.total_cost_microdollars as number) + (got.second.total_cost_microdollars as number));
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
  });

  it('/ws from the page: a bad or expired token in the auth frame → the error frame the page reads, then the close', async () => {
    const expired = await mintToken({
      projectId: gw.projectId,
      userId: 'ws-late',
      secret: gw.secret,
      budget: BUDGET,
      expiresInSeconds: 60,
      now: Date.now() - 3_600_000,
    });
    const got = await inPage(
      async ({ expired }) => {
        const w = window as unknown as PageWindow;
        const attempt = async (token: string) => {
          const from = w.__wsLog.length;
          const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
          let outcome: unknown;
          try {
            await gateway.openSession();
            outcome = 'opened';
          } catch (err) {
            const e = err as { code: string; message: string };
            outcome = { code: e.code, message: e.message };
          }
          // The close follows the error frame.
          for (let i = 0; i < 100 && !w.__wsLog[from]?.close; i++) await new Promise((r) => setTimeout(r, 50));
          return { outcome, log: w.__wsLog.slice(from) };
        };
        return { bad: await attempt('not-a-token'), expired: await attempt(expired) };
      },
      { expired },
    );
    for (const [name, code, message] of [
      ['bad', 'unauthorized', 'Malformed token'],
      ['expired', 'token_expired', 'Token expired'],
    ] as const) {
      const { outcome, log } = got[name];
      expect(outcome, `${name}: ${logs()}`).toEqual({ code, message });
      expect(log).toHaveLength(1);
      expect(log[0]!.sent.map((f) => f.type)).toEqual(['auth']);
      expect(log[0]!.received).toEqual([{ type: 'error', error: code, message }]);
      expect((outcome as { message: string }).message).toBe(log[0]!.received[0]!.message);
      expect(log[0]!.close).toMatchObject({ code: 1000 });
    }
  });

  it('/ws from the page: a frame other than auth first is refused, and no auth within 10 s closes the connection', async () => {
    const got = await inPage(async () => {
      const w = window as unknown as PageWindow;
      const from = w.__wsLog.length;
      const socket = new WebSocket(w.gatewayConfig.sessionsUrl!);
      const closed = new Promise((r) => socket.addEventListener('close', r));
      await Promise.race([new Promise((r) => socket.addEventListener('open', r)), closed]);
      const t0 = performance.now();
      if (socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: 'session.start', options: {} }));
      await closed;
      return { log: w.__wsLog.slice(from), closedAfter: performance.now() - t0 };
    });
    const [conn] = got.log;
    // The session.start is refused (the connection stays), then the deadline's frame and the close.
    expect(conn!.received, logs()).toEqual([
      { type: 'error', error: 'unauthorized', message: 'Send {"type":"auth","token":…} first' },
      {
        type: 'error',
        error: 'unauthorized',
        message: `No "auth" frame within ${AUTH_DEADLINE_SECONDS} s of the connect: the connection is closed. Connect again and send {"type":"auth","token":…} first`,
      },
    ]);
    expect(AUTH_DEADLINE_SECONDS).toBe(10);
    expect(got.closedAfter).toBeGreaterThan(AUTH_DEADLINE_SECONDS * 1000 - 1000);
    expect(got.closedAfter).toBeLessThan(AUTH_DEADLINE_SECONDS * 1000 + 10_000);
    expect(conn!.close).toMatchObject({ code: 1000 });
  }, 40_000);

  it("the gateway's other refusals are readable too: 404 on both URLs, a 400", async () => {
    const token = await gw.token({ user: 'refusals-user', budget: BUDGET });
    const before = await serverUsage(token);
    const got = await inPage(
      async ({ token }) => {
        const w = window as unknown as PageWindow;
        const { channelingUrl, conjureUrl } = w.gatewayConfig;
        const read = async (res: Response) => ({ status: res.status, body: await res.json(), requestId: res.headers.get('request-id') });
        return {
          proxy404: await read(await fetch(`${channelingUrl}/v1/nothing`)),
          conjure404: await read(await fetch(`${conjureUrl}/nothing`)),
          invalid: await read(
            await fetch(`${conjureUrl}/incubate`, {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ message: 'Hi', options: { token } }),
            }),
          ),
        };
      },
      { token },
    );
    expect(got.proxy404, logs()).toEqual({
      status: 404,
      body: { type: 'error', error: { type: 'not_found_error', message: 'No route for GET /v1/nothing' } },
      requestId: expect.stringMatching(REQUEST_ID),
    });
    expect(got.conjure404).toEqual({
      status: 404,
      body: { error: 'not_found', message: 'No route for GET /nothing' },
      requestId: expect.stringMatching(REQUEST_ID),
    });
    expect(got.invalid).toEqual({
      status: 400,
      body: { error: 'missing_idempotency_key', message: expect.stringMatching(/^idempotencyKey is required/) },
      requestId: expect.stringMatching(REQUEST_ID),
    });
    expect(await serverUsage(token)).toEqual(before);
  });

  // API Gateway's own answers carry the request's Origin in the stack (lib/constructs/api.ts, DEFAULT_4XX/5XX gateway
  // responses), and so do the local runtime's stand-ins for them (bin/local/runtime.ts): a page reads them.
  it("API Gateway's own 502 (a 7 MB /incubate body: the integration cannot invoke the function) is readable by the page, as in the stack", async () => {
    const token = await gw.token({ user: 'too-large-user', budget: BUDGET });
    const got = await inPage(
      async ({ token }) => {
        const w = window as unknown as PageWindow;
        const body = JSON.stringify({ message: 'x'.repeat(7_000_000), idempotencyKey: 'too-large', options: { token } });
        try {
          const res = await fetch(`${w.gatewayConfig.conjureUrl}/incubate`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
          return { status: res.status, body: await res.json() };
        } catch (err) {
          return { failed: String(err) };
        }
      },
      { token },
    );
    expect(got).toEqual({ status: 502, body: { message: 'Internal server error' } });
  });

  it('a project restricted to other origins: every route refuses the page with 403, nothing charged or queued', async () => {
    const project = await createProject({ developerId: gw.developerId });
    const set = await cli(['project', 'set-origins', '--project', project.projectId, '--origins', 'http://127.0.0.1:1,https://*.example', '--json']);
    expect(set.stderr).toBe('');
    expect(set.code).toBe(0);
    const token = await mintToken({ projectId: project.projectId, userId: 'walled-user', secret: project.secret, budget: BUDGET, expiresInSeconds: 3600 });
    const before = await serverUsage(token); // a server (no Origin) is unaffected
    const vesselsBefore = await vesselItems();
    const work = workDone();

    expectRefusedEverywhere(await refusedEverywhere(token), `project ${project.projectId} (gateway project set-origins)`);

    // Nothing ran, was charged, held or queued.
    expect(await serverUsage(token)).toEqual(before);
    expect(await vesselItems()).toBe(vesselsBefore);
    expect(workDone()).toEqual(work);
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);

    // The page's origin listed: the same calls go through.
    const allow = await cli(['project', 'set-origins', '--project', project.projectId, '--origins', `https://*.example,${site.origin}`, '--json']);
    expect(allow.code, allow.stderr).toBe(0);
    const seen = await inPage(
      async ({ token }) => {
        const w = window as unknown as PageWindow;
        return w.createGateway({ ...w.gatewayConfig, getToken: async () => token }).usage();
      },
      { token },
    );
    expect(seen).toEqual(before);
  }, 120_000);

  it("a token's origins claim narrows its project's: refused from the page unless it names the page's origin", async () => {
    const mint = (origins: string[]) =>
      mintToken({ projectId: gw.projectId, userId: 'claim-user', secret: gw.secret, budget: BUDGET, expiresInSeconds: 3600, origins });
    const elsewhere = await mint(['https://app.example']);
    const here = await mint([site.origin]);
    const before = await serverUsage(here);
    const vesselsBefore = await vesselItems();
    const work = workDone();
    expectRefusedEverywhere(await refusedEverywhere(elsewhere), 'this token (its origins claim)');
    expect(await serverUsage(elsewhere)).toEqual({ ...before }); // same user, same window
    expect(await vesselItems()).toBe(vesselsBefore);
    expect(workDone()).toEqual(work);
    const seen = await inPage(
      async ({ token }) => {
        const w = window as unknown as PageWindow;
        return w.createGateway({ ...w.gatewayConfig, getToken: async () => token }).usage();
      },
      { token: here },
    );
    expect(seen).toEqual(before);
  });

  it('a text/plain, form or multipart POST to /prompt, /incubate or /incubate/batch (simple requests, no preflight) → 415, nothing charged', async () => {
    const token = await gw.token({ user: 'simple-user', budget: BUDGET });
    const before = await serverUsage(token);
    const vesselsBefore = await vesselItems();
    const work = workDone();
    const started = gw.activity().http.started;
    const got = await inPage(
      async ({ token }) => {
        const w = window as unknown as PageWindow;
        const base = w.gatewayConfig.promptUrl;
        const conjure = w.gatewayConfig.conjureUrl;
        const json = JSON.stringify({ message: 'Hello', idempotencyKey: 'simple', items: [], options: { token } });
        const form = new URLSearchParams({ message: 'Hello', token });
        const multipart = new FormData();
        multipart.set('message', 'Hello');
        multipart.set('token', token);
        const cases: [string, string, BodyInit, Record<string, string>][] = [
          ['/prompt text/plain', `${base}/prompt`, json, { 'content-type': 'text/plain' }],
          ['/prompt default (text/plain;charset=UTF-8)', `${base}/prompt`, json, {}],
          ['/prompt form', `${base}/prompt`, form, {}],
          ['/prompt multipart', `${base}/prompt`, multipart, {}],
          ['/incubate text/plain', `${conjure}/incubate`, json, { 'content-type': 'text/plain' }],
          ['/incubate form', `${conjure}/incubate`, form, {}],
          ['/incubate/batch text/plain', `${conjure}/incubate/batch`, json, { 'content-type': 'text/plain' }],
        ];
        const out: Record<string, unknown> = {};
        for (const [name, url, body, headers] of cases) {
          const res = await fetch(url, { method: 'POST', body, headers });
          out[name] = { status: res.status, body: await res.json(), requestId: res.headers.get('request-id') };
        }
        // And as an attacking page would send it, not caring to read the answer.
        const opaque = await fetch(`${conjure}/incubate`, { method: 'POST', mode: 'no-cors', body: json, headers: { 'content-type': 'text/plain' } });
        out.opaque = { type: opaque.type, status: opaque.status };
        return { out, count: cases.length + 1 };
      },
      { token },
    );
    for (const [name, res] of Object.entries(got.out)) {
      if (name === 'opaque') continue;
      expect(res, `${name}: ${logs()}`).toMatchObject({
        status: 415,
        body: { error: 'unsupported_media_type', message: expect.stringMatching(/application\/json/) },
      });
    }
    expect(got.out.opaque).toEqual({ type: 'opaque', status: 0 });
    // One request each, no preflight, and nothing done.
    expect(gw.activity().http.started - started).toBe(got.count);
    expect(await serverUsage(token)).toEqual(before);
    expect(await vesselItems()).toBe(vesselsBefore);
    expect(workDone()).toEqual(work);
  });

  it("the example page's own form: its backend's token, each of the three ways, the answer and the spend shown", async () => {
    const marker = 'From the form';
    for (const way of ['sdk', 'prompt', 'ws'] as const) {
      const before = await serverUsage(backendToken);
      await page.fill('#question', `${marker} ${way} [[words:5]] [[delay:40]]`);
      await page.click(`button[value="${way}"]`);
      await page.waitForSelector('#answer[data-state="done"], #answer[data-state="failed"]', { timeout: 20_000 });
      expect(await page.textContent('#answer'), `${way}: ${logs()}`).toBe(words(5));
      expect(await page.getAttribute('#answer', 'data-state')).toBe('done');
      const after = await serverUsage(backendToken);
      expect(after.ai.used).toBeGreaterThan(before.ai.used);
      // The page read /usage as soon as the answer ended: the call's charge may be settled by then, or still held
      // (an answer is delivered before its settlement is written).
      const shown = await page.textContent('#usage');
      expect([before, after].map((u) => `Spent ${u.ai.used} of ${BUDGET.ai} microdollars today.`)).toContain(shown);
      // Reset for the next way (the state attribute is set again by the next submit).
      await inPage(() => document.querySelector('#answer')!.removeAttribute('data-state'));
    }
    expect(callsSaying(marker)).toHaveLength(3);
  }, 60_000);
});

/** Every route from the page with a token its origin is not allowed for: what the page could read of each answer. */
async function refusedEverywhere(token: string) {
  return inPage(
    async ({ token, model }) => {
      const w = window as unknown as PageWindow;
      const gateway = w.createGateway({ ...w.gatewayConfig, getToken: async () => token });
      const caught = async (run: () => Promise<unknown>) => {
        try {
          await run();
          return 'answered';
        } catch (err) {
          return w.__describeError(err, gateway.anthropic);
        }
      };
      const from = w.__wsLog.length;
      const result = {
        messages: await caught(() => gateway.anthropic.messages.create({ model, max_tokens: 16, messages: [{ role: 'user', content: 'Hello' }] })),
        stream: await caught(() => gateway.anthropic.messages.stream({ model, max_tokens: 16, messages: [{ role: 'user', content: 'Hello' }] }).finalMessage()),
        models: await caught(() => gateway.anthropic.models.list()),
        prompt: await caught(() => gateway.prompt('Hello')),
        promptSse: await caught(() => gateway.streamPrompt('Hello', {}, () => {})),
        usage: await caught(() => gateway.usage()),
        incubate: await caught(() => gateway.incubate('Hello', { idempotencyKey: 'walled' })),
        ws: await caught(() => gateway.openSession()),
      };
      // The token in the URL instead: the upgrade itself is refused, and a browser shows the page nothing but 1006.
      const query = new WebSocket(`${w.gatewayConfig.sessionsUrl}?token=${encodeURIComponent(token)}`);
      await new Promise((r) => query.addEventListener('close', r));
      for (let i = 0; i < 100 && !w.__wsLog[from]?.close; i++) await new Promise((r) => setTimeout(r, 50));
      return { ...result, wsLog: w.__wsLog.slice(from) };
    },
    { token, model: MODEL },
  );
}

/** `by`: the list that refuses, as the message names it. */
function expectRefusedEverywhere(got: Awaited<ReturnType<typeof refusedEverywhere>>, by: string): void {
  const message = `Requests from origin "${site.origin}" are not allowed by ${by}`;
  for (const route of ['messages', 'stream', 'models'] as const) {
    expect(got[route], `${route}: ${logs()}`).toMatchObject({
      name: 'PermissionDeniedError',
      status: 403,
      body: { type: 'error', error: { type: 'permission_error', message } },
      requestId: expect.stringMatching(REQUEST_ID),
    });
  }
  for (const route of ['prompt', 'promptSse', 'usage', 'incubate'] as const) {
    expect(got[route], `${route}: ${logs()}`).toMatchObject({
      name: 'GatewayError',
      status: 403,
      code: 'origin_not_allowed',
      body: { error: 'origin_not_allowed', message },
      requestId: expect.stringMatching(REQUEST_ID),
    });
  }
  expect(got.ws).toMatchObject({ name: 'GatewayError', code: 'origin_not_allowed', message });
  expect(got.wsLog).toHaveLength(2);
  expect(got.wsLog[0]!.sent.map((f) => f.type)).toEqual(['auth']);
  expect(got.wsLog[0]!.received).toEqual([{ type: 'error', error: 'origin_not_allowed', message }]);
  expect(got.wsLog[0]!.close).toMatchObject({ code: 1000 });
  expect(got.wsLog[1]).toMatchObject({ sent: [], received: [], close: { code: 1006 } });
}
