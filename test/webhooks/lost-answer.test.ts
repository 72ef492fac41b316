import type { UpdateItemCommandInput } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, beforeEach, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { writeClient } from '../../lambdas/store/dynamo.ts';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil } from '../support/vessels.ts';
import { startReceiver, type Receiver } from './receiver.ts';

/**
 * A conditional write whose answer is lost (a connection dropped after DynamoDB applied it) is sent again by the SDK,
 * and that second send meets the first one's result. The webhook sender's claim and its record of an attempt must
 * read that as done, not as another sender's work: before, the claim's retry concluded "someone else has it" and the
 * delivery sat pending until the reconciler looked again, minutes later (what made a CI run fail when a client was
 * torn down under an attempt).
 *
 * The reconciler is kept out of it (VESSEL_REDRIVE_AFTER_SECONDS 600): what is delivered here is delivered at once.
 */

let gw: TestGateway;
let rx: Receiver;
let token: string;
/** Which writes lose their first answer, and how many did. */
const lose = { claim: false, record: false };
const lost: string[] = [];

const isClaim = (input: UpdateItemCommandInput) => input.UpdateExpression === 'SET #w.#claim = :claim';
const isRecord = (input: UpdateItemCommandInput) => input.UpdateExpression?.includes('list_append(#w.#attempts, :one)') === true && input.ConditionExpression?.includes('#w.#claim.#by = :by') === true;

beforeAll(async () => {
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1', VESSEL_REDRIVE_AFTER_SECONDS: '600' } });
  token = await gw.token({ user: 'lost-answer' });
  rx = await startReceiver();
  // The write client is built again, with a step inside the SDK's retry loop that drops the answer of a write DynamoDB
  // has applied — once for each kind asked for — as a dropped connection would (a retryable network error).
  resetInstanceState();
  writeClient().middlewareStack.add(
    (next) => async (args) => {
      const out = await next(args);
      const input = args.input as UpdateItemCommandInput;
      const kind = isClaim(input) ? 'claim' : isRecord(input) ? 'record' : undefined;
      if (kind && lose[kind]) {
        lose[kind] = false;
        lost.push(kind);
        throw Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
      }
      return out;
    },
    { step: 'deserialize', name: 'loseOneAnswer', priority: 'high' },
  );
});
beforeEach(() => {
  lost.length = 0;
});
afterAll(async () => {
  await rx?.close();
  resetInstanceState();
  await gw?.stop();
});

const stored = async (vesselId: string) => (await getVessel(vesselId))!;
const settled = (vesselId: string) => pollUntil(() => stored(vesselId), (v) => v?.webhook?.status === 'delivered', { timeoutMs: 20_000, what: 'delivered' });

it('the answers of the claim and of the record are lost: delivered at once, one request, one attempt recorded', async () => {
  Object.assign(lose, { claim: true, record: true });
  const before = rx.requests.length;
  const q = await incubate(gw.url, { message: 'Lost answers [[words:2]]', idempotencyKey: 'lost-answer-1', options: { token }, callback: { url: rx.url, secret: 's' } });
  const v = await settled(q.vesselId);
  expect(lost).toEqual(['claim', 'record']);
  expect(v.webhook).toMatchObject({ status: 'delivered', round: 1, tried: 1 });
  expect(v.webhook!.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([[1, 1, 204]]);
  expect(v.webhook).not.toHaveProperty('claim');
  expect(v).not.toHaveProperty('reconcileAt');
  expect(rx.requests.slice(before).filter((r) => r.headers['webhook-id'] === `msg_${q.vesselId}`)).toHaveLength(1);
});

it('a failed attempt whose record loses its answer still queues the retry, which delivers', async () => {
  rx.answer({ status: 500 });
  Object.assign(lose, { claim: true, record: true });
  const before = rx.requests.length;
  const q = await incubate(gw.url, { message: 'Lost answer, retry [[words:2]]', idempotencyKey: 'lost-answer-2', options: { token }, callback: { url: rx.url, secret: 's' } });
  const v = await settled(q.vesselId);
  expect(lost).toEqual(['claim', 'record']);
  expect(v.webhook!.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([
    [1, 1, 500],
    [1, 2, 204],
  ]);
  expect(rx.requests.slice(before).filter((r) => r.headers['webhook-id'] === `msg_${q.vesselId}`)).toHaveLength(2);
});
