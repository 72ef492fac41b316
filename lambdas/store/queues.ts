/**
 * The one description of the gateway's SQS queues, as tables.ts is for its tables: the CDK stack and the local
 * runtime (fauxqs) both build theirs from it. Each queue has a dead-letter queue after `maxReceiveCount` deliveries.
 */
export const QUEUES = [
  { envVar: 'RUN_QUEUE_URL', name: 'run', maxReceiveCount: 5 },
  { envVar: 'WEBHOOK_QUEUE_URL', name: 'webhook', maxReceiveCount: 8 },
] as const;
