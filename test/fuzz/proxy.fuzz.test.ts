/**
 * Property-based fuzzing of the proxy (the channeling URL: /v1/messages, /v1/messages/count_tokens, /v1/models[/id],
 * and /v1/chat/completions with the bodies it passes through to OpenAI and OpenRouter) and of the routing in front of
 * both apps, over real HTTP against one whole local gateway (simulated upstreams, DynamoDB Local). Every generated
 * request is judged by test/support/fuzz-oracle.ts from the bytes sent:
 *
 *   - never a 5xx (the simulated upstream is never told to fail: generated text holds no `[[` directive);
 *   - the exact status the contract gives (or, where it leaves the order of two refusals open, one of them);
 *   - errors in the route's envelope (proxy: Anthropic's; /v1/chat/completions: exactly OpenAI's
 *     {error:{message, type, param, code}} with x-should-retry; conjure: {error, message?}) and a request-id on every
 *     answer;
 *   - after every request of a valid caller: no reservation left (openHolds 0, reserved 0) and the ledger moved by
 *     exactly the charge (0 for a refusal; tokens × price for an answer — for a passed-through stream whose client
 *     did not ask for usage, the simulated upstream's own count of what it sent); at the end no hold anywhere in the
 *     table.
 *
 * Runs in CI with a fixed seed: in `npm test` at half its runs (soakRuns), in `npm run test:soak` at three times them. Larger local run — about 80,000 requests,
 * 10–15 minutes on 2 cores (FUZZ_RUNS=3 took 95 s for 12,000):
 *
 *   FUZZ_RUNS=20 npx vitest run test/fuzz
 *   FUZZ_SEED=$RANDOM FUZZ_RUNS=20 npx vitest run test/fuzz      # a new seed each time; a failure prints its seed
 *
 * A failure prints `replay: FUZZ_SEED=… FUZZ_PATH=… npx vitest run test/fuzz -t '<property>'`, which reruns just the
 * shrunk counterexample, and the failing request as a curl command.
 */
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countWords, estimateInputTokens } from '../../bin/local/upstreams/script.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import {
  conjureEnvelopeProblem,
  headerBytes,
  NODE_MAX_HEADER_BYTES,
  parserAnswerProblems,
  proxyEnvelopeProblem,
  responseProblems,
  sseEvents,
} from '../support/envelope.ts';
import { checkProperty, FUZZ_SCALE, FUZZ_SEED, fuzzTimeout, soakRuns } from '../support/fuzz.ts';
import {
  chatChargeOf,
  CUSTOM_PRICES,
  expectFor,
  isPassthrough,
  isPriced,
  type ChatUsage,
  type Expectation,
  type FuzzRequestSpec,
} from '../support/fuzz-oracle.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { gatewayLimits } from '../support/limits.ts';
import { RawConn } from '../support/raw-conn.ts';
import { curlFor, rawClient, type RawClient, type RawRequest, type RawResponse } from '../support/raw-http.ts';
import {
  BIG_BUDGET,
  bodyArb,
  CHAT_MODELS,
  chatBodyArb,
  credentialsArb,
  goodTokenArb,
  hostArb,
  methodArb,
  MODELS,
  nested,
  pathArb,
  smallBody,
  tokenArb,
  badTokenArb,
  type Credentials,
  type FuzzContext,
  type GoodToken,
} from './arbitraries.ts';

let gw: TestGateway;
let ctx: FuzzContext;
let client: RawClient;
let started = 0;

/** Microdollars per token for the Claude models the fuzz names (Anthropic's list prices, $/Mtok = µ$/token). */
const CLAUDE_RATES: Record<string, { input: number; output: number }> = {
  'claude-sonnet-4-6': { input: 3, output: 15 },
  'claude-haiku-4-5': { input: 1, output: 5 },
};

beforeAll(async () => {
  started = performance.now();
  // Projects are not edited during the run, so the gateway may cache them like a deployed one does (each fuzz
  // request then costs what it costs in production: no registry read per request).
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '600' } });
  // Keys for both translated providers, and one custom-priced OpenRouter model, so generated requests reach every
  // provider path; the oracle knows these (CUSTOM_PRICES).
  await gw.setProviderKey('openai', 'sk-fuzz-openai');
  await gw.setProviderKey('openrouter', 'sk-fuzz-openrouter');
  for (const [model, price] of Object.entries(CUSTOM_PRICES)) await gw.setPricing(model, price);
  const limits = await gatewayLimits();
  client = rawClient(gw.url);

  // The models GET /v1/models/{id} must find: whatever the list says (its correctness is tested elsewhere).
  const token = await gw.token({ user: 'fz-setup', budget: BIG_BUDGET });
  const list = await client.send({ method: 'GET', path: '/v1/models?limit=1000', headers: { 'x-api-key': token } });
  expect(list.status, list.text).toBe(200);
  const catalog = (JSON.parse(list.text) as { data: { id: string }[] }).data.map((m) => m.id);
  expect(catalog.length).toBeGreaterThan(0);
  for (const m of MODELS.claude) expect(isPriced(m), `${m} must be priced`).toBe(true);
  expect(isPriced(MODELS.claudeUnpriced), `${MODELS.claudeUnpriced} must have no price`).toBe(false);
  for (const m of [...CHAT_MODELS.openai, ...CHAT_MODELS.openrouter]) expect(isPriced(m), `${m} must be priced`).toBe(true);
  for (const m of CHAT_MODELS.unpriced) expect(isPriced(m), `${m} must have no price`).toBe(false);
  ctx = { projectId: gw.projectId, secret: gw.secret, catalog, limits };
  console.log(`[fuzz] proxy: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_SCALE}; limits ${JSON.stringify(limits)}`);
});

