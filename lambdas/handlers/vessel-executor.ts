import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { sqsConsumer } from '../queues/consumer.ts';
import { processRunMessage } from '../vessels/executor.ts';
import { gatewayFunction } from './middleware.ts';

const consume = sqsConsumer(processRunMessage);

/** The run queue's consumer: each message names a vessel the executor may start (docs/incubate.md). */
export const handler = gatewayFunction<SQSEvent, SQSBatchResponse>((event, context) => consume(event, context));
