import { anthropicError } from '../providers/errors.ts';
import type { AnthropicErrorBody, AnthropicErrorType } from '../providers/types.ts';

/** An error response in Anthropic's envelope, as the SDKs expect it. */
export function errorResponse(status: number, type: AnthropicErrorType, message: string): Response {
  return envelopeResponse(status, anthropicError(type, message));
}

export function envelopeResponse(status: number, body: AnthropicErrorBody): Response {
  return Response.json(body, { status, headers: { 'x-should-retry': String(status === 429 || status === 529 || status >= 500) } });
}
