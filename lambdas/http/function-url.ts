import { Readable } from 'node:stream';
import type { LambdaFunctionURLEvent } from 'aws-lambda';

/** A function-URL event as a web Request. */
export function requestFromFunctionUrl(event: LambdaFunctionURLEvent): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(event.headers ?? {})) if (value !== undefined) headers.set(name, value);
  if (event.cookies?.length) headers.set('cookie', event.cookies.join('; '));
  const host = headers.get('host') ?? event.requestContext?.domainName ?? 'localhost';
  const query = event.rawQueryString ? `?${event.rawQueryString}` : '';
  const method = event.requestContext?.http?.method ?? 'GET';
  const hasBody = event.body !== undefined && event.body !== null && method !== 'GET' && method !== 'HEAD';
  return new Request(`https://${host}${event.rawPath ?? '/'}${query}`, {
    method,
    headers,
    body: hasBody ? (event.isBase64Encoded ? Buffer.from(event.body!, 'base64') : event.body) : undefined,
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
