import { createServer, type Server } from 'node:http';
import Anthropic, { APIError } from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { estimateInputTokens } from '../../bin/local/upstreams/script.ts';
import { LocalResponseStream } from '../../bin/local/awslambda-shim.ts';
import { functionUrlEvent, lambdaContext, readBody } from '../../bin/local/events.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

const TIMEOUT_MS = 700;
const claim: BudgetClaim = { ai: 10_000_000, compute: 0, window: 'day' };
let gw: TestGateway;

/** The ledger once every invocation under way has returned: an answer is delivered before its settlement is written. */
async function ledgerNow(...args: Parameters<typeof readUsage>): ReturnType<typeof readUsage> {
  await gw.invocationsDone();
  return readUsage(...args);
}
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway({ env: { UPSTREAM_TIMEOUT_MS: String(TIMEOUT_MS) } });
});
afterAll(() => gw?.stop());

/** A fresh user per case, so each case's ledger window starts empty. */
async function user() {
  const id = `fault-${++seq}`;
  return { id, client: gw.client(await gw.token({ user: id, budget: claim })), usage: () => ledgerNow({ projectId: gw.projectId, userId: id, budget: claim }) };
}

async function settledUsage(usage: () => ReturnType<typeof readUsage>) {
  for (let i = 0; i < 50; i++) {
    const u = await usage();
    if (u.openHolds === 0) return u;
    await new Promise((r) => setTimeout(r, 50));
  }
  return usage();
}

