import type { ServerResponse } from 'node:http';
import { Writable } from 'node:stream';

/**
 * Lambda's response-streaming globals, for running RESPONSE_STREAM handlers on a plain Node HTTP server.
 * `awslambda.streamifyResponse(fn)` marks fn as a streaming handler; `HttpResponseStream.from(stream, prelude)`
 * sets the status and headers. The stream writes each chunk to the socket as it comes (no buffering), honours
 * back-pressure, and is destroyed when the client disconnects, as Lambda's own stream is.
 */
export interface Prelude {
  statusCode?: number;
  headers?: Record<string, string>;
  cookies?: string[];
}

export const STREAMING = Symbol.for('local.awslambda.streaming');

export class LocalResponseStream extends Writable {
  private prelude: Prelude = {};
  private headSent = false;

  constructor(private readonly res: ServerResponse) {
    super();
    // The stream is destroyed with an error when the client goes away, so a pipe into it stops and cancels its
    // source. Lambda's runtime owns its response stream's errors; here too an error must never be 'unhandled': a
    // client that disconnects before the handler has started piping (while the upstream is still thinking) used
    // to crash the whole local gateway. Whoever pipes into the stream still sees the error.
    this.on('error', () => undefined);
    res.on('close', () => {
      if (!res.writableFinished) this.destroy(new Error('Client disconnected'));
    });
  }

  setPrelude(prelude: Prelude): void {
    this.prelude = prelude;
  }

  private sendHead(): void {
    if (this.headSent) return;
    this.headSent = true;
    const headers: Record<string, string | string[]> = { 'content-type': 'application/octet-stream', ...this.prelude.headers };
    if (this.prelude.cookies?.length) headers['set-cookie'] = this.prelude.cookies;
    this.res.writeHead(this.prelude.statusCode ?? 200, headers);
    this.res.flushHeaders();
  }

  override _write(chunk: Buffer, _encoding: BufferEncoding, callback: (error?: Error | null) => void): void {
    this.sendHead();
    if (chunk.length === 0) {
      callback();
      return;
    }
    if (this.res.write(chunk)) callback();
    else this.res.once('drain', () => callback());
  }

  override _final(callback: (error?: Error | null) => void): void {
    this.sendHead();
    this.res.end(() => callback());
  }
}

export function installAwsLambdaShim(): void {
  const g = globalThis as unknown as { awslambda?: Record<string, unknown> };
  // Some libraries (Powertools) put an empty placeholder object here; only a complete shim counts.
  if (typeof g.awslambda?.streamifyResponse === 'function') return;
  g.awslambda = {
    ...g.awslambda,
    streamifyResponse<T extends object>(fn: T): T {
      Object.defineProperty(fn, STREAMING, { value: true });
      return fn;
    },
    HttpResponseStream: {
      from(stream: LocalResponseStream, prelude: Prelude): LocalResponseStream {
        stream.setPrelude(prelude);
        return stream;
      },
    },
  };
}

export function isStreamingHandler(fn: unknown): boolean {
  return typeof fn === 'function' && (fn as unknown as Record<symbol, unknown>)[STREAMING] === true;
}
