/**
 * Property-based fuzzing of what a user may put into a run (docs/contract.md, "What a run may carry"), over real HTTP
 * against one whole local gateway. Every body is a valid `/prompt`, `/incubate` or `/incubate/batch` body from a
 * valid token — zero budgets included, since these checks come before admission — changed by at most one generated
 * hazard: an `outputFormat.schema` over a documented limit (keywords, depth, bytes), a remote `$ref`, a pattern the
 * linear-time engine cannot run, a key that is not plain data (`__proto__`, `constructor`, `prototype`), `__` in an
 * MCP server name, a vessel larger than its record may be, an idempotency key with a lone surrogate. A hazard gets
 * its documented 4xx in the conjure envelope with a message naming the field; a body without one never does; a body
 * sent without a JSON Content-Type is the 415 whatever it holds; no answer is a 5xx; nothing is reserved, and nothing
 * stored, for a refused body.
 *
 * The bodies without a hazard sit right at the limits (the largest schema, the deepest, the largest vessel), so a
 * limit checked one step too early fails here as surely as one checked too late.
 *
 * Runs in `npm test` with the fixed seed of test/support/fuzz.ts; FUZZ_RUNS and FUZZ_SEED scale it as the other fuzz
 * files (`FUZZ_RUNS=10 npx vitest run test/fuzz/runs.fuzz.test.ts`).
 */
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { responseProblems } from '../support/envelope.ts';
import { isJsonContentType } from '../support/fuzz-oracle.ts';
import { checkProperty, FUZZ_SCALE, FUZZ_SEED, fuzzTimeout, runs } from '../support/fuzz.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { windowsWithHolds } from '../support/holds.ts';
import { curlFor, rawClient, type RawClient, type RawRequest } from '../support/raw-http.ts';
import { SCHEMA_LIMITS } from '../../lambdas/agent/schema-limits.ts';
import { MAX_VESSEL_REQUEST_BYTES } from '../../lambdas/vessels/request.ts';

let gw: TestGateway;
let client: RawClient;
let started = 0;

beforeAll(async () => {
  started = performance.now();
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '600' } });
  client = rawClient(gw.url);
  console.log(`[fuzz] runs: FUZZ_SEED=${FUZZ_SEED} FUZZ_RUNS=${FUZZ_SCALE}`);
});

