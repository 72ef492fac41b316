import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import { requestFromFunctionUrl, streamingResultFrom } from '../http/function-url.ts';
import { proxyApp } from '../proxy/app.ts';
import { settlementsInFlight } from '../proxy/messages.ts';
import { observability } from './middleware.ts';

const app = proxyApp();

/**
 * The channeling function URL (invoke mode RESPONSE_STREAM): a function-URL event → the proxy core → a streamed
 * response. SSE bytes are piped as the provider produces them.
 */
export const handler = middy<LambdaFunctionURLEvent>({
  executionMode: executionModeStreamifyResponse,
  // Runs after the response has been piped or broken off: no stream's charge is still being written when the
  // invocation ends.
  requestEnd: settlementsInFlight,
})
  .use(observability())
  .handler(async (event) => streamingResultFrom(await app.fetch(() => requestFromFunctionUrl(event))));
