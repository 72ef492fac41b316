import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy, { type MiddlewareObj } from '@middy/core';
import type { Context } from 'aws-lambda';
import { ownUnfinishedWork, unfinishedWork } from '../instance/unfinished.ts';
import { logger } from '../observability/logger.ts';
import { metrics } from '../observability/metrics.ts';

type PluginOptions = NonNullable<Parameters<typeof middy>[1]>;

/**
 * Every function of the manifest is built here, so none can forget what every invocation needs: structured logs with
 * the Lambda context, metrics flushed per invocation, and the invocation's unfinished work — settlements, access
 * lines — drained before it returns (instance/unfinished.ts; docs/architecture.md, "No charge left behind"). The
 * drain is middy's requestEnd, which runs after a streamed response has been piped or broken off, so a client never
 * waits for it; each invocation has a scope of its own, so it never waits for another's. A streaming function passes
 * its execution mode (handlers/streaming.ts) and gets middy's streaming handler, with its extra argument.
 */
export function gatewayFunction<TEvent, TResult = unknown>(
  handler: (event: TEvent, context: Context) => TResult | Promise<TResult>,
  options: Pick<PluginOptions, 'executionMode'> = {},
): (event: TEvent, ...rest: unknown[]) => Promise<TResult> {
  const invoke = middy<TEvent, TResult>({ ...options, requestEnd: unfinishedWork })
    .use(observability())
    .handler(async (event, context) => handler(event, context)) as unknown as (event: TEvent, ...rest: unknown[]) => Promise<TResult>;
  return (event, ...rest) => ownUnfinishedWork(() => invoke(event, ...rest));
}

/** Structured logs with the Lambda context, and metrics flushed per invocation. */
function observability(): MiddlewareObj[] {
  return [injectLambdaContext(logger) as MiddlewareObj, logMetrics(metrics) as MiddlewareObj];
}
