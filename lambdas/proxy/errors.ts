import type { ClientError, ClientErrorCode } from '../http/errors.ts';
import { anthropicError } from '../providers/errors.ts';
import type { AnthropicErrorBody, AnthropicErrorType } from '../providers/types.ts';

/** An error response in Anthropic's envelope, as the SDKs expect it. */
export function errorResponse(status: number, type: AnthropicErrorType, message: string, headers: Record<string, string> = {}): Response {
  return envelopeResponse(status, anthropicError(type, message), headers);
}

/**
 * Anthropic's SDKs retry when `x-should-retry` says so (and otherwise on 429 and 5xx); a refusal that waiting cannot
 * cure must say `false`, or a client like Claude Code retries it for minutes. Callers override it where they know.
 */
export function envelopeResponse(status: number, body: AnthropicErrorBody, headers: Record<string, string> = {}): Response {
  return Response.json(body, {
    status,
    headers: { 'x-should-retry': String(status === 429 || status === 529 || status >= 500), ...headers },
  });
}

const TYPES: Record<ClientErrorCode, AnthropicErrorType> = {
  invalid_request: 'invalid_request_error',
  authentication: 'authentication_error',
  not_found: 'not_found_error',
  method_not_allowed: 'invalid_request_error',
  request_too_large: 'request_too_large',
  rate_limited: 'rate_limit_error',
};

export function clientErrorResponse(err: ClientError): Response {
  return errorResponse(err.status, TYPES[err.code], err.message, err.headers);
}
