import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { sqsConsumer } from '../queues/consumer.ts';
import { processTurnMessage } from '../sessions/turn.ts';
import { gatewayFunction } from './middleware.ts';
// A run's end gives its lease back, which wakes the developer's oldest vessel parked for the slot: park.ts registers
// that wake when loaded (plans/leases.ts onCapacityFreed; the manifest grants this function the access it needs).
import '../vessels/park.ts';

const consume = sqsConsumer((body) => processTurnMessage(body));

/** The turn queue's consumer: each message is one segment of a /ws turn, streamed to its connection (docs/ws.md). */
export const handler = gatewayFunction<SQSEvent, SQSBatchResponse>((event, context) => consume(event, context));
