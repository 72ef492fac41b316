import type { ClientError, ClientErrorCode } from '../http/errors.ts';

/** Conjure endpoints answer errors as `{ error: <code or message>, message?, ...details }` (interface, Errors). */
export function conjureError(status: number, error: string, message?: string, extra: Record<string, unknown> = {}, headers: Record<string, string> = {}): Response {
  return Response.json({ error, ...(message ? { message } : {}), ...extra }, { status, headers });
}

const CODES: Record<ClientErrorCode, string> = {
  invalid_request: 'invalid_request',
  authentication: 'invalid_token',
  not_found: 'not_found',
  method_not_allowed: 'method_not_allowed',
  request_too_large: 'request_too_large',
  rate_limited: 'rate_limited',
};

export function clientErrorResponse(err: ClientError): Response {
  return conjureError(err.status, CODES[err.code], err.message, {}, err.headers);
}
