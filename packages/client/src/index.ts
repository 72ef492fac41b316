/**
 * @prompt-gateway/client — the prompt gateway's kit for app developers.
 *
 * Backend: `mintUserToken` (an end user's token) and `verifyWebhook` (a vessel's callback).
 * Front end: `createGatewayClient` (`/prompt` JSON and SSE, `/incubate`, vessels, `/usage`, `/ws` sessions).
 *
 * Web APIs only (fetch, WebCrypto, TextEncoder, WebSocket): Node ≥ 18, browsers, Deno, Bun, edge runtimes.
 */
export { mintUserToken, parseExpiresIn, decodeUserToken, BUDGET_WINDOWS } from './token.js';
export type { Budget, BudgetWindow, MintUserTokenOptions, TokenAlgorithm, UserTokenClaims } from './token.js';
export { verifyWebhook, WebhookVerificationError, DEFAULT_TOLERANCE_SECONDS } from './webhook.js';
export type { VerifyWebhookOptions, WebhookHeaders, WebhookPayload, WebhookVerificationErrorCode } from './webhook.js';
export { createGatewayClient, PromptStream } from './client.js';
export type { GatewayClient, GatewayClientOptions, RequestOptions, TokenSource, WaitForVesselOptions } from './client.js';
export type {
  ClientToolCall,
  GatewaySession,
  ServerFrame,
  SessionClose,
  SessionInit,
  SessionState,
  ToolContentBlock,
  ToolOutput,
  TurnResult,
  WebSocketConstructor,
  WebSocketLike,
} from './session.js';
export { GatewayError, SessionError } from './errors.js';
export type { ErrorBodies, ErrorBody, KnownErrorCode, MeterFigures, OtherErrorBody } from './errors.js';
export { SseParser } from './sse.js';
export type { SseEvent } from './sse.js';
export type * from './types.js';
