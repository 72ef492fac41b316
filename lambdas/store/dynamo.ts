import { DynamoDBClient, type DynamoDBClientConfig } from '@aws-sdk/client-dynamodb';
import { DynamoDBDocumentClient } from '@aws-sdk/lib-dynamodb';
import { env, localEndpointCredentials } from '../config/env.ts';
import { instanceValue } from '../instance/state.ts';
import { StoreWire } from './wire.ts';

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
 * The conditional writes on every metered request's path go out in DynamoDB's JSON protocol (store/wire.ts): the
 * SDK's command stack was the largest layer of the gateway's CPU per request (docs/benchmarks.md, "CPU per request by
 * layer"). They are signed, retried and classified with the document client's own configuration — its credentials
 * chain, region, clock offset and retry strategy — so the instance keeps one SDK client and one set of credentials.
 */
export const storeWire = instanceValue(
  (): StoreWire => {
    const { DYNAMODB_ENDPOINT, AWS_REGION } = env();
    return new StoreWire(documentClient().config, DYNAMODB_ENDPOINT || `https://dynamodb.${AWS_REGION}.amazonaws.com`);
  },
  (wire) => wire.destroy(),
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
