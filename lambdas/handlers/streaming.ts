import { executionModeStreamifyResponse } from '@middy/core/StreamifyResponse';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import type { HttpApp } from '../http/app.ts';
import { requestFromFunctionUrl, streamingHandler, streamingResultFrom, type StreamingResult } from '../http/function-url.ts';
import { logger } from '../observability/logger.ts';
import { gatewayFunction } from './middleware.ts';

/**
 * A function URL in invoke mode RESPONSE_STREAM serving an app: a function-URL event → the app → a streamed response,
 * piped as it is produced. The channeling proxy and /prompt are both one line of this.
 */
export function streamingFunction(app: HttpApp) {
  // The unfinished work is drained after the response has been piped or broken off (gatewayFunction): the
  // settlements that waited for the answer to be delivered are written then, not while the client waits.
  const inner = gatewayFunction<LambdaFunctionURLEvent, StreamingResult>(
    async (event) => streamingResultFrom(await app.fetch(() => requestFromFunctionUrl(event))),
    { executionMode: executionModeStreamifyResponse },
  );
  return streamingHandler(inner as never, (err) => logger.info('client disconnected before the response was complete', { error: (err as Error)?.message }));
}