afterAll(async () => {
  console.log(`[fuzz] runs: outcomes ${JSON.stringify(tally)}`);
  console.log(`[fuzz] runs: ${client?.count ?? 0} requests in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  client?.close();
  await gw?.stop();
});

const tally: Record<string, number> = {};
const count = (key: string) => (tally[key] = (tally[key] ?? 0) + 1);
/** Vessels the gateway said it queued (202, not replayed): the table must hold exactly these at the end. */
const queued = new Set<string>();

type Route = '/prompt' | '/incubate' | '/incubate/batch';

/**
 * One body's change. `json` edits the body as JSON text (the only way to send `__proto__` as an own key or a lone
 * surrogate); `expect` is the documented answer, or undefined for a body that stays valid.
 */
interface Hazard {
  why: string;
  routes: readonly Route[];
  edit: (run: RunBody) => void;
  json?: (text: string) => string;
  expect?: { status: 400 | 413; error: string; mentions: RegExp };
  /** An item's own field (message, key): in a batch it fails that item alone (docs/incubate.md, "Batch"). */
  item?: true;
}

interface RunBody {
  message: string;
  idempotencyKey?: string;
  options: Record<string, unknown>;
}

// ---------------------------------------------------------------------------------------------------------------
// Schemas at and over the limits

const { maxKeywords, maxDepth, maxBytes } = SCHEMA_LIMITS;

/** An object schema with `n` string properties: 1 + 2n keywords (`type` at the top, `type` per property, …). */
function wideSchema(properties: number): Record<string, unknown> {
  const props: Record<string, unknown> = {};
  for (let i = 0; i < properties; i++) props[`p${i}`] = { type: 'string' };
  return { type: 'object', properties: props };
}

/** Objects nested `depth` levels deep as JSON (the schema's own nesting, which is what the limit counts). */
function deepSchema(depth: number): Record<string, unknown> {
  let schema: Record<string, unknown> = { type: 'string' };
  for (let i = 1; i < depth; i++) schema = { type: 'array', items: schema };
  return schema;
}

const atLimits: fc.Arbitrary<Hazard> = fc.constantFrom<Hazard>(
  {
    why: 'a schema at the keyword limit',
    routes: ['/prompt', '/incubate', '/incubate/batch'],
    edit: (b) => {
      b.options.outputFormat = { type: 'json_schema', schema: wideSchema(Math.floor((maxKeywords - 2) / 2)) };
    },
  },
  {
    why: 'a schema at the depth limit',
    routes: ['/prompt', '/incubate'],
    edit: (b) => {
      b.options.outputFormat = { type: 'json_schema', schema: deepSchema(maxDepth) };
    },
  },
  {
    why: 'a schema with local $refs, an $id and linear patterns',
    routes: ['/prompt', '/incubate', '/incubate/batch'],
    edit: (b) => {
      b.options.outputFormat = {
        type: 'json_schema',
        schema: {
          $id: 'https://example.com/answer.json',
          $defs: { name: { type: 'string', pattern: '^[A-Z][a-z]+( [A-Z][a-z]+)*$' } },
          type: 'object',
          properties: { who: { $ref: '#/$defs/name' }, also: { anyOf: [{ $ref: '#/$defs/name' }, { type: 'null' }] } },
          patternProperties: { '^x-[a-z]+$': { type: 'integer' } },
        },
      };
    },
  },
  {
    why: 'MCP server and header names with single underscores',
    // Not /prompt: a run with budget would reach for the server; a vessel a day ahead is only stored.
    routes: ['/incubate', '/incubate/batch'],
    edit: (b) => {
      b.options.mcpServers = { my_docs: { type: 'http', url: 'https://mcp.example.com/mcp', headers: { 'x-api_key': 'k' } } };
    },
  },
  {
    why: 'a vessel right at its size limit',
    routes: ['/incubate', '/incubate/batch'],
    edit: (b) => {
      b.message = 'm'.repeat(MAX_VESSEL_REQUEST_BYTES - 4096);
    },
  },
);

const overLimits: fc.Arbitrary<Hazard> = fc.oneof(
  fc.integer({ min: 1, max: 2 * maxKeywords }).map(
    (extra): Hazard => ({
      why: `a schema ${extra} keywords over the limit`,
      routes: ['/prompt', '/incubate', '/incubate/batch'],
      edit: (b) => {
        b.options.outputFormat = { type: 'json_schema', schema: wideSchema(Math.ceil((maxKeywords + extra) / 2)) };
      },
      expect: { status: 400, error: 'invalid_request', mentions: /outputFormat\.schema.*keyword/i },
    }),
  ),
  // Up to 60 past it: the body's own nesting limit (100 levels, docs/contract.md "Limits") is a step further out.
  fc.integer({ min: 1, max: 60 }).map(
    (extra): Hazard => ({
      why: `a schema nested ${extra} levels past the limit`,
      routes: ['/prompt', '/incubate'],
      edit: (b) => {
        b.options.outputFormat = { type: 'json_schema', schema: deepSchema(maxDepth + extra) };
      },
      expect: { status: 400, error: 'invalid_request', mentions: /outputFormat\.schema.*(deep|depth|nest)/i },
    }),
  ),
  fc.constant<Hazard>({
    why: 'a schema over the byte limit',
    routes: ['/prompt', '/incubate'],
    edit: (b) => {
      b.options.outputFormat = { type: 'json_schema', schema: { type: 'string', description: 'd'.repeat(maxBytes) } };
    },
    expect: { status: 400, error: 'invalid_request', mentions: /outputFormat\.schema.*bytes/i },
  }),
  fc.constantFrom('https://evil.example/s.json', 'other.json#/a', '//evil.example/s', 'urn:x:y', 'http://169.254.169.254/latest').map(
    (ref): Hazard => ({
      why: `a remote $ref ${ref}`,
      routes: ['/prompt', '/incubate', '/incubate/batch'],
      edit: (b) => {
        b.options.outputFormat = { type: 'json_schema', schema: { type: 'object', properties: { a: { $ref: ref } } } };
      },
      expect: { status: 400, error: 'invalid_request', mentions: /outputFormat\.schema.*\$ref/ },
    }),
  ),
  fc.constantFrom('(a)\\1', '^(?=a)a$', '(?<!x)y', '^(?!b).*$', '(?<n>a)\\k<n>').map(
    (pattern): Hazard => ({
      why: `a pattern the linear-time engine cannot run: ${pattern}`,
      routes: ['/prompt', '/incubate'],
      edit: (b) => {
        b.options.outputFormat = { type: 'json_schema', schema: { type: 'string', pattern } };
      },
      expect: { status: 400, error: 'invalid_request', mentions: /outputFormat\.schema.*pattern/ },
    }),
  ),
  fc.constantFrom('__proto__', 'constructor', 'prototype').map(
    (key): Hazard => ({
      why: `an MCP server named ${key}`,
      routes: ['/prompt', '/incubate'],
      edit: (b) => {
        b.options.mcpServers = { KEYHERE: { type: 'http', url: 'https://mcp.example.com/mcp' } };
      },
      json: (text) => text.replace('"KEYHERE"', JSON.stringify(key)),
      expect: { status: 400, error: 'invalid_request', mentions: /mcpServers/ },
    }),
  ),
  fc.constantFrom('__proto__', 'constructor', 'prototype').map(
    (key): Hazard => ({
      why: `a tool header named ${key}`,
      routes: ['/prompt', '/incubate', '/incubate/batch'],
      edit: (b) => {
        b.options.tools = [{ name: 'lookup', input_schema: { type: 'object' }, url: 'https://tools.example.com/lookup', headers: { KEYHERE: 'v' } }];
      },
      json: (text) => text.replace('"KEYHERE"', JSON.stringify(key)),
      expect: { status: 400, error: 'invalid_request', mentions: /headers/ },
    }),
  ),
  fc.constant<Hazard>({
    why: 'a __proto__ key inside outputFormat.schema',
    routes: ['/prompt', '/incubate'],
    edit: (b) => {
      b.options.outputFormat = { type: 'json_schema', schema: { type: 'object', properties: { KEYHERE: { type: 'string' } } } };
    },
    json: (text) => text.replace('"KEYHERE"', '"__proto__"'),
    expect: { status: 400, error: 'invalid_request', mentions: /__proto__/ },
  }),
  fc.constantFrom('a__b', '__a', 'a__', 'x____y').map(
    (name): Hazard => ({
      why: `an MCP server named ${name}`,
      routes: ['/prompt', '/incubate', '/incubate/batch'],
      edit: (b) => {
        b.options.mcpServers = { [name]: { type: 'http', url: 'https://mcp.example.com/mcp' } };
      },
      expect: { status: 400, error: 'invalid_request', mentions: /mcpServers/ },
    }),
  ),
  fc.constantFrom('message', 'systemPrompt').map(
    (field): Hazard => ({
      why: `a vessel whose ${field} is over the record's limit`,
      routes: ['/incubate', '/incubate/batch'],
      edit: (b) => {
        const big = 'x'.repeat(MAX_VESSEL_REQUEST_BYTES + 1);
        if (field === 'message') b.message = big;
        else b.options.systemPrompt = big;
      },
      expect: { status: 413, error: 'request_too_large', mentions: /bytes/ },
      ...(field === 'message' ? { item: true as const } : {}),
    }),
  ),
  fc.constantFrom('\\ud800', '\\udfff', 'a\\ud83d', '\\ude00b').map(
    (lone): Hazard => ({
      why: `an idempotency key with a lone surrogate ${lone}`,
      routes: ['/incubate', '/incubate/batch'],
      edit: (b) => {
        b.idempotencyKey = `${b.idempotencyKey}-LONE`;
      },
      json: (text) => text.replace('-LONE"', `-${lone}"`),
      expect: { status: 400, error: 'invalid_request', mentions: /idempotencyKey/ },
      item: true,
    }),
  ),
);

