import middy from '@middy/core';
import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import type { HttpApp } from '../http/app.ts';
import { requestFromFunctionUrl, streamingHandler, streamingResultFrom } from '../http/function-url.ts';
import { unfinishedWork } from '../instance/unfinished.ts';
import { logger } from '../observability/logger.ts';
import { observability } from './middleware.ts';

/**
 * A function URL in invoke mode RESPONSE_STREAM serving an app: a function-URL event → the app → a streamed response,
 * piped as it is produced. The channeling proxy and /prompt are both one line of this.
 */
export function streamingFunction(app: HttpApp) {
  const inner = middy<LambdaFunctionURLEvent>({
    executionMode: executionModeStreamifyResponse,
    // Runs after the response has been piped or broken off: the settlements that waited for the answer to be
    // delivered are written now, and none is still being written when the invocation ends (Lambda may freeze the
    // instance as soon as it returns).
    requestEnd: unfinishedWork,
  })
    .use(observability())
    .handler(async (event) => streamingResultFrom(await app.fetch(() => requestFromFunctionUrl(event))));
  return streamingHandler(inner as never, (err) => logger.info('client disconnected before the response was complete', { error: (err as Error)?.message }));
}
