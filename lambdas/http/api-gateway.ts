import type { APIGatewayProxyEvent, APIGatewayProxyResult } from 'aws-lambda';
import { isTextual } from './content-type.ts';
import { buildRequest, headersFrom } from './request.ts';

/** An API Gateway REST (proxy integration) event as a web Request (a refusal for what cannot be one). */
export function requestFromApiGateway(event: APIGatewayProxyEvent): Request {
  const params = new URLSearchParams();
  for (const [name, values] of Object.entries(event.multiValueQueryStringParameters ?? {})) {
    for (const v of values ?? []) params.append(name, v);
  }
  if (!event.multiValueQueryStringParameters) {
    for (const [name, value] of Object.entries(event.queryStringParameters ?? {})) if (value !== undefined) params.append(name, value);
  }
  return buildRequest({
    method: event.httpMethod,
    path: event.path,
    query: params.size ? params.toString() : undefined,
    headers: headersFrom(event.headers ?? {}),
    body: event.body === null || event.body === undefined ? undefined : event.isBase64Encoded ? Buffer.from(event.body, 'base64') : event.body,
  });
}

/**
 * A web Response as an API Gateway proxy result: Set-Cookie lines kept apart in `multiValueHeaders` (one header
 * value cannot hold several), and a body that is not text base64-encoded, as API Gateway expects.
 */
export async function apiGatewayResultFrom(res: Response): Promise<APIGatewayProxyResult> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value;
  });
  const cookies = res.headers.getSetCookie();
  const multi = cookies.length ? { multiValueHeaders: { 'set-cookie': cookies } } : {};
  if (isTextual(res.headers.get('content-type'))) return { statusCode: res.status, headers, ...multi, body: await res.text() };
  return { statusCode: res.status, headers, ...multi, body: Buffer.from(await res.arrayBuffer()).toString('base64'), isBase64Encoded: true };
}
