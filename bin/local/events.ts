import { randomUUID } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import type { APIGatewayProxyEvent, Context, LambdaFunctionURLEvent } from 'aws-lambda';

/** Builds the events AWS would deliver for an HTTP request, so the local server can call the real handlers. */

export async function readBody(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

function isTextual(contentType: string | undefined): boolean {
  return !contentType || /json|text|xml|x-www-form-urlencoded/i.test(contentType);
}

function singleHeaders(req: IncomingMessage): Record<string, string> {
  const headers: Record<string, string> = {};
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
  const url = new URL(req.url ?? '/', 'http://localhost');
  const headers = singleHeaders(req);
  const now = new Date();
  const { cookie, ...withoutCookie } = headers;
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: url.pathname,
    rawQueryString: url.search.slice(1),
    cookies: cookie ? cookie.split(/;\s*/) : undefined,
    headers: withoutCookie,
    queryStringParameters: url.search ? Object.fromEntries(url.searchParams) : undefined,
    requestContext: {
      accountId: 'anonymous',
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: 'local',
      http: {
        method: req.method ?? 'GET',
        path: url.pathname,
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

export function apiGatewayEvent(req: IncomingMessage, body: Buffer): APIGatewayProxyEvent {
  const url = new URL(req.url ?? '/', 'http://localhost');
  const headers = singleHeaders(req);
  const multi: Record<string, string[]> = {};
  for (const [k, v] of url.searchParams) (multi[k] ??= []).push(v);
  const encoded = encodeBody(body, headers['content-type']);
  return {
    httpMethod: req.method ?? 'GET',
    path: url.pathname,
    resource: url.pathname,
    headers,
    multiValueHeaders: Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, [v]])),
    queryStringParameters: url.search ? Object.fromEntries(url.searchParams) : null,
    multiValueQueryStringParameters: url.search ? multi : null,
    pathParameters: null,
    stageVariables: null,
    body: encoded.body ?? null,
    isBase64Encoded: encoded.isBase64Encoded,
    requestContext: {
      accountId: 'local',
      apiId: 'local',
      httpMethod: req.method ?? 'GET',
      path: url.pathname,
      protocol: `HTTP/${req.httpVersion}`,
      requestId: randomUUID(),
      requestTimeEpoch: Date.now(),
      resourceId: 'local',
      resourcePath: url.pathname,
      stage: 'local',
      identity: { sourceIp: req.socket.remoteAddress ?? '127.0.0.1', userAgent: headers['user-agent'] ?? null },
    } as APIGatewayProxyEvent['requestContext'],
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
