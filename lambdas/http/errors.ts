/**
 * A refusal the core decided on, thrown from anywhere below a route and rendered once, in the app's own envelope
 * (the proxy's Anthropic envelope, conjure's `{error, message}`) by `httpApp`. `code` is the generic kind; each app
 * maps it to its own error type.
 */
export type ClientErrorCode =
  | 'invalid_request'
  | 'authentication'
  | 'not_found'
  | 'method_not_allowed'
  | 'request_too_large'
  | 'rate_limited';

export class ClientError extends Error {
  constructor(
    readonly status: number,
    readonly code: ClientErrorCode,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = 'ClientError';
  }
}
