import { createServer, type IncomingMessage, type Server } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * Every billed dimension, end to end (DESIGN §14): an upstream (a small inline mock, DESIGN §15) answers with a usage
 * object carrying iterations (compaction and advisor), the 5-minute / 1-hour cache-write split per iteration, web
 * searches and fetches and US-only inference; the proxy (JSON and SSE) and the agent runtime (/prompt) charge exactly
 * the provider's bill, and the request is forwarded verbatim (unknown fields and betas included).
 *
 * The usage shape is the SDK's BetaUsage (@anthropic-ai/sdk 1.12: `iterations` of BetaCompactionIterationUsage /
 * BetaMessageIterationUsage / BetaAdvisorMessageIterationUsage, `cache_creation` = BetaCacheCreation,
 * `server_tool_use` = BetaServerToolUsage, `inference_geo`, `speed`), with the compaction entry outside the top-level
 * counts as https://platform.claude.com/docs/en/build-with-claude/compaction documents, and the advisor pairing of
 * https://platform.claude.com/docs/en/agents-and-tools/tool-use/advisor-tool.
 */
const MODEL = 'claude-sonnet-4-6';
const iteration = (type: string, model: string | null, input: number, output: number, w5m = 0, w1h = 0) => ({
  type,
  ...(type === 'compaction' ? {} : { model }),
  input_tokens: input,
  output_tokens: output,
  cache_read_input_tokens: 0,
  cache_creation_input_tokens: w5m + w1h,
  cache_creation: { ephemeral_5m_input_tokens: w5m, ephemeral_1h_input_tokens: w1h },
});
const USAGE = {
  input_tokens: 250,
  output_tokens: 50,
  cache_read_input_tokens: 0,
  cache_creation_input_tokens: 1_000,
  cache_creation: { ephemeral_5m_input_tokens: 400, ephemeral_1h_input_tokens: 600 },
  server_tool_use: { web_search_requests: 1, web_fetch_requests: 2 },
  service_tier: 'standard',
  inference_geo: 'us',
  speed: 'standard',
  fallback_credit: null,
  iterations: [
    iteration('compaction', null, 2_000, 300),
    iteration('message', MODEL, 100, 20, 400, 600),
    iteration('advisor_message', 'claude-opus-4-6', 500, 200),
    iteration('message', MODEL, 150, 30),
  ],
};
/**
 * Catalog rates: claude-sonnet-4-6 $3 / $15 / 5-min write $3.75 / 1-h write $6; claude-opus-4-6 $5 / $25.
 * compaction 2,000 × 3 + 300 × 15 = 10,500; message 100 × 3 + 20 × 15 + 400 × 3.75 + 600 × 6 = 5,700; advisor
 * 500 × 5 + 200 × 25 = 7,500; message 150 × 3 + 30 × 15 = 900: 24,600 µ$ of tokens × 1.1 (US-only) = 27,060, plus
 * one web search (10,000 µ$), web fetches free: 37,060 µ$. The top-level counts alone would have been 7,350.
 */
const EXPECTED = 37_060;

let gw: TestGateway;
let upstream: Server;
const received: { raw: string; beta: string | undefined }[] = [];

const readAll = async (req: IncomingMessage) => {
  let raw = '';
  for await (const chunk of req) raw += chunk;
  return raw;
};

beforeAll(async () => {
  upstream = createServer(async (req, res) => {
    const raw = await readAll(req);
    received.push({ raw, beta: req.headers['anthropic-beta'] as string | undefined });
    const body = JSON.parse(raw) as { stream?: boolean };
    const content = [{ type: 'text', text: 'Advised answer.' }];
    const message = { id: 'msg_dims', type: 'message', role: 'assistant', model: MODEL, content, stop_reason: 'end_turn', stop_sequence: null, usage: USAGE };
    if (!body.stream) {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(message));
      return;
    }
    // As Anthropic streams it: message_start with the usage so far, message_delta with the final, cumulative usage.
    const startUsage = { ...USAGE, output_tokens: 1, iterations: null, server_tool_use: null };
    const events = [
      { type: 'message_start', message: { ...message, content: [], stop_reason: null, usage: startUsage } },
      { type: 'content_block_start', index: 0, content_block: { type: 'text', text: '' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'text_delta', text: 'Advised answer.' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { ...USAGE, input_tokens: null } },
      { type: 'message_stop' },
    ];
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.end(events.map((e) => `event: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`).join(''));
  });
  await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
  gw = await startTestGateway({ env: { ANTHROPIC_BASE_URL: `http://127.0.0.1:${(upstream.address() as { port: number }).port}` } });
});
afterAll(async () => {
  await gw?.stop();
  upstream?.closeAllConnections();
  await new Promise((r) => upstream?.close(r));
});

