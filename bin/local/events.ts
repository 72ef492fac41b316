import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { APIGatewayProxyEvent, Context, LambdaFunctionURLEvent, ScheduledEvent } from 'aws-lambda';
import { isTextual } from '../../lambdas/http/content-type.ts';

/** Builds the events AWS would deliver for an HTTP request, so the local server can call the real handlers. */

/**
 * Reads a request body, keeping at most `limit` bytes: past that it stops buffering (a 600 MB upload must not become
 * 600 MB of memory) and returns what it has with `truncated`; the handler, seeing a body over its limit, answers 413
 * in its own envelope. Resolves undefined when the client goes away mid-upload.
 */
export function readBody(req: IncomingMessage, limit: number): Promise<{ body: Buffer; truncated: boolean } | undefined> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    const finish = (result: { body: Buffer; truncated: boolean } | undefined) => {
      req.off('data', onData).off('end', onEnd).off('error', onGone).off('close', onClose);
      resolve(result);
    };
    const onData = (chunk: Buffer) => {
      chunks.push(chunk);
      size += chunk.length;
      if (size > limit) {
        req.pause();
        finish({ body: Buffer.concat(chunks).subarray(0, limit + 1), truncated: true });
      }
    };
    const onEnd = () => finish({ body: Buffer.concat(chunks), truncated: false });
    const onGone = () => finish(undefined);
    const onClose = () => {
      if (!req.complete) finish(undefined);
    };
    req.on('data', onData).on('end', onEnd).on('error', onGone).on('close', onClose);
  });
}

/**
 * Path and query of a request target as the client sent it. Parsing it with `new URL(target, base)` would read
 * `//v1/messages` as a host named v1; AWS hands handlers the raw path, and so does this.
 */
export function splitTarget(target: string | undefined): { path: string; query: string } {
  let rest = target ?? '/';
  if (!rest.startsWith('/')) {
    // Absolute form (`http://host/path`, sent to proxies) or something stranger: keep only what follows the authority.
    const match = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*(.*)$/i.exec(rest);
    rest = match ? match[1] || '/' : `/${rest}`;
  }
  const q = rest.indexOf('?');
  return q === -1 ? { path: rest, query: '' } : { path: rest.slice(0, q), query: rest.slice(q + 1) };
}

function singleHeaders(req: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = Object.create(null) as Record<string, string>;
  for (const [name, value] of Object.entries(req.headers)) {
    if (value !== undefined) headers[name.toLowerCase()] = Array.isArray(value) ? value.join(',') : value;
  }
  return headers;
}

function encodeBody(body: Buffer, contentType: string | undefined): { body?: string; isBase64Encoded: boolean } {
  if (body.length === 0) return { isBase64Encoded: false };
  return isTextual(contentType) ? { body: body.toString('utf8'), isBase64Encoded: false } : { body: body.toString('base64'), isBase64Encoded: true };
}

export function functionUrlEvent(req: IncomingMessage, body: Buffer): LambdaFunctionURLEvent {
  const { path, query } = splitTarget(req.url);
  const headers = singleHeaders(req);
  const now = new Date();
  const { cookie, ...withoutCookie } = headers;
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: path,
    rawQueryString: query,
    cookies: cookie ? cookie.split(/;\s*/) : undefined,
    headers: withoutCookie,
    queryStringParameters: query ? Object.fromEntries(new URLSearchParams(query)) : undefined,
    requestContext: {
      accountId: 'anonymous',
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: 'local',
      http: {
        method: req.method ?? 'GET',
        path,
        protocol: `HTTP/${req.httpVersion}`,
        sourceIp: req.socket.remoteAddress ?? '127.0.0.1',
        userAgent: headers['user-agent'] ?? '',
      },
      requestId: randomUUID(),
      routeKey: '$default',
      stage: '$default',
      time: now.toISOString(),
      timeEpoch: now.getTime(),
    },
    ...encodeBody(body, headers['content-type']),
  } as LambdaFunctionURLEvent;
}

