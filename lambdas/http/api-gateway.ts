import type { APIGatewayProxyEvent, APIGatewayProxyResult } from 'aws-lambda';

/** An API Gateway REST (proxy integration) event as a web Request. */
export function requestFromApiGateway(event: APIGatewayProxyEvent): Request {
  const headers = new Headers();
  for (const [name, value] of Object.entries(event.headers ?? {})) if (value !== undefined) headers.set(name, value);
  const params = new URLSearchParams();
  for (const [name, values] of Object.entries(event.multiValueQueryStringParameters ?? {})) {
    for (const v of values ?? []) params.append(name, v);
  }
  if (!event.multiValueQueryStringParameters) {
    for (const [name, value] of Object.entries(event.queryStringParameters ?? {})) if (value !== undefined) params.append(name, value);
  }
  const query = params.size ? `?${params}` : '';
  const host = headers.get('host') ?? 'localhost';
  const hasBody = event.body !== null && event.body !== undefined && event.httpMethod !== 'GET' && event.httpMethod !== 'HEAD';
  return new Request(`https://${host}${event.path}${query}`, {
    method: event.httpMethod,
    headers,
    body: hasBody ? (event.isBase64Encoded ? Buffer.from(event.body!, 'base64') : event.body) : undefined,
  });
}

export async function apiGatewayResultFrom(res: Response): Promise<APIGatewayProxyResult> {
  const headers: Record<string, string> = {};
  res.headers.forEach((value, name) => {
    headers[name] = value;
  });
  return { statusCode: res.status, headers, body: await res.text() };
}