let seq = 0;
async function user() {
  const id = `dims-${++seq}`;
  const budget: BudgetClaim = { ai: 10_000_000, compute: 3_600, window: 'day' };
  const token = await gw.token({ user: id, budget });
  return {
    token,
    usage: async () => {
      await gw.invocationsDone();
      return readUsage({ projectId: gw.projectId, userId: id, budget });
    },
  };
}

const request = (stream: boolean) => ({
  model: MODEL,
  max_tokens: 1_000,
  stream,
  messages: [{ role: 'user', content: [{ type: 'text', text: `Plan this. ${'context '.repeat(400)}`, cache_control: { type: 'ephemeral', ttl: '1h' } }] }],
  tools: [
    { type: 'advisor_20260301', name: 'advisor', model: 'claude-opus-4-6', max_uses: 1, max_tokens: 1_024 },
    { type: 'web_search_20250305', name: 'web_search', max_uses: 1 },
    { type: 'web_fetch_20250910', name: 'web_fetch' },
  ],
  context_management: { edits: [{ type: 'compact_20260112' }] },
  inference_geo: 'us',
  some_future_field: { kept: true },
});
const BETAS = 'advisor-tool-2026-03-01,compact-2026-01-12,web-fetch-2025-09-10,some-future-beta-2099-01-01';

function post(token: string, raw: string) {
  return fetch(`${gw.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': token, 'content-type': 'application/json', 'anthropic-version': '2023-06-01', 'anthropic-beta': BETAS },
    body: raw,
  });
}

describe('the proxy charges the provider’s whole bill', () => {
  it('JSON: iterations at their models, cache-write split, web search and fetch, US-only — and the request forwarded verbatim', async () => {
    const u = await user();
    const raw = JSON.stringify(request(false));
    received.length = 0;
    const res = await post(u.token, raw);
    const answer = (await res.json()) as { usage: unknown };
    expect(res.status).toBe(200);
    expect(answer.usage).toEqual(USAGE);
    expect(Number(res.headers.get('x-gateway-cost-microdollars'))).toBe(EXPECTED);
    expect((await u.usage()).used.ai).toBe(EXPECTED);
    // Verbatim: the same bytes (every bounded tool already has its bounds; a free web fetch needs none) and betas.
    expect(received).toEqual([{ raw, beta: BETAS }]);
  });

  it('SSE: the same charge from message_start + message_delta, the stream passed through', async () => {
    const u = await user();
    received.length = 0;
    const res = await post(u.token, JSON.stringify(request(true)));
    const text = await res.text();
    expect(res.status).toBe(200);
    expect(text).toContain('"advisor_message"');
    const usage = await u.usage();
    expect(usage.used.ai).toBe(EXPECTED);
    expect(usage.openHolds).toBe(0);
  });

  it('an advisor tool without max_uses / max_tokens gets the gateway’s bounds upstream (the reservation counts them)', async () => {
    const u = await user();
    const body = { ...request(false), tools: [{ type: 'advisor_20260301', name: 'advisor', model: 'claude-opus-4-6' }] };
    received.length = 0;
    const res = await post(u.token, JSON.stringify(body));
    expect(res.status).toBe(200);
    await res.text();
    const forwarded = JSON.parse(received[0]!.raw) as { tools: unknown[]; some_future_field: unknown };
    expect(forwarded.tools).toEqual([{ type: 'advisor_20260301', name: 'advisor', model: 'claude-opus-4-6', max_uses: 3, max_tokens: 4096 }]);
    expect(forwarded.some_future_field).toEqual({ kept: true });
  });
});

describe('the agent runtime (/prompt) charges the same bill', () => {
  it('one turn whose model call reports the dimensions: total_cost_microdollars is the bill, and the ledger’s delta', async () => {
    const u = await user();
    const res = await fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'Plan this.', options: { token: u.token, model: MODEL } }),
    });
    const text = await res.text();
    expect(res.status, text).toBe(200);
    const answer = JSON.parse(text) as { result: { subtype: string; total_cost_microdollars: number } };
    expect(answer.result.subtype).toBe('success');
    expect(answer.result.total_cost_microdollars).toBe(EXPECTED);
    expect((await u.usage()).used.ai).toBe(EXPECTED);
  });
});
