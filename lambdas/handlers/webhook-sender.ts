import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { sqsConsumer } from '../queues/consumer.ts';
import { processWebhookMessage } from '../webhooks/sender.ts';
import { gatewayFunction } from './middleware.ts';

const consume = sqsConsumer(processWebhookMessage);

/** The webhook queue's consumer: each message is one delivery attempt of a vessel's callback (docs/webhooks.md). */
export const handler = gatewayFunction<SQSEvent, SQSBatchResponse>((event, context) => consume(event, context));
