import { Readable } from 'node:stream';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import { buildRequest, headersFrom } from './request.ts';

/** A function-URL event as a web Request (throws a refusal for what cannot be one; the app renders it). */
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
  /** Each Set-Cookie, separately: they cannot share one header line, and the prelude has a list for them. */
  cookies?: string[];
  body: Readable | string;
}

/**
 * A web Response as a streaming result. The body is piped chunk by chunk; when the client goes away the pipe is
 * destroyed, which cancels the Response's stream and lets its producer stop the upstream call.
 */
export function streamingResultFrom(res: Response): StreamingResult {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value;
  });
  const cookies = res.headers.getSetCookie();
  return {
    statusCode: res.status,
    headers,
    ...(cookies.length ? { cookies } : {}),
    body: res.body ? Readable.fromWeb(res.body as import('node:stream/web').ReadableStream) : '',
  };
}

type StreamingHandler = (event: LambdaFunctionURLEvent, responseStream: NodeJS.WritableStream, context: unknown) => Promise<void>;

/** Error codes of a response pipe broken by the client going away (not by the gateway). */
const DISCONNECT_CODES = new Set(['ERR_STREAM_PREMATURE_CLOSE', 'ERR_STREAM_DESTROYED', 'ERR_STREAM_WRITE_AFTER_END', 'EPIPE', 'ECONNRESET']);

function isDisconnect(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | undefined;
  return Boolean(e && ((e.code && DISCONNECT_CODES.has(e.code)) || e.message === 'Client disconnected'));
}

/**
 * A client that leaves before the answer is complete breaks the pipe into the response stream, and middy then
 * rethrows that as the invocation's error: every abandoned stream would count as a failed invocation (an ERROR log
 * and the Errors alarm) although the gateway did everything right and the charge is settled. This ends such an
 * invocation normally; any other error still fails it. The result is marked as a streaming handler again, as
 * `awslambda.streamifyResponse` only tags the function it is given.
 */
export function streamingHandler<H extends StreamingHandler>(inner: H, onDisconnect: (err: unknown) => void): H {
  const outer = async (event: LambdaFunctionURLEvent, responseStream: NodeJS.WritableStream, context: unknown) => {
    try {
      await inner(event, responseStream, context);
    } catch (err) {
      if (!isDisconnect(err)) throw err;
      onDisconnect(err);
    }
  };
  const g = globalThis as unknown as { awslambda: { streamifyResponse<T>(fn: T): T } };
  return g.awslambda.streamifyResponse(outer) as unknown as H;
}
