import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { env } from '../config/env.ts';
import { instanceValue } from '../instance/state.ts';

/** One document client per instance, pointed at DynamoDB Local when DYNAMODB_ENDPOINT is set. */
export const documentClient = instanceValue(
  (): DynamoDBDocumentClient => {
    const { DYNAMODB_ENDPOINT, AWS_REGION } = env();
    const base = new DynamoDBClient({
      region: AWS_REGION,
      ...(DYNAMODB_ENDPOINT
        ? { endpoint: DYNAMODB_ENDPOINT, credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }
        : {}),
    });
    return DynamoDBDocumentClient.from(base, { marshallOptions: { removeUndefinedValues: true } });
  },
  (client) => client.destroy(),
);

/** True when the error is DynamoDB refusing a write because its condition did not hold. */
export function isConditionFailure(err: unknown): boolean {
  return (
    typeof err === 'object' &&
    err !== null &&
    'name' in err &&
    ((err as { name: string }).name === 'ConditionalCheckFailedException' ||
      (err as { name: string }).name === 'TransactionCanceledException')
  );
}