afterAll(async () => {
  console.log(`[fuzz] proxy: outcomes ${JSON.stringify(Object.fromEntries(Object.entries(tally).sort()))}`);
  console.log(`[fuzz] proxy: ${client?.count ?? 0} requests in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  client?.close();
  await gw?.stop();
});

// ---------------------------------------------------------------------------------------------------------------
// One request, judged
// ---------------------------------------------------------------------------------------------------------------

interface Case extends FuzzRequestSpec {
  host?: string;
  /** The Content-Type to send with the body (none without one). */
  contentType?: string;
  why?: string;
}

/** Statuses seen per app, printed at the end: a fuzz whose requests all end the same way tests little. */
const tally: Record<string, number> = {};

/** What each valid caller has been charged so far, per the answers the fuzz received. */
const charged = new Map<string, number>();

function toRaw(c: Case): RawRequest {
  const headers: Record<string, string> = { 'anthropic-version': '2023-06-01', ...c.creds.headers };
  if (c.host !== undefined) headers.host = c.host;
  if (c.contentType !== undefined && c.body !== undefined) headers['content-type'] = c.contentType;
  return { method: c.method, path: c.path, headers, body: c.body };
}

/** Sends one generated request and throws (with a curl repro) on anything the contract does not allow. */
async function exercise(c: Case): Promise<void> {
  const raw = toRaw(c);
  // Judged by the Content-Type actually sent: a request without a body carries none.
  const exp = expectFor({ ...c, contentType: raw.headers?.['content-type'] }, ctx);
  const context = () =>
    `\n  expected: ${exp.statuses.join('|')} (${exp.why})\n  credentials: ${c.creds.why}${c.why ? `\n  body: ${c.why}` : ''}\n  repro: ${curlFor(gw.url, raw)}`;
  let res: RawResponse;
  try {
    res = await client.send(raw);
  } catch (err) {
    throw new Error(`no answer: ${(err as Error).message}${context()}`);
  }
  const key = `${exp.route ?? 'no route'} ${res.status}`;
  tally[key] = (tally[key] ?? 0) + 1;
  const problems: string[] = [];
  // Headers near Node's limit may be refused by its parser (431) before the gateway sees the request.
  const parserRefusal = res.status === 431 && headerBytes(raw.method, raw.path, raw.headers ?? {}) > NODE_MAX_HEADER_BYTES - 2048;
  if (res.status >= 500) problems.push(`${res.status}: a 5xx for a client's request`);
  else if (!exp.statuses.includes(res.status) && !parserRefusal) problems.push(`status ${res.status}`);
  problems.push(...(parserRefusal ? parserAnswerProblems(res) : responseProblems(res, exp.app, c.method)));
  if (exp.app === 'openai' && res.status >= 400 && c.method !== 'HEAD' && !parserRefusal) problems.push(...openaiErrorProblems(res));
  if (res.status === 200 && exp.route && c.method !== 'HEAD') problems.push(...successProblems(res, exp, c));
  if (exp.caller && !parserRefusal && (exp.route === 'messages' || exp.route === 'count_tokens' || exp.route === 'chat_completions'))
    problems.push(...(await ledgerProblems(exp, res)));
  if (problems.length) throw new Error(`${problems.join('\n')}\n  answer: ${res.status} ${res.text.slice(0, 600)}${context()}`);
}

function successProblems(res: RawResponse, exp: Expectation, c: Case): string[] {
  const problems: string[] = [];
  const json = () => JSON.parse(res.text) as Record<string, unknown>;
  try {
    switch (exp.route) {
      case 'models': {
        const body = json();
        if (!Array.isArray(body.data) || typeof body.has_more !== 'boolean') problems.push('not a model list');
        break;
      }
      case 'model': {
        const id = decodeURIComponent(/^\/+v1\/+models\/+([^/?]+)/i.exec(c.path)?.[1] ?? '');
        if (json().id !== id) problems.push(`GET /v1/models/{id} answered model ${JSON.stringify(json().id)} for ${JSON.stringify(id)}`);
        break;
      }
      case 'openapi':
        if (json().openapi !== '3.1.0') problems.push(`GET /openapi.json answered openapi ${JSON.stringify(json().openapi)}`);
        break;
      case 'count_tokens':
        if (typeof json().input_tokens !== 'number') problems.push('count_tokens answer without input_tokens');
        break;
      case 'chat_completions':
        if (isPassthrough(exp.body)) problems.push(...passthroughAnswerProblems(res, exp.body!));
        break;
      case 'messages': {
        if (exp.body?.stream === true) {
          if (!String(res.headers['content-type']).startsWith('text/event-stream')) problems.push(`stream answered as ${res.headers['content-type']}`);
          const events = sseEvents(res.text);
          if (events.some((e) => e.event === 'error')) problems.push('the stream carries an error event though the upstream was healthy');
          if (events.at(-1)?.event !== 'message_stop') problems.push(`the stream does not end with message_stop (last: ${events.at(-1)?.event})`);
        } else {
          const body = json();
          if (body.type !== 'message') problems.push(`200 without a message: type ${JSON.stringify(body.type)}`);
          if (!/^\d+$/.test(String(res.headers['x-gateway-cost-microdollars']))) problems.push('no x-gateway-cost-microdollars header');
        }
        break;
      }
    }
  } catch (err) {
    problems.push(`200 answer unreadable: ${(err as Error).message}`);
  }
  return problems;
}

/**
 * The whole of OpenAI's error envelope, as its SDKs read it: exactly `{error:{message, type, param, code}}`, a message
 * and a type, `param` and `code` each a string or null, and the retry hint the SDKs read before their own rules.
 */
function openaiErrorProblems(res: RawResponse): string[] {
  const problems: string[] = [];
  let body: { error?: Record<string, unknown> } | undefined;
  try {
    body = JSON.parse(res.text) as typeof body;
  } catch {
    return []; // reported by responseProblems
  }
  const error = body?.error;
  if (!body || Object.keys(body).join() !== 'error' || !error) return ['the error body has keys other than `error`'];
  const keys = Object.keys(error).sort().join();
  if (keys !== 'code,message,param,type') problems.push(`error keys are ${keys}, not code,message,param,type`);
  if (typeof error.message !== 'string' || error.message.trim() === '') problems.push('error.message is not a non-empty string');
  if (typeof error.type !== 'string' || error.type === '') problems.push('error.type is not a non-empty string');
  for (const k of ['param', 'code']) if (error[k] !== null && typeof error[k] !== 'string') problems.push(`error.${k} is ${JSON.stringify(error[k])}`);
  if (!['true', 'false'].includes(String(res.headers['x-should-retry']))) problems.push(`x-should-retry is ${res.headers['x-should-retry']}`);
  return problems;
}

/** The `data:` payloads of a passed-through stream, `[DONE]` as the string it is. */
const chunksOf = (res: RawResponse) => sseEvents(res.text).map((e) => e.data);
const includesUsage = (body: Record<string, unknown>) =>
  body.stream === true && typeof body.stream_options === 'object' && (body.stream_options as { include_usage?: unknown } | null)?.include_usage === true;
const choicesOf = (body: Record<string, unknown>) => (typeof body.n === 'number' ? body.n : 1);

/**
 * A 200 of a passed-through body (docs/openai.md, "OpenAI and OpenRouter models"): JSON with its n choices and its cost
 * header; or a stream of chunks for each choice ending `[DONE]`, without an error chunk, whose usage chunk is there
 * exactly when the client asked for it.
 */
function passthroughAnswerProblems(res: RawResponse, body: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const choices = choicesOf(body);
  if (body.stream !== true) {
    const completion = JSON.parse(res.text) as { object?: unknown; choices?: unknown[]; usage?: unknown };
    if (completion.object !== 'chat.completion') problems.push(`200 without a chat.completion: object ${JSON.stringify(completion.object)}`);
    if (completion.choices?.length !== choices) problems.push(`${completion.choices?.length} choices for n = ${choices}`);
    if (!/^\d+$/.test(String(res.headers['x-gateway-cost-microdollars']))) problems.push('no x-gateway-cost-microdollars header');
    return problems;
  }
  if (!String(res.headers['content-type']).startsWith('text/event-stream')) problems.push(`stream answered as ${res.headers['content-type']}`);
  const data = chunksOf(res);
  if (data.at(-1) !== '[DONE]') problems.push(`the stream does not end with [DONE] (last: ${JSON.stringify(data.at(-1)).slice(0, 200)})`);
  const chunks = data.filter((d): d is Record<string, unknown> => typeof d === 'object' && d !== null);
  if (chunks.some((c) => c.error !== undefined)) problems.push('the stream carries an error chunk though the upstream was healthy');
  const usage = chunks.filter((c) => c.usage !== undefined && c.usage !== null);
  if (includesUsage(body) && usage.length !== 1) problems.push(`${usage.length} usage chunks, though the client asked for usage`);
  if (!includesUsage(body) && chunks.some((c) => 'usage' in c)) problems.push('a usage the client did not ask for reached it');
  const indexes = new Set(chunks.flatMap((c) => (c.choices as { index: number }[] | undefined)?.map((ch) => ch.index) ?? []));
  if (indexes.size !== choices) problems.push(`chunks for choices ${[...indexes].join(',')}, n = ${choices}`);
  return problems;
}

/**
 * What a passed-through answer is charged, from the answer alone: its usage × price (JSON, or a stream's usage chunk);
 * for a stream whose client did not ask for usage, the simulated upstream's own count of what it sent — its prompt
 * count of the body, one output token per word of each choice's content (bin/local/upstreams/script.ts).
 */
function passthroughCharge(res: RawResponse, body: Record<string, unknown>): number {
  if (body.stream !== true) {
    const computed = chatChargeOf(body, (JSON.parse(res.text) as { usage: ChatUsage }).usage);
    return computed === Number(res.headers['x-gateway-cost-microdollars']) ? computed : Number.NaN;
  }
  const chunks = chunksOf(res).filter((d): d is Record<string, unknown> => typeof d === 'object' && d !== null);
  if (includesUsage(body)) return chatChargeOf(body, chunks.find((c) => c.usage)!.usage as ChatUsage);
  const content = new Map<number, string>();
  for (const c of chunks) {
    for (const ch of (c.choices ?? []) as { index: number; delta?: { content?: unknown } }[]) {
      if (typeof ch.delta?.content === 'string') content.set(ch.index, (content.get(ch.index) ?? '') + ch.delta.content);
    }
  }
  const words = [...content.values()].reduce((sum, text) => sum + countWords(text), 0);
  return chatChargeOf(body, { prompt_tokens: estimateInputTokens(body), completion_tokens: words });
}

/** The charge a successful answer implies, when the fuzz can compute it from the usage the answer carries. */
function expectedCharge(res: RawResponse, exp: Expectation): number | undefined {
  // A Claude model's answer on the OpenAI-compatible route is priced by its own tests (test/openai-ingress); here its
  // charge only moves the caller's baseline, so the next answer's check starts from the ledger as it is.
  if (exp.route === 'chat_completions' && res.status === 200) return isPassthrough(exp.body) ? passthroughCharge(res, exp.body!) : undefined;
  if (exp.route !== 'messages' || res.status !== 200) return 0;
  const model = exp.body?.model as string;
  const rates = CLAUDE_RATES[model];
  if (exp.body?.stream === true) {
    if (!rates) return undefined; // a translated stream: its price is the catalog's business
    let input = 0;
    let output = 0;
    for (const e of sseEvents(res.text)) {
      const d = e.data as { type?: string; message?: { usage?: { input_tokens?: number } }; usage?: { output_tokens?: number } };
      if (d?.type === 'message_start') input = d.message?.usage?.input_tokens ?? 0;
      if (d?.type === 'message_delta') output = d.usage?.output_tokens ?? 0;
    }
    return input * rates.input + output * rates.output;
  }
  const header = Number(res.headers['x-gateway-cost-microdollars']);
  if (rates) {
    const usage = (JSON.parse(res.text) as { usage: { input_tokens: number; output_tokens: number } }).usage;
    const computed = usage.input_tokens * rates.input + usage.output_tokens * rates.output;
    if (computed !== header) return Number.NaN; // reported as a mismatch by the caller
    return computed;
  }
  return header;
}

async function ledgerProblems(exp: Expectation, res: RawResponse): Promise<string[]> {
  const caller = exp.caller!;
  // The answer is delivered before its settlement is written: read the ledger once the invocation has returned.
  await gw.invocationsDone();
  const usage = await readUsage({ projectId: ctx.projectId, userId: caller.sub, budget: caller.budget });
  const problems: string[] = [];
  if (usage.openHolds !== 0 || usage.reserved.ai !== 0)
    problems.push(`a hold is left for ${caller.sub}: openHolds ${usage.openHolds}, reserved ${usage.reserved.ai} µ$`);
  const before = charged.get(caller.sub) ?? 0;
  const charge = expectedCharge(res, exp);
  if (Number.isNaN(charge))
    problems.push(`x-gateway-cost-microdollars ${res.headers['x-gateway-cost-microdollars']} is not the price of the usage in the answer`);
  else if (charge === undefined) {
    if (usage.used.ai < before) problems.push(`used went down: ${before} → ${usage.used.ai}`);
  } else if (usage.used.ai !== before + charge) {
    problems.push(
      `ledger used ${usage.used.ai} µ$ for ${caller.sub}, expected ${before} + ${charge} (${res.status === 200 ? 'the answer’s price' : 'a refusal costs nothing'})`,
    );
  }
  charged.set(caller.sub, usage.used.ai);
  return problems;
}

// ---------------------------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------------------------

/** Credentials mostly valid, so most generated bodies get past authentication and reach validation or the upstream. */
const mostlyGood = (): fc.Arbitrary<Credentials> =>
  fc.oneof(
    {
      weight: 4,
      arbitrary: goodTokenArb(ctx).map((t): Credentials => ({ headers: { 'x-api-key': t.token }, proxy: t, usage: undefined, why: `x-api-key: ${t.why}` })),
    },
    {
      weight: 3,
      arbitrary: goodTokenArb(ctx).map((t): Credentials => ({ headers: { authorization: `Bearer ${t.token}` }, proxy: t, usage: t, why: `Bearer: ${t.why}` })),
    },
    { weight: 1, arbitrary: credentialsArb(ctx) },
  );

/**
 * Mostly JSON, sometimes what a page may send cross-origin without a preflight: /prompt and /incubate answer those
 * 415 (DESIGN §10); the proxy reads its body whatever the Content-Type says.
 */
const contentTypeArb = fc.oneof(
  { weight: 6, arbitrary: fc.constant('application/json') },
  { weight: 1, arbitrary: fc.constantFrom('application/json; charset=utf-8', 'Application/JSON') },
  {
    weight: 2,
    arbitrary: fc.constantFrom('text/plain;charset=UTF-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x', 'text/json'),
  },
);

const chatPath = fc.oneof(
  { weight: 8, arbitrary: fc.constant('/v1/chat/completions') },
  { weight: 1, arbitrary: fc.constantFrom('//v1/chat/completions', '/V1/chat/completions', '/v1/chat/completions/', '/v1//chat//completions') },
);

const messagesPath = fc.oneof(
  { weight: 6, arbitrary: fc.constant('/v1/messages') },
  { weight: 1, arbitrary: fc.constantFrom('//v1/messages', '/V1/messages', '/v1/messages/', '/v1//messages', '///V1///messages//', '/v1/messages?beta=true') },
);

describe('proxy fuzz', () => {
  it(
    'routing: any method, path, Host header and credentials',
    async () => {
      const post = fc.option(fc.constantFrom(smallBody(), smallBody('hi', 'claude-haiku-4-5', 3), '{}', 'not json'), { nil: undefined });
      await checkProperty(
        'routing: any method, path, Host header and credentials',
        fc.asyncProperty(methodArb, pathArb(ctx), hostArb, credentialsArb(ctx), post, contentTypeArb, async (method, path, host, creds, body, contentType) => {
          const sendsBody = !['GET', 'HEAD'].includes(method) && body !== undefined;
          await exercise({ method, path, host, creds, body: sendsBody ? Buffer.from(body) : undefined, contentType });
        }),
        soakRuns(1200),
      );
    },
    fuzzTimeout(60_000),
  );

  it(
    'messages: generated and mutated bodies',
    async () => {
      await checkProperty(
        'messages: generated and mutated bodies',
        fc.asyncProperty(messagesPath, hostArb, mostlyGood(), bodyArb(ctx), async (path, host, creds, body) => {
          await exercise({ method: 'POST', path, host, creds, body: body.bytes, contentType: body.contentType, why: body.why });
        }),
        soakRuns(500),
      );
    },
    fuzzTimeout(90_000),
  );

  it(
    'chat completions: generated and mutated bodies for OpenAI and OpenRouter models (passed through)',
    async () => {
      await checkProperty(
        'chat completions: generated and mutated bodies for OpenAI and OpenRouter models (passed through)',
        fc.asyncProperty(chatPath, mostlyGood(), chatBodyArb(ctx), async (path, creds, body) => {
          await exercise({ method: 'POST', path, creds, body: body.bytes, contentType: body.contentType, why: body.why });
        }),
        soakRuns(400),
      );
    },
    fuzzTimeout(90_000),
  );

  it(
    'count_tokens: generated and mutated bodies',
    async () => {
      await checkProperty(
        'count_tokens: generated and mutated bodies',
        fc.asyncProperty(
          fc.constantFrom('/v1/messages/count_tokens', '//v1/messages/count_tokens', '/V1/messages/count_tokens/'),
          mostlyGood(),
          bodyArb(ctx),
          async (path, creds, body) => {
            await exercise({ method: 'POST', path, creds, body: body.bytes, contentType: body.contentType, why: body.why });
          },
        ),
        soakRuns(250),
      );
    },
    fuzzTimeout(30_000),
  );

  it(
    'tokens: every malformed token is a 401 in the proxy envelope',
    async () => {
      const tokens = tokenArb(ctx);
      await checkProperty(
        'tokens: every malformed token is a 401 in the proxy envelope',
        fc.asyncProperty(
          fc.constantFrom(
            'GET /v1/models?limit=2',
            'GET /v1/models?limit=2',
            'POST /v1/messages',
            'POST /v1/messages/count_tokens',
            'GET /v1/models/claude-sonnet-4-6',
          ),
          credentialsArb(ctx, tokens),
          async (route, creds) => {
            const [method, path] = route.split(' ') as [string, string];
            await exercise({
              method,
              path,
              creds,
              body: method === 'POST' ? Buffer.from(smallBody('hi', 'claude-sonnet-4-6', 4)) : undefined,
              contentType: 'application/json',
            });
          },
        ),
        soakRuns(400),
      );
    },
    fuzzTimeout(30_000),
  );
});

// ---------------------------------------------------------------------------------------------------------------
// The brief's named cases, each on its own: limits, methods, paths, hosts, credentials
// ---------------------------------------------------------------------------------------------------------------

describe('proxy limits and edge cases', () => {
  /** `good` goes through exercise() (its ledger is followed); `direct` is for hand-written sends that may be charged. */
  let good: GoodToken;
  let direct: GoodToken;
  beforeAll(async () => {
    good = fc.sample(goodTokenArb(ctx, fc.constant(BIG_BUDGET), fc.constant('fz-edge')), { numRuns: 1, seed: FUZZ_SEED })[0]!;
    direct = fc.sample(goodTokenArb(ctx, fc.constant(BIG_BUDGET), fc.constant('fz-direct')), { numRuns: 1, seed: FUZZ_SEED })[0]!;
  });
  const asGood = (): Credentials => ({ headers: { 'x-api-key': good.token }, proxy: good, why: good.why });
  const post = (path: string, body: string | Buffer, extra: Partial<Case> = {}) =>
    exercise({ method: 'POST', path, creds: asGood(), body: Buffer.isBuffer(body) ? body : Buffer.from(body), contentType: 'application/json', ...extra });

  /** A valid Messages body padded (in a passthrough field) to exactly `bytes` bytes. */
  function paddedBody(bytes: number): Buffer {
    const head = `{"model":"claude-sonnet-4-6","max_tokens":8,"messages":[{"role":"user","content":"pad"}],"x_pad":"`;
    const tail = '"}';
    return Buffer.from(head + 'p'.repeat(bytes - head.length - tail.length) + tail);
  }

  // A function URL takes an event of at most 6 MB (the body with the event around it): a body that fits is served, one
  // over it gets Lambda's own 413 before the handler runs, as in AWS (bin/local/limits.ts, docs/local.md).
  it('a body whose event fits 6 MB is served; one byte over the body limit is 413 from Lambda', async () => {
    const max = ctx.limits.maxBodyBytes;
    await post('/v1/messages', paddedBody(max - 64 * 1024));
    await oversized('6 MB + 1 byte with content-length', paddedBody(max + 1), false);
  }, 60_000);

  /**
   * Sends an oversized upload on a client of its own (a connection it breaks must not fail the next test); the 413
   * must reach the client even though it is still sending when the gateway answers.
   */
  async function oversized(label: string, body: Buffer, chunked: boolean): Promise<void> {
    const own = rawClient(gw.url);
    let res: RawResponse;
    try {
      res = await own.send({ method: 'POST', path: '/v1/messages', headers: { 'x-api-key': direct.token, 'content-type': 'application/json' }, body, chunked });
    } catch (err) {
      // The gateway answered and closed while the upload was in flight; unread data makes the close a TCP reset,
      // which can destroy the 413 before the client reads it. A lingering close (drain, then close) keeps it.
      throw new Error(`${label}: no 413 reached the client (${(err as Error).message})`);
    } finally {
      own.close();
    }
    expect(res.status, `${label}: ${res.text.slice(0, 300)}`).toBe(413);
    expect(JSON.parse(res.text), label).toEqual({ Message: 'Request must be smaller than 6291456 bytes for the InvokeFunction operation' });
  }

  // The next three repeat their upload because the failures they catch are races (seen in 1 of 3 to 1 of 4 tries).
  it('an oversized chunked upload (no content-length) gets its 413, every time (8 tries)', async () => {
    for (let i = 1; i <= 4; i++) await oversized(`6 MB + 1 byte, chunked, try ${i}`, paddedBody(ctx.limits.maxBodyBytes + 1), true);
    for (let i = 1; i <= 4; i++) await oversized(`20 MB, chunked, try ${i}`, paddedBody(20 * 1024 * 1024), true);
  }, 60_000);

  it('a 20 MB upload with content-length gets its 413, every time (8 tries)', async () => {
    for (let i = 1; i <= 8; i++) await oversized(`20 MB with content-length, try ${i}`, paddedBody(20 * 1024 * 1024), false);
  }, 60_000);

  it('after a 413 on a keep-alive connection, the next request on it is answered (8 tries)', async () => {
    // A 413 that says `Connection: keep-alive` must leave the connection usable; one the gateway closes afterwards
    // must say `Connection: close`, or a keep-alive client (every SDK) loses its next request ("socket hang up").
    for (let i = 1; i <= 8; i++) {
      const own = rawClient(gw.url);
      try {
        const big = await own.send({
          method: 'POST',
          path: '/v1/messages',
          headers: { 'x-api-key': direct.token },
          body: paddedBody(ctx.limits.maxBodyBytes + 1),
        });
        expect(big.status).toBe(413);
        const next = await own.send({ method: 'GET', path: '/v1/models?limit=1', headers: { 'x-api-key': direct.token } }).catch((err: Error) => err);
        expect(next instanceof Error ? `${next.message} (the 413 said connection: ${big.headers.connection})` : next.status, `try ${i}`).toBe(200);
      } finally {
        own.close();
      }
    }
  }, 60_000);

  it(`JSON nested to the depth limit is served; one level deeper is 400; 100,000 levels is 400`, async () => {
    const max = ctx.limits.maxJsonDepth;
    // The body object itself is level 1, so the extra field nests max - 1 levels.
    const at = (depth: number) =>
      `{"model":"claude-sonnet-4-6","max_tokens":8,"messages":[{"role":"user","content":"deep"}],"x_deep":${nested(depth - 1, 'array')}}`;
    await post('/v1/messages', at(max));
    await post('/v1/messages', at(max + 1));
    await post('/v1/messages', at(100_000));
    await post('/v1/messages', `{"model":"claude-sonnet-4-6","max_tokens":8,"messages":[],"x_deep":${nested(100_000, 'object')}}`);
    const res = await client.send({ method: 'POST', path: '/v1/messages', headers: { 'x-api-key': direct.token }, body: at(max + 1) });
    expect(res.status).toBe(400);
  }, 30_000);

  it('max_tokens at the documented ceiling is served; above it (or absurd) is 400', async () => {
    const ceiling = ctx.limits.maxTokensCeiling;
    expect(ceiling, `no max_tokens ceiling is exported (${ctx.limits.source.maxTokensCeiling})`).toBeTypeOf('number');
    const body = (mt: string) => `{"model":"claude-sonnet-4-6","max_tokens":${mt},"messages":[{"role":"user","content":"hi"}]}`;
    await post('/v1/messages', body(String(ceiling)));
    for (const mt of [String(ceiling! + 1), '1e308', '9007199254740993', '1e21']) {
      await post('/v1/messages', body(mt));
      const res = await client.send({ method: 'POST', path: '/v1/messages', headers: { 'x-api-key': direct.token }, body: body(mt) });
      expect(res.status, `max_tokens ${mt}`).toBe(400);
    }
  });

  it('unknown methods are 405 in the route’s envelope', async () => {
    for (const method of ['TRACE', 'PROPFIND', 'MKCOL', 'PUT', 'DELETE', 'PATCH']) {
      for (const path of ['/v1/messages', '/v1/models', '/usage']) {
        const res = await client.send({ method, path, headers: { 'x-api-key': direct.token } });
        expect(res.status, `${method} ${path}`).toBe(405);
        expect(responseProblems(res, path === '/usage' ? 'conjure' : 'proxy', method), `${method} ${path}`).toEqual([]);
      }
    }
  });

  it('malformed percent-encoding in a path is 400 or 404 in the envelope, never 502', async () => {
    for (const path of ['/v1/models/%FF', '/v1/models/%', '/v1/models/%E0%A4', '/v1/messages%FF', '/usage%', '/usage%FF', '/%zz']) {
      const res = await client.send({ method: 'GET', path, headers: { 'x-api-key': direct.token, authorization: `Bearer ${direct.token}` } });
      expect([400, 404], `${path} → ${res.status} ${res.text}`).toContain(res.status);
      expect(responseProblems(res, path.startsWith('/v1/') ? 'proxy' : 'conjure', 'GET'), path).toEqual([]);
    }
  });

  it('//v1/messages and /V1/messages route as /v1/messages', async () => {
    for (const path of ['//v1/messages', '/V1/messages', '//V1//messages']) {
      const res = await client.send({ method: 'POST', path, headers: { 'x-api-key': direct.token, 'content-type': 'application/json' }, body: smallBody() });
      expect(res.status, `${path}: ${res.text}`).toBe(200);
      expect(JSON.parse(res.text)).toMatchObject({ type: 'message' });
    }
  });

  it('the Host header never affects routing', async () => {
    for (const host of ['a b', '[::1', '@', 'evil.example/x', 'evil.example/x/v1', '', 'x:1:2', '%zz']) {
      await post('/v1/messages', smallBody(), { host });
      const usage = await client.send({ method: 'GET', path: '/usage', headers: { host, authorization: `Bearer ${good.token}` } });
      expect(usage.status, `Host ${JSON.stringify(host)}: ${usage.text}`).toBe(200);
    }
  });

  it('x-api-key and Authorization carrying different tokens is 401', async () => {
    const other = fc.sample(goodTokenArb(ctx, fc.constant(BIG_BUDGET), fc.constant('fz-other')), { numRuns: 1, seed: FUZZ_SEED })[0]!;
    const res = await client.send({
      method: 'POST',
      path: '/v1/messages',
      headers: { 'x-api-key': direct.token, authorization: `Bearer ${other.token}` },
      body: smallBody(),
    });
    expect(res.status).toBe(401);
    expect(responseProblems(res, 'proxy', 'POST')).toEqual([]);
  });

  /** Raw requests fetch and node:http will not send; each closes its connection after the answer. */
  const RAW: { name: string; request: string; status: number; app: 'proxy' | 'conjure' | 'parser' }[] = [
    // docs/contract.md, Limits: "A request Node's HTTP parser cannot read at all gets a JSON 400 and a closed connection."
    { name: 'a method Node does not know (FOO)', request: 'FOO /v1/messages HTTP/1.1\r\nHost: x\r\n\r\n', status: 400, app: 'parser' },
    { name: 'no method at all', request: 'GET\r\n\r\n', status: 400, app: 'parser' },
    { name: 'a relative request-target', request: 'GET v1/models HTTP/1.1\r\nHost: x\r\n\r\n', status: 400, app: 'parser' },
    // Routing never reads Host, so HTTP/1.1 without one is served like any request (here: no token → 401).
    { name: 'HTTP/1.1 without a Host header', request: 'GET /v1/models HTTP/1.1\r\nConnection: close\r\n\r\n', status: 401, app: 'proxy' },
    // docs/contract.md, the proxy's error table: 405 for "a method HTTP cannot route (TRACE, CONNECT)".
    { name: 'CONNECT', request: 'CONNECT /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', status: 405, app: 'proxy' },
    { name: 'TRACE', request: 'TRACE /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', status: 405, app: 'proxy' },
    // The Host header, and the authority of an absolute-form target, never affect routing.
    {
      name: 'an absolute-form target naming another host',
      request: 'GET http://evil.example/v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n',
      status: 401,
      app: 'proxy',
    },
    { name: 'HTTP/1.0 without Host', request: 'GET /v1/models HTTP/1.0\r\n\r\n', status: 401, app: 'proxy' },
    {
      name: 'duplicate x-api-key headers',
      request: 'GET /v1/models HTTP/1.1\r\nHost: x\r\nx-api-key: a\r\nx-api-key: b\r\nConnection: close\r\n\r\n',
      status: 401,
      app: 'proxy',
    },
    { name: 'an asterisk target', request: 'GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', status: 404, app: 'conjure' },
  ];
  for (const c of RAW) {
    it(`raw request: ${c.name} → ${c.status}`, async () => {
      const conn = await RawConn.open(gw.url);
      await conn.write(c.request);
      await conn.waitFor('the server to answer and close', () => conn.closed, 5000).catch(() => undefined);
      conn.destroy();
      expect(conn.status, `${JSON.stringify(c.request)}: no HTTP answer before the connection closed`).toBe(c.status);
      let body: unknown;
      expect(() => (body = JSON.parse(conn.body)), `the ${c.status} answer's body is not JSON: ${JSON.stringify(conn.body)}`).not.toThrow();
      if (c.app === 'proxy') expect(proxyEnvelopeProblem(c.status, body)).toBeUndefined();
      if (c.app === 'conjure') expect(conjureEnvelopeProblem(body)).toBeUndefined();
      if (c.app !== 'parser') expect(conn.headers['request-id']).toMatch(/^req_gw_[0-9a-f]{24}$/);
      // And the gateway still serves.
      expect((await client.send({ method: 'GET', path: '/health' })).status).toBe(200);
    });
  }

  it('every kind of malformed token, in either header, is a 401 (100 samples)', async () => {
    // One of every bad-token kind, deterministically, in both places: the fuzz samples them; this names them all.
    const samples = fc.sample(badTokenArb(ctx), { numRuns: 100, seed: FUZZ_SEED });
    for (const t of samples) {
      for (const headers of [{ 'x-api-key': t.token }, { authorization: `Bearer ${t.token}` }] as Record<string, string>[]) {
        await exercise({
          method: 'POST',
          path: '/v1/messages',
          creds: { headers, why: t.why },
          body: Buffer.from(smallBody()),
          contentType: 'application/json',
        });
      }
    }
  }, 60_000);
});

describe('after the whole run', () => {
  it('no reservation is left anywhere in the usage table', async () => {
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
  });
});
