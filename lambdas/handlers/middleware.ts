import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import type { MiddlewareObj } from '@middy/core';
import { logger } from '../observability/logger.ts';
import { metrics } from '../observability/metrics.ts';

/** What every function wears: structured logs with the Lambda context, and metrics flushed per invocation. */
export function observability(): MiddlewareObj[] {
  return [injectLambdaContext(logger) as MiddlewareObj, logMetrics(metrics) as MiddlewareObj];
}
