import { randomUUID } from 'node:crypto';
import { clock } from '../config/clock.ts';
import { sendWebhookMessage, WebhookMessage } from '../deliveries/message.ts';
import type { StoredAttempt, StoredWebhook } from '../deliveries/record.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { sqsQueueSender } from '../queues/sender.ts';
import { putBackIfEarly } from '../scheduling/early.ts';
import { attemptDelivery, deliveryHeaders, type AttemptOutcome } from './deliver.ts';
import { nextAttemptAt } from './schedule.ts';
import { claimAttempt, markDeadLettered, recordAttempt, recordSupersededAttempt, type AfterAttempt } from './store.ts';
import { subjectOf, type DeliverySubject } from './subjects.ts';

/**
 * The webhook queue's consumer (docs/webhooks.md): one message = one attempt of one delivery — a vessel's callback,
 * or a budget alert (subjects.ts).
 *
 *   read the item → claim the attempt → POST (deliver.ts) → record the attempt and what the round became →
 *   queue the next attempt (delayed message, or a schedule beyond 15 minutes) or, once the schedule is spent, put the
 *   delivery on the dead-letter queue.
 *
 * The item decides, the message only triggers: a duplicate, stale or early message changes nothing. A sender that
 * dies after recording an attempt but before queueing the next leaves its message to be redelivered by SQS, and the
 * redelivered message queues the follow-up it finds missing.
 */
export async function processWebhookMessage(body: unknown, _record?: unknown, time: () => number = clock.now): Promise<void> {
  const parsed = WebhookMessage.safeParse(body);
  if (!parsed.success) {
    // Not a delivery this consumer understands: retrying would not change it.
    logger.warn('webhook message dropped: not a delivery');
    return;
  }
  const m = parsed.data;
  const now = time();
  // Early (a schedule fires to the second): back for the rest of the wait.
  if (await putBackIfEarly({ due: m.notBefore, now, putBack: () => sendWebhookMessage(m, now) })) return;
  const subject = await subjectOf(m);
  if (!subject) return;
  const w = subject.webhook;
  if (w) {
    if (w.round !== m.round) return; // an operator started another round: this one is over
    if (w.tried >= m.attempt) return followUp(subject, w, m.attempt);
    if (w.status !== 'pending' || w.tried < m.attempt - 1) return;
  } else if (m.round !== 1 || m.attempt !== 1) return;

  const by = randomUUID();
  if (!(await claimAttempt(subject.at, w, m, by, now))) return;
  const outcome = await attempt(subject, time);
  const made: StoredAttempt = { round: m.round, attempt: m.attempt, ...outcome.attempt };
  const after = roundAfter(m.attempt, outcome, time());
  emit('WebhookAttempts', 1);
  logger.info('webhook attempt', {
    ...subject.ref,
    round: m.round,
    attempt: m.attempt,
    // The origin only: a callback URL's path or query may carry the receiver's own credentials.
    origin: safeOrigin(subject.url),
    ...(made.statusCode === undefined ? {} : { statusCode: made.statusCode }),
    ...(made.error === undefined ? {} : { error: made.error }),
    durationMs: made.durationMs,
    outcome: after.status,
  });
  const recorded = await recordAttempt(subject.at, m, by, made, after);
  if (!recorded) {
    // A new round began meanwhile: the attempt is kept in the record, the round's outcome no longer matters. (Or the
    // claim was taken over as stale: the sender that took it records its own attempt.)
    await recordSupersededAttempt(subject.at, made);
    return;
  }
  if (after.status === 'failed') emit('WebhooksFailed', 1);
  await followUp(subject, recorded, m.attempt);
}

/** Signs and sends the subject's body once. */
async function attempt(subject: DeliverySubject, time: () => number): Promise<AttemptOutcome> {
  const secret = await subject.secret();
  const headers = deliveryHeaders({ webhookId: subject.webhookId, timestamp: Math.floor(time() / 1000), body: subject.body, secret });
  return attemptDelivery(subject.url, subject.body, headers, time);
}

/** What the round becomes after attempt `attempt`: delivered, failed for good, or pending until the next one. */
function roundAfter(attempt: number, outcome: AttemptOutcome, now: number): AfterAttempt {
  switch (outcome.verdict) {
    case 'delivered':
      return { status: 'delivered' };
    case 'gone':
      return { status: 'failed', failure: 'gone' };
    case 'refused':
      return { status: 'failed', failure: 'refused' };
    case 'retry': {
      const next = nextAttemptAt(attempt, now, outcome.retryAfterSeconds);
      return next === undefined ? { status: 'failed', failure: 'exhausted' } : { status: 'pending', nextAttemptAt: next };
    }
  }
}

/**
 * After attempt `attempt` was recorded: queue the next attempt while the round is pending, or put an exhausted round
 * on the dead-letter queue. Safe to repeat: a second message for the next attempt finds it claimed or made, and the
 * schedule of a far one is named after it.
 */
async function followUp(subject: DeliverySubject, w: StoredWebhook, attempt: number): Promise<void> {
  if (w.tried !== attempt) return;
  if (w.status === 'pending' && w.nextAttemptAt !== undefined) {
    await sendWebhookMessage({ ...subject.ref, round: w.round, attempt: attempt + 1, notBefore: w.nextAttemptAt });
    return;
  }
  if (w.status === 'failed' && w.failure === 'exhausted' && w.deadLetteredAt === undefined) {
    const { redeliver, ...whose } = subject.deadLetter;
    await sqsQueueSender().sendToDeadLetter('webhook', {
      ...subject.ref,
      ...whose,
      webhookId: subject.webhookId,
      url: subject.url,
      round: w.round,
      attempts: w.attempts.filter((a) => a.round === w.round).map((a) => ({ ...a, at: new Date(a.at).toISOString() })),
      redeliver,
    });
    await markDeadLettered(subject.at, w.round, clock.now());
    logger.warn('webhook delivery exhausted its retries: on the dead-letter queue', {
      ...subject.ref,
      round: w.round,
      origin: safeOrigin(subject.url),
    });
  }
}

function safeOrigin(url: string): string {
  try {
    return new URL(url).origin;
  } catch {
    return '(invalid URL)';
  }
}
