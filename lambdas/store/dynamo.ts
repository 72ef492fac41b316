import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { env, localEndpointCredentials } from '../config/env.ts';
import { instanceValue } from '../instance/state.ts';

function clientConfig(): DynamoDBClientConfig {
  const { DYNAMODB_ENDPOINT, AWS_REGION } = env();
  return {
    region: AWS_REGION,
    ...(DYNAMODB_ENDPOINT ? { endpoint: DYNAMODB_ENDPOINT, credentials: localEndpointCredentials() } : {}),
  };
}

/** One document client per instance, pointed at DynamoDB Local when DYNAMODB_ENDPOINT is set. */
export const documentClient = instanceValue(
  (): DynamoDBDocumentClient => DynamoDBDocumentClient.from(new DynamoDBClient(clientConfig()), { marshallOptions: { removeUndefinedValues: true } }),
  (client) => client.destroy(),
);

/**
 * The client of the conditional writes (store/conditional.ts), which are on every metered request's path: the
 * low-level client with its middleware stack resolved once per command class (`cacheMiddleware`) rather than on
 * every call, and no document-client layer (conditional.ts marshals itself). Both were a measurable share of the
 * gateway's CPU per request (docs/benchmarks.md, "CPU per request"). The document client cannot cache its stack.
 */
export const writeClient = instanceValue(
  (): DynamoDBClient => new DynamoDBClient({ ...clientConfig(), cacheMiddleware: true }),
  (client) => client.destroy(),
);

/** True when the error is DynamoDB refusing a write because its condition did not hold. */
export function isConditionFailure(err: unknown): boolean {
  return (
    typeof err === 'object' &&
    err !== null &&
    'name' in err &&
    ((err as { name: string }).name === 'ConditionalCheckFailedException' || (err as { name: string }).name === 'TransactionCanceledException')
  );
}