/**
 * The values of an API Gateway resource path's parameters in a request path (`/incubate/vessel/{vesselId}` and
 * `/incubate/vessel/v_1` → `{ vesselId: 'v_1' }`; `{name+}` takes the rest of the path), percent-decoded; null when the
 * resource has none, as in API Gateway's event.
 */
export function pathParametersOf(resource: string, path: string): Record<string, string> | null {
  const want = resource.split('/').filter(Boolean);
  const got = path.split('/').filter(Boolean);
  const params: Record<string, string> = {};
  want.forEach((segment, i) => {
    const name = /^\{([^}+]+)(\+)?\}$/.exec(segment);
    if (!name) return;
    const raw = name[2] ? got.slice(i).join('/') : (got[i] ?? '');
    try {
      params[name[1]!] = decodeURIComponent(raw);
    } catch {
      params[name[1]!] = raw;
    }
  });
  return Object.keys(params).length ? params : null;
}

/**
 * The event API Gateway's REST API hands a Lambda proxy integration. `resource` is the API resource the request
 * matched (`/incubate/vessel/{vesselId}`): the event's `resource`, `requestContext.resourcePath` and
 * `pathParameters` come from it, as deployed; without one (a path no route declares, which the deployed API answers
 * itself) they fall back to the path.
 */
export function apiGatewayEvent(req: IncomingMessage, body: Buffer, resource?: string): APIGatewayProxyEvent {
  const { path, query } = splitTarget(req.url);
  const searchParams = new URLSearchParams(query);
  const headers = singleHeaders(req);
  // No prototype: a parameter named `__proto__` (or `constructor`) is a parameter like any other.
  const multi: Record<string, string[]> = Object.create(null) as Record<string, string[]>;
  for (const [k, v] of searchParams) {
    multi[k] ??= [];
    multi[k].push(v);
  }
  const encoded = encodeBody(body, headers['content-type']);
  return {
    httpMethod: req.method ?? 'GET',
    path,
    resource: resource ?? path,
    headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]])),
    queryStringParameters: query ? Object.fromEntries(searchParams) : null,
    multiValueQueryStringParameters: query ? multi : null,
    pathParameters: resource ? pathParametersOf(resource, path) : null,
    stageVariables: null,
    body: encoded.body ?? null,
    isBase64Encoded: encoded.isBase64Encoded,
    requestContext: {
      accountId: 'local',
      apiId: 'local',
      httpMethod: req.method ?? 'GET',
      path,
      protocol: `HTTP/${req.httpVersion}`,
      requestId: randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'local',
      resourcePath: resource ?? path,
      stage: 'local',
      identity: { sourceIp: req.socket.remoteAddress ?? '127.0.0.1', userAgent: headers['user-agent'] ?? null },
    } as APIGatewayProxyEvent['requestContext'],
  };
}

/** The event an EventBridge rule on a schedule delivers to its target function (the rule is named after it). */
export function scheduledEvent(functionName: string, now = new Date(), region = 'us-east-1'): ScheduledEvent {
  return {
    version: '0',
    id: randomUUID(),
    'detail-type': 'Scheduled Event',
    source: 'aws.events',
    account: '000000000000',
    // EventBridge gives the time to the second.
    time: `${now.toISOString().slice(0, 19)}Z`,
    region,
    resources: [`arn:aws:events:${region}:000000000000:rule/local-${functionName}`],
    detail: {},
  };
}

export function lambdaContext(functionName: string, timeoutMs = 900_000): Context {
  const started = Date.now();
  return {
    callbackWaitsForEmptyEventLoop: false,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:local:000000000000:function:${functionName}`,
    memoryLimitInMB: '1024',
    awsRequestId: randomUUID(),
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, timeoutMs - (Date.now() - started)),
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
}
