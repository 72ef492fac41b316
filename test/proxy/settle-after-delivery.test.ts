import { createServer, type Server } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { unfinishedCount } from '../../lambdas/instance/unfinished.ts';
import { setAccessLogSink, type AccessRecord } from '../../lambdas/observability/access-log.ts';
import { storeWire } from '../../lambdas/store/dynamo.ts';
import { LocalResponseStream } from '../../bin/local/awslambda-shim.ts';
import { functionUrlEvent, lambdaContext, readBody } from '../../bin/local/events.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The settlement is off the critical path (issue 17) without loosening "no charge left behind": the client has the
 * whole answer — JSON with its cost and remaining-budget headers, or the whole stream — while the settlement write is
 * still under way, and the invocation does not return until it is written. The ledger's settle writes are held back
 * by a store middleware, so the order is visible without timing the machine.
 */
const SETTLE_DELAY_MS = 500;
const claim: BudgetClaim = { ai: 2_000_000, compute: 0, window: 'day' };
let gw: TestGateway;
let server: Server;
let serverUrl: string;
let invocations: Promise<void>[] = [];
const settles: { started: number; ended: number }[] = [];
const lines: AccessRecord[] = [];
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  // Every settle (the ledger's only write that removes a hold) is delayed; reservations are not. The
  // store wire is built again first, so the delay goes into a fresh one before it has sent anything.
  storeWire.reset();
  storeWire().steps.call.push(async (call, next) => {
    const input = call.input as { UpdateExpression?: string };
    if (!input.UpdateExpression?.includes('REMOVE holds.')) return next();
    const timing = { started: performance.now(), ended: 0 };
    settles.push(timing);
    await new Promise((r) => setTimeout(r, SETTLE_DELAY_MS));
    const out = await next();
    timing.ended = performance.now();
    return out;
  });
  const { handler } = await import('../../lambdas/handlers/channeling.ts');
  // The channeling handler served by hand, so the test knows the moment each invocation returns (as Lambda would).
  server = createServer((req, res) => {
    invocations.push(
      readBody(req, 1 << 20).then((read) =>
        (handler as unknown as (e: unknown, s: LocalResponseStream, c: unknown) => Promise<void>)(
          functionUrlEvent(req, read!.body),
          new LocalResponseStream(res),
          lambdaContext('channeling'),
        ),
      ),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  serverUrl = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  setAccessLogSink((record) => lines.push(structuredClone(record)));
});
afterEach(() => {
  invocations = [];
  settles.length = 0;
  lines.length = 0;
});
afterAll(async () => {
  setAccessLogSink(undefined);
  storeWire.reset();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  await gw?.stop();
});

async function send(stream: boolean) {
  const userId = `settle-${++seq}`;
  const res = await fetch(`${serverUrl}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': await gw.token({ user: userId, budget: claim }), 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: 100, stream, messages: [{ role: 'user', content: 'Hello [[words:12]]' }] }),
  });
  const text = await res.text();
  const delivered = performance.now();
  let returned = 0;
  const invocation = invocations.at(-1)!.then(() => (returned = performance.now()));
  return { res, text, delivered, invocation, returned: () => returned, usage: () => readUsage({ projectId: gw.projectId, userId, budget: claim }) };
}

/**
 * The answer `r` was delivered with its settlement still being written, and the invocation returned only once the
 * charge (`cost`; for a stream, the one its access line reports) was in the ledger, with nothing left unfinished and
 * the access line written after it.
 */
async function expectSettledAfterDelivery(r: Awaited<ReturnType<typeof send>>, cost?: number) {
  expect(r.returned()).toBe(0);
  expect((await r.usage()).openHolds).toBe(1);

  await r.invocation;
  expect(settles).toHaveLength(1);
  expect(r.delivered).toBeLessThan(settles[0]!.ended);
  expect(r.returned()).toBeGreaterThanOrEqual(settles[0]!.ended);
  // Nothing is left to write when the handler returns, and the charge is in the ledger, read at once.
  expect(unfinishedCount()).toBe(0);
  // The access line waited for the settlement: it carries the charge and the settle's own time.
  expect(lines).toHaveLength(1);
  const charged = cost ?? lines[0]!.costMicrodollars!;
  expect(charged).toBeGreaterThan(0);
  expect(lines[0]!.costMicrodollars).toBe(charged);
  const usage = await r.usage();
  expect(usage.used.ai).toBe(charged);
  expect(usage.reserved.ai).toBe(0);
  expect(usage.openHolds).toBe(0);
  expect(lines[0]!.phases!.settle).toBeGreaterThanOrEqual(SETTLE_DELAY_MS - 1);
}

describe('the settlement is written after the answer is delivered, before the invocation returns', () => {
  it('JSON: cost and remaining-budget headers come from the reservation; the body arrives while the settle is still held', async () => {
    const r = await send(false);
    expect(r.res.status).toBe(200);
    const cost = Number(r.res.headers.get('x-gateway-cost-microdollars'));
    expect(cost).toBeGreaterThan(0);
    // What the ledger will say once settled: the whole budget less this request, the user's only one.
    expect(Number(r.res.headers.get('x-gateway-budget-remaining-microdollars'))).toBe(claim.ai - cost);
    expect(JSON.parse(r.text).content[0].text).toBe('word1 word2 word3 word4 word5 word6 word7 word8 word9 word10 word11 word12');
    await expectSettledAfterDelivery(r, cost);
    expect(Object.keys(lines[0]!.phases!)).toEqual(['token', 'parse', 'project', 'pricing', 'reservation', 'connect', 'firstByte', 'settle']);
  });

  it('SSE: the stream ends (message_stop and the close) while the settle is still held', async () => {
    const r = await send(true);
    expect(r.res.status).toBe(200);
    expect(r.text).toMatch(/event: message_stop\n/);
    await expectSettledAfterDelivery(r);
    expect(lines[0]!.phases!.firstByte).toBeGreaterThanOrEqual(0);
  });
});
