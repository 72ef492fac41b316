import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { env, localEndpointCredentials } from '../config/env.ts';
import { SQS_MAX_DELAY_SECONDS } from '../config/timing.ts';
import { instanceValue } from '../instance/state.ts';
import { queueSpec, type QueueName } from '../store/queues.ts';

/** Puts messages on the gateway's queues (QUEUES); the consumers read them with sqsConsumer (consumer.ts). */
export interface QueueSender {
  /**
   * Sends `body` (serialised as JSON) to `queue`, delivered after `delaySeconds` (0–900) when given. Resolves to
   * the message id.
   */
  send(queue: QueueName, body: unknown, options?: { delaySeconds?: number }): Promise<string>;
  /**
   * Puts `body` on `queue`'s dead-letter queue directly: for a consumer that has given up on a message it handled
   * (the webhook sender after the last retry), rather than failing it until SQS moves it there.
   */
  sendToDeadLetter(queue: QueueName, body: unknown): Promise<string>;
}

/** The instance's SQS client, pointed at the local fauxqs when SQS_ENDPOINT is set. */
export const queueClient = instanceValue(
  (): SQSClient => {
    const { SQS_ENDPOINT, AWS_REGION } = env();
    return new SQSClient({
      region: AWS_REGION,
      ...(SQS_ENDPOINT ? { endpoint: SQS_ENDPOINT, credentials: localEndpointCredentials() } : {}),
    });
  },
  (client) => client.destroy(),
);

/**
 * QueueSender on SQS. A queue's URL is read from the environment variable QUEUES names (the stack sets it on a
 * function whose manifest entry lists the queue in `access.queues`, the local runtime on every function).
 */
export function sqsQueueSender(): QueueSender {
  return {
    async send(queue, body, options = {}) {
      const { envVar } = queueSpec(queue);
      const queueUrl = env()[envVar];
      if (!queueUrl) throw new Error(`${envVar} is not set: this function may not send to the ${queue} queue (manifest access.queues)`);
      const delay = options.delaySeconds;
      if (delay !== undefined && (!Number.isInteger(delay) || delay < 0 || delay > SQS_MAX_DELAY_SECONDS)) {
        throw new RangeError(`delaySeconds must be an integer from 0 to ${SQS_MAX_DELAY_SECONDS}, got ${delay}`);
      }
      return sendTo(queueUrl, `the ${queue} queue`, body, delay);
    },
    async sendToDeadLetter(queue, body) {
      const { deadLetterEnvVar } = queueSpec(queue);
      const queueUrl = env()[deadLetterEnvVar];
      if (!queueUrl)
        throw new Error(`${deadLetterEnvVar} is not set: this function may not send to the ${queue} dead-letter queue (manifest access.deadLetters)`);
      return sendTo(queueUrl, `the ${queue} dead-letter queue`, body);
    },
  };
}

async function sendTo(queueUrl: string, what: string, body: unknown, delay?: number): Promise<string> {
  const messageBody = JSON.stringify(body);
  if (messageBody === undefined) throw new TypeError('A queue message body must be JSON-serialisable');
  const out = await queueClient().send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: messageBody, ...(delay ? { DelaySeconds: delay } : {}) }));
  if (!out.MessageId) throw new Error(`SQS accepted a message for ${what} without a message id`);
  return out.MessageId;
}