/** Streams `params` from `baseUrl` as user `userId`, reads until `deltas` text deltas arrived, then hangs up. */
async function disconnectAfter(baseUrl: string, userId: string, params: object, deltas: number): Promise<void> {
  const controller = new AbortController();
  const res = await fetch(`${baseUrl}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': await gw.token({ user: userId, budget: claim }), 'content-type': 'application/json' },
    body: JSON.stringify({ ...params, stream: true }),
    signal: controller.signal,
  });
  const reader = res.body!.getReader();
  let seen = '';
  while ((seen.match(/content_block_delta/g) ?? []).length < deltas) seen += new TextDecoder().decode((await reader.read()).value);
  controller.abort();
}

const body = (content: string, max_tokens = 100) => ({ model: 'claude-sonnet-4-6', max_tokens, messages: [{ role: 'user' as const, content }] });

describe('upstream failures', () => {
  it('upstream 500 → 500 api_error, nothing charged, no reservation left', async () => {
    const u = await user();
    const err = (await u.client.messages.create(body('[[error:500]]')).catch((e: unknown) => e)) as APIError;
    expect(err).toBeInstanceOf(Anthropic.InternalServerError);
    expect(err.status).toBe(500);
    expect((err.error as { error: { type: string } }).error.type).toBe('api_error');
    const usage = await u.usage();
    expect(usage.used.ai).toBe(0);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it('upstream 529 and 429 pass through with their own type', async () => {
    const u = await user();
    const overloaded = (await u.client.messages.create(body('[[error:529]]')).catch((e: unknown) => e)) as APIError;
    expect(overloaded.status).toBe(529);
    expect((overloaded.error as { error: { type: string } }).error.type).toBe('overloaded_error');
    const limited = (await u.client.messages.create(body('[[error:429]]')).catch((e: unknown) => e)) as APIError;
    expect(limited).toBeInstanceOf(Anthropic.RateLimitError);
    expect((limited.error as { error: { type: string } }).error.type).toBe('rate_limit_error');
    expect((await u.usage()).openHolds).toBe(0);
  });

  it('an upstream that never answers → 500 api_error after the time-out', async () => {
    const u = await user();
    const started = Date.now();
    const err = (await u.client.messages.create(body('[[hang]]')).catch((e: unknown) => e)) as APIError;
    expect(err).toBeInstanceOf(Anthropic.InternalServerError);
    expect(err.message).toMatch(`did not answer within ${TIMEOUT_MS} ms`);
    expect(Date.now() - started).toBeGreaterThanOrEqual(TIMEOUT_MS - 50);
    const usage = await u.usage();
    expect(usage.used.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it('a stream that goes silent → event: error, charged for what was produced', async () => {
    const u = await user();
    const params = body(`[[words:3]] [[delay:${TIMEOUT_MS * 3}]]`);
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': await gw.token({ user: u.id, budget: claim }), 'content-type': 'application/json' },
      body: JSON.stringify({ ...params, stream: true }),
    });
    const text = await res.text();
    expect(text).toMatch(/^event: message_start\n/);
    expect(text).toMatch(
      /event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The upstream stopped sending data \(time-out\)"\}\}\n\n$/,
    );
    const usage = await settledUsage(u.usage);
    // message_start reported the input; no delta arrived, so output is the 1 token message_start reported.
    expect(usage.used.ai).toBe(estimateInputTokens(params) * 3 + 1 * 15);
    expect(usage.reserved.ai).toBe(0);
  });

  it('connection reset mid-stream → event: error and a charge for the deltas received', async () => {
    const u = await user();
    const params = body('[[words:20]] [[reset-after:6]]');
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': await gw.token({ user: u.id, budget: claim }), 'content-type': 'application/json' },
      body: JSON.stringify({ ...params, stream: true }),
    });
    const text = await res.text();
    const deltas = [...text.matchAll(/event: content_block_delta/g)].length;
    expect(deltas).toBe(3); // message_start, ping, content_block_start, then 3 deltas before the reset
    expect(text).toMatch(/event: error\ndata: \{"type":"error","error":\{"type":"api_error","message":"The upstream connection failed mid-stream"\}\}\n\n$/);
    // The SDK surfaces it as an error too.
    const sdkErr = await u.client.messages
      .stream(params)
      .finalMessage()
      .catch((e: unknown) => e);
    expect(sdkErr).toBeInstanceOf(APIError);
    const usage = await settledUsage(u.usage);
    // Each stream: input × $3 + max(3 deltas, ceil(18 chars / 4) = 5) output tokens × $15 ("word1 word2 word3 " is 18 characters).
    expect(usage.used.ai).toBe(2 * (estimateInputTokens(params) * 3 + 5 * 15));
    expect(usage.openHolds).toBe(0);
  });

  it('a client that disconnects mid-stream aborts the upstream and pays for what was produced', async () => {
    const u = await user();
    const params = body('[[words:40]] [[delay:40]]');
    await disconnectAfter(gw.url, u.id, params, 3);
    const upstreamCall = gw.upstreams.anthropic!.requests.at(-1)!;
    const usage = await settledUsage(u.usage);
    const input = estimateInputTokens(params) * 3;
    const full = input + 40 * 15;
    expect(usage.used.ai).toBeGreaterThanOrEqual(input + 3 * 15);
    expect(usage.used.ai).toBeLessThan(full);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
    // The gateway hung up on the upstream instead of letting it run on (40 words at 40 ms would take 1.6 s more).
    await expect.poll(() => upstreamCall.outcome, { timeout: 1000 }).toBe('client_closed');
  });

  it('the invocation does not end before a disconnected client has been charged', async () => {
    // The channeling handler served by hand, so the test knows the moment the invocation returns (as Lambda would).
    const { handler } = await import('../../lambdas/handlers/channeling.ts');
    const { unfinishedCount: unsettledStreams } = await import('../../lambdas/instance/unfinished.ts');
    let invocation: Promise<void> | undefined;
    const server: Server = createServer((req, res) => {
      // Called directly (not through invokeStreaming, which forgives failures) to see how the invocation itself ends.
      invocation = readBody(req, 1 << 20).then((read) =>
        (handler as unknown as (e: unknown, s: LocalResponseStream, c: unknown) => Promise<void>)(
          functionUrlEvent(req, read!.body),
          new LocalResponseStream(res),
          lambdaContext('channeling'),
        ),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const u = await user();
      const params = body('[[words:40]] [[delay:40]]');
      await disconnectAfter(`http://127.0.0.1:${(server.address() as { port: number }).port}`, u.id, params, 2);
      // A client that left is not a failed invocation (no ERROR, no Errors alarm): the handler resolves.
      await expect(invocation).resolves.toBeUndefined();
      // Nothing is left to write when the handler returns (Lambda may freeze the instance right then) …
      expect(unsettledStreams()).toBe(0);
      // … and the charge is in the ledger, read at once without polling.
      const usage = await u.usage();
      expect(usage.openHolds).toBe(0);
      expect(usage.reserved.ai).toBe(0);
      expect(usage.used.ai).toBeGreaterThanOrEqual(estimateInputTokens(params) * 3 + 2 * 15);
    } finally {
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
  });
});
