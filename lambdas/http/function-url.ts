import { Readable } from 'node:stream';
import type { LambdaFunctionURLEvent } from 'aws-lambda';
import { buildRequest, headersFrom } from './request.ts';

/**
 * A function-URL event as a web Request (throws a ClientError for what cannot be one; the app renders it). `signal`
 * aborts the Request when the client goes away.
 */
export function requestFromFunctionUrl(event: LambdaFunctionURLEvent, signal?: AbortSignal): Request {
  const headers = headersFrom(event.headers ?? {});
  if (event.cookies?.length) headers.set('cookie', event.cookies.join('; '));
  return buildRequest({
    method: event.requestContext?.http?.method ?? 'GET',
    path: event.rawPath ?? '/',
    query: event.rawQueryString,
    headers,
    body: event.body === undefined || event.body === null ? undefined : event.isBase64Encoded ? Buffer.from(event.body, 'base64') : event.body,
    signal,
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

type StreamingHandler = (event: LambdaFunctionURLEvent, responseStream: NodeJS.WritableStream, context: unknown) => Promise<void>;

/** Error codes of a response pipe broken by the client going away (not by the gateway). */
const DISCONNECT_CODES = new Set(['ERR_STREAM_PREMATURE_CLOSE', 'ERR_STREAM_DESTROYED', 'ERR_STREAM_WRITE_AFTER_END', 'EPIPE', 'ECONNRESET']);

function isDisconnect(err: unknown): boolean {
  const e = err as { code?: string; message?: string } | undefined;
  return Boolean(e && ((e.code && DISCONNECT_CODES.has(e.code)) || e.message === 'Client disconnected'));
}

const CLIENT_GONE = Symbol.for('prompt-gateway.clientGone');

/** The signal `streamingHandler` puts on the invocation's context: aborted when the client goes away early. */
export function clientGoneSignal(context: unknown): AbortSignal | undefined {
  return (context as Record<symbol, AbortSignal | undefined> | undefined)?.[CLIENT_GONE];
}

/**
 * Wraps a middy RESPONSE_STREAM handler for the two things only the response stream knows about:
 * - a client that goes away before the answer is complete. The stream closes (or errors) unfinished; the handler
 *   learns it through `clientGoneSignal(context)`, which the adapter passes on as the Request's signal, so a call
 *   still waiting on the upstream is abandoned at once instead of running (and being billed) for nobody.
 * - the broken pipe that follows. middy rethrows it as the invocation's error, so every abandoned stream would count
 *   as a failed invocation (an ERROR log and the Errors alarm) although the gateway did everything right and the
 *   charge is settled. Such an invocation ends normally; any other error still fails it.
 * The result is marked as a streaming handler again, as `awslambda.streamifyResponse` only tags the function it is
 * given.
 */
export function streamingHandler<H extends StreamingHandler>(inner: H, onDisconnect: (err: unknown) => void): H {
  const outer = async (event: LambdaFunctionURLEvent, responseStream: NodeJS.WritableStream, context: unknown) => {
    const gone = new AbortController();
    const stream = responseStream as NodeJS.WritableStream & { writableFinished?: boolean };
    const onGone = () => {
      if (!stream.writableFinished) gone.abort(new Error('Client disconnected'));
    };
    stream.once('close', onGone);
    stream.once('error', onGone);
    if (context && typeof context === 'object') Object.defineProperty(context, CLIENT_GONE, { value: gone.signal, configurable: true });
    try {
      await inner(event, responseStream, context);
    } catch (err) {
      if (!isDisconnect(err) && !gone.signal.aborted) throw err;
      onDisconnect(err);
    } finally {
      stream.removeListener('close', onGone);
      stream.removeListener('error', onGone);
    }
  };
  const g = globalThis as unknown as { awslambda: { streamifyResponse<T>(fn: T): T } };
  return g.awslambda.streamifyResponse(outer) as unknown as H;
}
