import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { logger } from '../observability/logger.ts';

/** What a queue's consumer does with one message: its JSON body, and the record for ids and attributes. */
export type RecordProcessor = (body: unknown, record: SQSRecord) => Promise<void>;

export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse>;

/** A message whose body is not JSON: it fails alone (and after maxReceiveCount lands in the dead-letter queue). */
export class MalformedMessageError extends Error {
  override readonly name = 'MalformedMessageError';
}

/**
 * An SQS handler with partial batch failures (Powertools' BatchProcessor): each record's body is parsed as JSON and
 * handed to `process`; a record whose body is not JSON, or whose processing throws, is reported in
 * `batchItemFailures` and returns to the queue alone, while the others are deleted. The answer is always
 * `{ batchItemFailures }`, even when every record failed (the event source then retries them all).
 * Records of a batch are processed concurrently. Translation only: what a message means is `process`'s business.
 */
export function sqsConsumer(process: RecordProcessor): SqsHandler {
  const processor = new BatchProcessor(EventType.SQS);
  const handleRecord = async (record: SQSRecord): Promise<void> => {
    let body: unknown;
    try {
      body = JSON.parse(record.body);
    } catch {
      const err = new MalformedMessageError(`Message ${record.messageId} has a body that is not JSON`);
      logger.warn('message refused', { messageId: record.messageId, error: err.message });
      throw err;
    }
    try {
      await process(body, record);
    } catch (err) {
      logger.warn('message failed; it returns to the queue', {
        messageId: record.messageId,
        receiveCount: record.attributes?.ApproximateReceiveCount,
        error: err as Error,
      });
      throw err;
    }
  };
  return (event, context) => processPartialResponse(event, handleRecord, processor, { context, throwOnFullBatchFailure: false });
}
