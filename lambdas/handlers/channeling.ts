import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import { requestFromFunctionUrl, streamingHandler, streamingResultFrom } from '../http/function-url.ts';
import { logger } from '../observability/logger.ts';
import { proxyApp } from '../proxy/app.ts';
import { settlementsInFlight } from '../metering/settlements.ts';
import { observability } from './middleware.ts';

const app = proxyApp();

/**
 * The channeling function URL (invoke mode RESPONSE_STREAM): a function-URL event → the proxy core → a streamed
 * response. SSE bytes are piped as the provider produces them.
 */
const proxied = middy<LambdaFunctionURLEvent>({
  executionMode: executionModeStreamifyResponse,
  // Runs after the response has been piped or broken off: no stream's charge is still being written when the
  // invocation ends.
  requestEnd: settlementsInFlight,
})
  .use(observability())
  .handler(async (event) => streamingResultFrom(await app.fetch(() => requestFromFunctionUrl(event))));

export const handler = streamingHandler(proxied as never, (err) =>
  logger.info('client disconnected before the response was complete', { error: (err as Error)?.message }),
);
