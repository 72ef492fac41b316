import { afterAll, beforeAll, expect, it } from 'vitest';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { loseAnswers, type AnswerLoss, type WriteInput } from '../support/lost-answers.ts';
import { incubate, pollUntil } from '../support/vessels.ts';
import { startReceiver, type Receiver } from './receiver.ts';

/**
 * A conditional write whose answer is lost (a connection dropped after DynamoDB applied it) is sent again by the SDK,
 * and that second send meets the first one's result. The webhook sender's claim and its record of an attempt must
 * read that as done, not as another sender's work (store/conditional.ts): before, the claim's resend concluded
 * "someone else has it" and the delivery sat pending until the reconciler looked again, minutes later (what made a CI
 * run fail when a client was torn down under an attempt).
 *
 * The reconciler is kept out of it (VESSEL_REDRIVE_AFTER_SECONDS 600): what is delivered here is delivered at once.
 */

let gw: TestGateway;
let rx: Receiver;
let token: string;
let loss: AnswerLoss;

const isClaim = (input: WriteInput) => input.UpdateExpression?.includes('#w.#claim = :claim') === true;
const isRecord = (input: WriteInput) =>
  input.UpdateExpression?.includes('list_append(#w.#attempts, :one)') === true && input.ConditionExpression?.includes('#w.#claim.#by = :by') === true;

beforeAll(async () => {
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1', VESSEL_REDRIVE_AFTER_SECONDS: '600' } });
  token = await gw.token({ user: 'lost-answer' });
  rx = await startReceiver();
  loss = loseAnswers();
});
afterAll(async () => {
  await rx?.close();
  await gw?.stop();
});
const loseClaimAndRecord = () => {
  loss.loseNext('claim', isClaim);
  loss.loseNext('record', isRecord);
};

const stored = async (vesselId: string) => (await getVessel(vesselId))!;
const settled = (vesselId: string) =>
  pollUntil(
    () => stored(vesselId),
    (v) => v?.webhook?.status === 'delivered',
    { timeoutMs: 20_000, what: 'delivered' },
  );

it('the answers of the claim and of the record are lost: delivered at once, one request, one attempt recorded', async () => {
  loseClaimAndRecord();
  const before = rx.requests.length;
  const q = await incubate(gw.url, {
    message: 'Lost answers [[words:2]]',
    idempotencyKey: 'lost-answer-1',
    options: { token },
    callback: { url: rx.url, secret: 's' },
  });
  const v = await settled(q.vesselId);
  expect(loss.lost.slice(-2)).toEqual(['claim', 'record']);
  expect(v.webhook).toMatchObject({ status: 'delivered', round: 1, tried: 1 });
  expect(v.webhook!.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([[1, 1, 204]]);
  expect(v.webhook).not.toHaveProperty('claim');
  expect(v).not.toHaveProperty('reconcileAt');
  expect(rx.requests.slice(before).filter((r) => r.headers['webhook-id'] === `msg_${q.vesselId}`)).toHaveLength(1);
});

it('a failed attempt whose record loses its answer still queues the retry, which delivers', async () => {
  rx.answer({ status: 500 });
  loseClaimAndRecord();
  const before = rx.requests.length;
  const q = await incubate(gw.url, {
    message: 'Lost answer, retry [[words:2]]',
    idempotencyKey: 'lost-answer-2',
    options: { token },
    callback: { url: rx.url, secret: 's' },
  });
  const v = await settled(q.vesselId);
  expect(loss.lost.slice(-2)).toEqual(['claim', 'record']);
  expect(v.webhook!.attempts.map((a) => [a.round, a.attempt, a.statusCode])).toEqual([
    [1, 1, 500],
    [1, 2, 204],
  ]);
  expect(rx.requests.slice(before).filter((r) => r.headers['webhook-id'] === `msg_${q.vesselId}`)).toHaveLength(2);
});
