import { randomBytes } from 'node:crypto';
import { clock } from '../config/clock.ts';
import { responseDelivered } from '../instance/unfinished.ts';
import { withAccessRecord, writeAccessLog, type RequestAccess } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { emit } from '../observability/metrics.ts';
import { deploymentRefusal } from '../auth/origins.ts';
import { refuseDeclaredOversize } from './body.ts';
import { addCorsHeaders, isPreflight, preflightResponse } from './cors.ts';
import { Refused, type Refusal } from '../refusals/refusal.ts';
import type { Router } from './router.ts';

/**
 * What both apps (proxy, conjure) wear, in one place: a `request-id` on every response, typed refusals rendered in
 * the app's own envelope, unexpected failures answered as the app's 500 (and logged as ERROR), request and 5xx
 * counts, and one access-log line per request.
 */
export interface AppSpec {
  router: Router;
  /**
   * A refusal as the app's response, in its own envelope (lambdas/refusals). `req`: the request when it could be
   * built, for an app whose routes speak more than one envelope (the channeling URL's OpenAI-compatible route).
   */
  renderRefusal(refusal: Refusal, req?: Request): Response;
  /** The app's 500 for a failure of the gateway itself. */
  internalError(req?: Request): Response;
  /** The error type an error body names, for the access log. */
  errorTypeOf(body: unknown): string | undefined;
}

export interface HttpApp {
  /** The request, or a builder that may throw a refusal when the event cannot be a Request (e.g. TRACE). */
  fetch(input: Request | (() => Request)): Promise<Response>;
  /** The routes it serves (method, path with `{name}` parameters): what the OpenAPI document must describe. */
  readonly routes: ReadonlyArray<{ method: string; path: string }>;
}

export function httpApp(spec: AppSpec): HttpApp {
  return {
    routes: spec.router.declared(),
    async fetch(input) {
      const started = clock.now();
      const record: RequestAccess = { unit: 'request', requestId: `req_gw_${randomBytes(12).toString('hex')}`, method: '-', path: '-' };
      return withAccessRecord(record, async () => {
        emit('Requests', 1);
        let res: Response;
        let req: Request | undefined;
        try {
          req = typeof input === 'function' ? input() : input;
          record.method = req.method;
          record.path = new URL(req.url).pathname;
          // A page the deployment does not serve (CORS_ORIGINS) gets no further, preflight or not.
          const refused = deploymentRefusal(req.headers.get('origin'));
          if (refused) throw new Refused(refused);
          // On every route, bodies or not (readBodyText also checks what actually came).
          refuseDeclaredOversize(req);
          const methods = isPreflight(req) ? spec.router.methodsAt(req) : [];
          res = methods.length ? preflightResponse(req, methods) : await spec.router.handle(req);
        } catch (err) {
          if (err instanceof Refused) {
            res = spec.renderRefusal(err.refusal, req);
          } else {
            logger.error('request failed', { error: err as Error, requestId: record.requestId, path: record.path });
            res = spec.internalError(req);
          }
        }
        if (res.status >= 500) emit('Errors', 1);
        record.status = res.status;
        const headers = new Headers(res.headers);
        headers.set('request-id', record.requestId);
        if (req) addCorsHeaders(req, headers);
        if (res.status >= 400 && headers.get('content-type')?.includes('json')) {
          // Error bodies are small JSON: read once here so the log names the error type.
          const text = await res.text();
          try {
            record.error = spec.errorTypeOf(JSON.parse(text));
          } catch {
            // Not ours to judge: a passthrough body that is not JSON.
          }
          record.totalMs = clock.now() - started;
          writeAccessLog(record);
          return new Response(text, { status: res.status, statusText: res.statusText, headers });
        }
        return new Response(logWhenDelivered(res.body, record, started), { status: res.status, statusText: res.statusText, headers });
      });
    },
  };
}

/**
 * Passes the body through; once it has been delivered or abandoned, tells the registry of work after the response
 * (instance/unfinished.ts), keyed by the request's access record: the tasks that waited for delivery start (the
 * proxy's JSON settlement), and the access line is written when they — and anything else holding the response, such
 * as a stream's settlement — have ended, so the line carries the final charge.
 */
function logWhenDelivered(body: ReadableStream<Uint8Array> | null, record: RequestAccess, started: number): ReadableStream<Uint8Array> | null {
  // Once: a client that leaves while a read is pending ends the body twice — `cancel`, and the pending read resolving
  // as done — and each used to write the line (one of them before the stream's settlement had landed).
  let delivered = false;
  const done = () => {
    if (delivered) return;
    delivered = true;
    record.totalMs = clock.now() - started;
    void responseDelivered(record, () => writeAccessLog(record));
  };
  if (!body) {
    done();
    return null;
  }
  const reader = body.getReader();
  return new ReadableStream<Uint8Array>(
    {
      async pull(controller) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          done();
          controller.error(err);
          return;
        }
        if (chunk.done) {
          done();
          controller.close();
        } else controller.enqueue(chunk.value);
      },
      async cancel(reason) {
        record.clientClosed = true;
        await reader.cancel(reason).catch(() => undefined);
        done();
      },
    },
    { highWaterMark: 0 },
  );
}
