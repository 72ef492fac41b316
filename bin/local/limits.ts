/**
 * The request limits AWS applies before a handler runs, applied locally the same way (docs/local.md, "As strict as
 * AWS"), with the answer a client would get from AWS — not the handler's envelope, which AWS never reaches.
 */

/** Lambda's synchronous invocation payload: the event as JSON (body, headers, base64 included), 6 MB. */
export const MAX_INVOCATION_PAYLOAD_BYTES = 6 * 1024 * 1024;

/** What AWS answers instead of invoking a handler. */
export interface AwsRefusal {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** The size of an invocation's payload as Lambda measures it: the event's JSON. */
function payloadBytes(event: unknown, bodyBytes: number): number {
  // An event can only be over the limit with a body near it; headers alone are capped far below (Node: 16 KiB).
  if (bodyBytes < MAX_INVOCATION_PAYLOAD_BYTES / 2) return 0;
  return Buffer.byteLength(JSON.stringify(event));
}

/** A function URL refuses an invocation whose event is over 6 MB with 413, before the function runs. */
export function functionUrlPayloadRefusal(event: unknown, bodyBytes: number, truncated: boolean): AwsRefusal | undefined {
  if (!truncated && payloadBytes(event, bodyBytes) <= MAX_INVOCATION_PAYLOAD_BYTES) return undefined;
  return {
    statusCode: 413,
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ Message: `Request must be smaller than ${MAX_INVOCATION_PAYLOAD_BYTES} bytes for the InvokeFunction operation` }),
  };
}

/**
 * API Gateway's REST API in front of a Lambda proxy integration: a request body over 10 MB is refused (413, its
 * REQUEST_TOO_LARGE gateway response); an event over Lambda's 6 MB cannot be invoked (502, INTEGRATION_FAILURE); an
 * integration that has not answered within 29 s is answered 504 (INTEGRATION_TIMEOUT) while the function runs on.
 */
export const apiGatewayLimits = {
  maxBodyBytes: 10 * 1024 * 1024,
  integrationTimeoutMs: 29_000,
  tooLarge: { statusCode: 413, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'Request Too Long' }) },
  integrationFailure: { statusCode: 502, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'Internal server error' }) },
  timedOut: { statusCode: 504, headers: { 'content-type': 'application/json' }, body: JSON.stringify({ message: 'Endpoint request timed out' }) },
  payloadRefused(event: unknown, bodyBytes: number): boolean {
    return payloadBytes(event, bodyBytes) > MAX_INVOCATION_PAYLOAD_BYTES;
  },
} as const satisfies Record<string, unknown>;
