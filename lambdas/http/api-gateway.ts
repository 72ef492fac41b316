import type { APIGatewayProxyEvent, APIGatewayProxyResult } from 'aws-lambda';
import { buildRequest, headersFrom } from './request.ts';

/** An API Gateway REST (proxy integration) event as a web Request (a ClientError for what cannot be one). */
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

export async function apiGatewayResultFrom(res: Response): Promise<APIGatewayProxyResult> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { statusCode: res.status, headers, body: await res.text() };
}