const hazardArb = fc.oneof({ weight: 1, arbitrary: fc.constant(undefined) }, { weight: 2, arbitrary: atLimits }, { weight: 6, arbitrary: overLimits });

let sample = 0;

/**
 * The Content-Type sent: mostly JSON (parameters and letter case vary), sometimes none or one a page may send
 * cross-origin without a preflight — a 415 whatever the body holds (DESIGN §10; docs/api.md, "Conventions shared by
 * all endpoints").
 */
const contentTypeArb = fc.oneof(
  { weight: 8, arbitrary: fc.constantFrom('application/json', 'application/json; charset=utf-8', 'Application/JSON', 'APPLICATION/JSON;charset=UTF-8') },
  {
    weight: 1,
    arbitrary: fc.constantFrom<string | undefined>(
      undefined,
      'text/plain;charset=UTF-8',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=----x',
      'text/json',
      'application/json-patch+json',
    ),
  },
);

async function exercise(route: Route, hazard: Hazard | undefined, budget: { ai: number; compute: number }, contentType: string | undefined): Promise<void> {
  const n = ++sample;
  const token = await gw.token({ user: `rf-${n % 7}`, budget: { ...budget, window: 'lifetime' } });
  const run: RunBody = { message: 'Say hello.', options: { token, maxTurns: 1 } };
  if (route !== '/prompt') run.idempotencyKey = `rf-${FUZZ_SEED}-${n}`;
  hazard?.edit(run);
  // Vessels are scheduled a day ahead: queued and stored, never run while the fuzz lasts.
  const first = { message: 'first', idempotencyKey: `rf-${FUZZ_SEED}-${n}-0` };
  const sent =
    route === '/prompt'
      ? run
      : route === '/incubate'
        ? { ...run, ttl: 86_400 }
        : { items: [first, { message: run.message, idempotencyKey: run.idempotencyKey }], options: run.options, ttl: 86_400 };
  let text = JSON.stringify(sent);
  if (hazard?.json) text = hazard.json(text);
  const raw: RawRequest = { method: 'POST', path: route, headers: contentType === undefined ? {} : { 'content-type': contentType }, body: text };
  const res = await client.send(raw, 30_000);
  const shown = text.length > 2000 ? `${text.slice(0, 2000)}…` : text;
  const context = `\n  ${route} with ${hazard?.why ?? 'no hazard'}, Content-Type ${contentType ?? 'none'}\n  answer: ${res.status} ${res.text.slice(0, 300)}\n  repro: ${curlFor(gw.url, { ...raw, body: shown })}`;
  const problems = responseProblems(res, 'conjure', 'POST');
  if (res.status >= 500) problems.push(`a 5xx for a client's body`);
  const body = safeJson(res.text) as Record<string, unknown> | undefined;
  const items = (body?.items ?? []) as { status?: string; vesselId?: string; error?: { code?: string; message?: string } }[];
  for (const item of items) if (item.status === 'queued' && item.vesselId) queued.add(item.vesselId);
  if (res.status === 202 && typeof body?.vesselId === 'string') queued.add(body.vesselId);
  const expected = hazard?.expect;
  if (!isJsonContentType(contentType)) {
    // Refused before the body is read: whatever hazard it holds, the answer is the 415 (and nothing is kept).
    count(`${route} not JSON ${res.status}`);
    const message = `Content-Type must be application/json, got ${contentType === undefined ? 'none' : JSON.stringify(contentType)}`;
    if (res.status !== 415) problems.push(`status ${res.status}, expected 415`);
    if (body?.error !== 'unsupported_media_type' || body.message !== message)
      problems.push(`body ${res.text.slice(0, 300)}, expected {"error":"unsupported_media_type","message":${JSON.stringify(message)}}`);
  } else if (expected && route === '/incubate/batch' && hazard?.item) {
    // The hazard is the second item's: it fails alone, the first is queued.
    count(`${route} item hazard ${res.status} ${items[1]?.status}`);
    if (res.status !== 202) problems.push(`status ${res.status}, expected 202 with the second item failed`);
    if (items[0]?.status !== 'queued') problems.push(`the first item is ${JSON.stringify(items[0])}, expected queued`);
    if (items[1]?.status !== 'failed' || items[1].error?.code !== expected.error)
      problems.push(`the second item is ${JSON.stringify(items[1])}, expected failed ${expected.error}`);
    if (!expected.mentions.test(String(items[1]?.error?.message ?? ''))) problems.push(`the item's message does not name the field (${expected.mentions})`);
  } else if (expected) {
    count(`${route} hazard ${res.status}`);
    if (res.status !== expected.status) problems.push(`status ${res.status}, expected ${expected.status}`);
    if (body?.error !== expected.error) problems.push(`error ${JSON.stringify(body?.error)}, expected ${expected.error}`);
    if (!expected.mentions.test(String(body?.message ?? ''))) problems.push(`message does not name the field (${expected.mentions})`);
  } else {
    count(`${route} valid ${res.status}`);
    // Valid: queued (202), run (200), or refused for the budget (429) — never refused as the caller's mistake.
    if (![200, 202, 429].includes(res.status)) problems.push(`status ${res.status} for a valid body, expected 200, 202 or 429`);
    if (items.some((i) => i.status !== 'queued')) problems.push(`a batch item failed: ${JSON.stringify(items)}`);
  }
  if (problems.length) throw new Error(`${problems.join('\n')}${context}`);
}

function safeJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

describe('runs fuzz', () => {
  it(
    'runs: every hazard gets its documented 4xx, every body at the limits is served',
    async () => {
      await checkProperty(
        'runs: every hazard gets its documented 4xx, every body at the limits is served',
        fc.asyncProperty(
          hazardArb,
          fc.constantFrom<Route>('/prompt', '/incubate', '/incubate/batch'),
          // Zero budgets too: every check of the body comes before admission.
          fc.record({ ai: fc.constantFrom(0, 1, 10_000_000), compute: fc.constantFrom(0, 3600) }),
          contentTypeArb,
          async (hazard, route, budget, contentType) => {
            // A hazard meant for other routes leaves this route's body as it is.
            await exercise(route, hazard?.routes.includes(route) ? hazard : undefined, budget, contentType);
          },
        ),
        runs(300),
      );
    },
    fuzzTimeout(120_000),
  );
});

describe('after the whole run', () => {
  it('no reservation is left, and the vessels table holds exactly the vessels answered 202', async () => {
    await gw.invocationsDone();
    expect(await windowsWithHolds(gw.tables.USAGE_TABLE!)).toEqual([]);
    const stored = new Set<string>();
    let start: Record<string, unknown> | undefined;
    do {
      const page = await documentClient().send(new ScanCommand({ TableName: gw.tables.VESSELS_TABLE!, ExclusiveStartKey: start, ConsistentRead: true }));
      for (const item of page.Items ?? []) if (typeof item.vesselId === 'string' && typeof item.status === 'string') stored.add(item.vesselId);
      start = page.LastEvaluatedKey;
    } while (start);
    expect([...stored].sort()).toEqual([...queued].sort());
  });
});
