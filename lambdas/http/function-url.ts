import { Readable } from 'node:stream';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import { buildRequest, headersFrom } from './request.ts';

/** A function-URL event as a web Request (throws a ClientError for what cannot be one; the app renders it). */
export function requestFromFunctionUrl(event: LambdaFunctionURLEvent): Request {
  const headers = headersFrom(event.headers ?? {});
  if (event.cookies?.length) headers.set('cookie', event.cookies.join('; '));
  return buildRequest({
    method: event.requestContext?.http?.method ?? 'GET',
    path: event.rawPath ?? '/',
    query: event.rawQueryString,
    headers,
    body: event.body === undefined || event.body === null ? undefined : event.isBase64Encoded ? Buffer.from(event.body, 'base64') : event.body,
  });
}

/** What a middy RESPONSE_STREAM handler returns: the prelude and a Node stream to pipe. */
export interface StreamingResult {
  statusCode: number;
  headers: Record<string, string>;
  body: Readable | string;
}

/**
 * A web Response as a streaming result. The body is piped chunk by chunk; when the client goes away the pipe is
 * destroyed, which cancels the Response's stream and lets its producer stop the upstream call.
 */
export function streamingResultFrom(res: Response): StreamingResult {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return {
    statusCode: res.status,
    headers,
    body: res.body ? Readable.fromWeb(res.body as import('node:stream/web').ReadableStream) : '',
  };
}
