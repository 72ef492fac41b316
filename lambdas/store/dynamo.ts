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
 *
 * Two steps of the SDK's stack do nothing the gateway uses, on every write (docs/benchmarks.md, "CPU per request by
 * layer"), and are taken out: the logger step builds a redacted copy of each input and output for a logger the
 * gateway never gives the client (it logs its own failures), and the user-agent step formats the SDK's user agent
 * header, which DynamoDB does not need. Retries, signing, the trace header and the error parsing stay the SDK's.
 */
export const writeClient = instanceValue(
  (): DynamoDBClient => {
    const client = new DynamoDBClient({ ...clientConfig(), cacheMiddleware: true });
    for (const step of UNUSED_STEPS) client.middlewareStack.remove(step);
    return client;
  },
  (client) => client.destroy(),
);

/** The write client's middleware steps the gateway has no use for (above). */
export const UNUSED_STEPS = ['loggerMiddleware', 'getUserAgentMiddleware'] as const;

/** True when the error is DynamoDB refusing a write because its condition did not hold. */
export function isConditionFailure(err: unknown): boolean {
  return (
    typeof err === 'object' &&
    err !== null &&
    'name' in err &&
    ((err as { name: string }).name === 'ConditionalCheckFailedException' || (err as { name: string }).name === 'TransactionCanceledException')
  );
}
