import { isDeepStrictEqual } from 'node:util';
import { fileURLToPath } from 'node:url';
import * as z from 'zod';
import {
  createDocument,
  createSchema,
  type ZodOpenApiObject,
  type ZodOpenApiPathItemObject,
  type ZodOpenApiResponseObject,
  type ZodOpenApiResponsesObject,
} from 'zod-openapi';
import packageJson from '../../package.json' with { type: 'json' };
import { HttpTool, PromptBody, RemoteMcpServer, ServerTool } from '../agent/options.ts';
import { CountTokensBody, MessagesBody } from '../proxy/schema.ts';
import { BatchBody, BatchItem, IncubateBody } from '../vessels/request.ts';
import {
  AnthropicError,
  BatchResponse,
  ChatCompletion,
  ChatCompletionsRequest,
  ConcurrentLimitReached,
  ConjureError,
  CountTokensAnswer,
  DeveloperBudgetExhausted,
  Message,
  Model,
  ModelList,
  OpenAIError,
  PromptAnswer,
  PromptStreamDone,
  PromptStreamMessage,
  QueueResponseSchema,
  RunFailure,
  TokenError,
  UsageReportSchema,
  UserBudgetExhausted,
  VesselNotCancelable,
  VesselRecord,
} from './schemas.ts';

/**
 * The OpenAPI 3.1 document of the gateway's HTTP API (docs/openapi.json, served at GET /openapi.json on the conjure
 * URL), built by zod-openapi from the zod schemas the routes validate their bodies with, and the answers' schemas of
 * schemas.ts. `npm run openapi` writes it; test/openapi checks the file is what this builds, that it validates, and that
 * its paths are exactly the routes the three apps serve.
 */

export const OPENAPI_FILE = fileURLToPath(new URL('../../docs/openapi.json', import.meta.url));

/** The document as the file holds it: 2-space JSON, one final newline. */
export function renderOpenApi(): string {
  return `${JSON.stringify(openApiDocument(), null, 2)}\n`;
}

// ————— servers: one local server for every route; each URL's deployed form as the stack outputs it —————

const LOCAL = { url: 'http://127.0.0.1:8787', description: 'The local runtime (`npm start`): every route on one server.' };
const region = { default: 'us-east-1', description: 'The stack’s region (stack output `Region`).' };
const functionUrl = (output: string) => ({
  url: 'https://{urlId}.lambda-url.{region}.on.aws',
  description: `Deployed: the stack output \`${output}\` (a Lambda function URL with response streaming).`,
  variables: { urlId: { default: 'url-id', description: `The function URL’s id, from \`${output}\`.` }, region },
});
const SERVERS = {
  channeling: [LOCAL, functionUrl('ChannelingUrl')],
  prompt: [LOCAL, functionUrl('PromptUrl')],
  conjure: [
    LOCAL,
    {
      url: 'https://{restApiId}.execute-api.{region}.amazonaws.com/{stage}',
      description: 'Deployed: the stack output `ConjureUrl` (an API Gateway REST API).',
      variables: {
        restApiId: { default: 'api-id', description: 'The REST API’s id, from `ConjureUrl`.' },
        region,
        stage: { default: 'prod', description: 'The gateway stage (`cdk deploy -c stage=…`).' },
      },
    },
  ],
};

// ————— security: where the token goes —————

/** Security requirements: any one of them suffices; none at all, no scheme. */
type Security = Array<Record<string, string[]>>;

const TOKEN = 'The end user’s token: an HMAC-signed JWT minted by the project (docs/contract.md, "Tokens"; docs/api.md, "Token").';
const securitySchemes = {
  apiKey: { type: 'apiKey', in: 'header', name: 'x-api-key', description: `${TOKEN} Where an Anthropic SDK puts its API key.` },
  bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT', description: `${TOKEN} As \`Authorization: Bearer <token>\`.` },
} as const;
/** The channeling URL reads either header; both at once must carry the same token (docs/api.md, "Authentication"). */
const PROXY_SECURITY: Security = [{ apiKey: [] }, { bearerAuth: [] }];
const BEARER_SECURITY: Security = [{ bearerAuth: [] }];
/**
 * No scheme: the token travels in the JSON body, `options.token` (OpenAPI has no scheme for a body field; the
 * operation's description says so).
 */
const BODY_TOKEN_SECURITY: Security = [];
const IN_BODY = '**Token:** in the body, `options.token` — not in a header.';

// ————— headers —————

const header = (description: string, schema: Record<string, unknown>) => ({ description, schema });
const headers = {
  RequestId: header('The request’s id (also in the access log): on every answer, errors and streams included.', {
    type: 'string',
    pattern: '^req_gw_[0-9a-f]{24}$',
  }),
  ShouldRetry: header('Whether an Anthropic SDK should retry: `true` for 429 (unless the budget is spent), 529 and 5xx.', {
    type: 'string',
    enum: ['true', 'false'],
  }),
  RetryAfter: header('Seconds to wait before retrying.', { type: 'string', pattern: '^[0-9]+$' }),
  Cost: header('What this request cost, in microdollars (JSON answers).', { type: 'string', pattern: '^[0-9]+$' }),
  BudgetRemaining: header('What is left of the window’s AI budget after this request, in microdollars (JSON answers).', {
    type: 'string',
    pattern: '^[0-9]+$',
  }),
  MaxTokens: header('Present when `max_tokens` was lowered to fit the budget: the value forwarded.', { type: 'string', pattern: '^[0-9]+$' }),
  TokenCount: header('`estimate` when the count is the gateway’s own estimate (a provider without a count endpoint).', {
    type: 'string',
    enum: ['estimate'],
  }),
  SessionId: header('The run’s session id, from the start (also in the answer).', { type: 'string' }),
  IdempotentReplayed: header('`true` on a replay of an idempotency key with the same body: nothing new was queued.', {
    type: 'string',
    enum: ['true'],
  }),
  CacheControl: header('How long the document may be cached.', { type: 'string' }),
};
const ref = (name: keyof typeof headers) => ({ $ref: `#/components/headers/${name}` });
const REQUEST_ID = { 'request-id': ref('RequestId') };

// ————— responses —————

const json = (schema: z.ZodType) => ({ content: { 'application/json': { schema } } });

/** An error of the channeling URL, in Anthropic's envelope. */
function anthropicError(id: string, description: string, extra: Record<string, unknown> = {}): ZodOpenApiResponseObject {
  return { id, description, headers: { ...REQUEST_ID, 'x-should-retry': ref('ShouldRetry'), ...extra }, ...json(AnthropicError) };
}
const PROXY_ERRORS = {
  400: anthropicError(
    'AnthropicBadRequest',
    '`invalid_request_error`: the body (validation, nesting over 100 levels), an unpriced model, a missing project key, a request the model’s provider cannot carry, or the provider’s 400/422.',
  ),
  401: anthropicError('AnthropicUnauthorized', '`authentication_error`: the token is missing, invalid or expired, or two different credentials were sent.'),
  403: anthropicError('AnthropicForbidden', '`permission_error`: a page whose `Origin` the project, the token or the deployment does not allow.'),
  404: anthropicError('AnthropicNotFound', '`not_found_error`: an unknown model (`model: <id>`), or the provider’s 404.'),
  413: anthropicError('AnthropicTooLarge', '`request_too_large`: the body is over 6 MB (6,291,456 bytes), or the provider’s 413.'),
  429: anthropicError(
    'AnthropicRateLimited',
    '`rate_limit_error`: the AI budget is spent or too low for the request’s smallest form (`x-should-retry: false`, `retry-after` = seconds to the reset), held by requests in flight (`x-should-retry: true`, `retry-after: 1`), or the provider’s 429.',
    { 'retry-after': ref('RetryAfter') },
  ),
  500: anthropicError('AnthropicServerError', '`api_error`: the provider failed, could not be reached or timed out, rejected the key, or the gateway failed.'),
  529: anthropicError('AnthropicOverloaded', '`overloaded_error`: the provider is overloaded.'),
};

/** An error of the OpenAI-compatible route, in OpenAI's envelope (docs/openai.md, "Errors"). */
function openaiError(id: string, description: string, extra: Record<string, unknown> = {}): ZodOpenApiResponseObject {
  return { id, description, headers: { ...REQUEST_ID, 'x-should-retry': ref('ShouldRetry'), ...extra }, ...json(OpenAIError) };
}
const OPENAI_ERRORS = {
  400: openaiError(
    'OpenAIBadRequest',
    '`invalid_request_error`, `param` naming the field: the body, a field Claude cannot carry (`logprobs`, `n` > 1…), a field the gateway cannot meter (audio, priority processing), `n` > 1 for a model not OpenAI’s, or the provider’s 400 (OpenAI’s own `param` and `code` kept).',
  ),
  401: openaiError('OpenAIUnauthorized', '`invalid_api_key`: the token is missing, invalid, expired or revoked (the message says which).'),
  403: openaiError('OpenAIForbidden', '`origin_not_allowed`: a page whose `Origin` the project, the token or the deployment does not allow.'),
  413: openaiError('OpenAITooLarge', '`request_too_large`: the body is over 6 MB.'),
  429: openaiError(
    'OpenAIRateLimited',
    '`insufficient_quota`: the AI budget is spent (`x-should-retry: false`, `retry-after` = seconds to the reset); `rate_limit_exceeded`: held by requests in flight, or the provider’s 429.',
    { 'retry-after': ref('RetryAfter') },
  ),
  500: openaiError('OpenAIServerError', '`api_error`: the gateway failed.'),
  502: openaiError('OpenAIBadGateway', '`api_error`: the provider failed, could not be reached or timed out.'),
  503: openaiError('OpenAIOverloaded', '`api_error`, code `overloaded`: the provider is overloaded (Anthropic’s 529).'),
};

/** An error of the conjure and prompt URLs, in the conjure envelope. */
function conjureError(id: string, description: string, schema: z.ZodType = ConjureError, extra: Record<string, unknown> = {}): ZodOpenApiResponseObject {
  return { id, description, headers: { ...REQUEST_ID, ...extra }, ...json(schema) };
}
const CONJURE_ERRORS = {
  400: conjureError(
    'ConjureBadRequest',
    '`invalid_request` (the message names the field) or `missing_idempotency_key`; a body that is not JSON, or nested over 100 levels.',
  ),
  401: conjureError('ConjureUnauthorized', 'The token is missing, invalid or expired.', TokenError),
  402: conjureError('ConjurePlanSpent', 'The developer’s monthly compute plan is spent.', DeveloperBudgetExhausted),
  403: conjureError(
    'ConjureForbidden',
    '`origin_not_allowed`: a page whose `Origin` the project, the token or the deployment (`CORS_ORIGINS`) does not allow; before any work.',
  ),
  404: conjureError('VesselNotFound', '`vessel_not_found`: no vessel with that id that this token may see — absent, another user’s, or no valid token.'),
  409: conjureError('IdempotencyKeyConflict', '`idempotency_key_conflict`: the key was used before with another body, or by another user of the project.'),
  413: conjureError(
    'ConjureTooLarge',
    '`request_too_large`: the body is over 6 MB, or the vessel would be larger than its record may be (the message says by how much).',
  ),
  415: conjureError(
    'UnsupportedMediaType',
    '`unsupported_media_type`: the body is not sent as `application/json` (parameters allowed, any letter case); checked before the body or the token is read.',
  ),
  429: conjureError(
    'ConjureRateLimited',
    'The developer’s tier is fully in use (`concurrent_limit_reached`), or the user’s budget is spent or held (`user_budget_exhausted`).',
    z.union([ConcurrentLimitReached, UserBudgetExhausted]),
    { 'retry-after': ref('RetryAfter') },
  ),
  500: conjureError('ConjureServerError', '`internal_error`: the gateway failed.'),
  503: conjureError('TriggerFailed', '`trigger_failed`: the run queue or the scheduler did not take the vessel. Nothing was kept; retry with the same key.'),
};
const VESSEL_NOT_CANCELABLE = conjureError('VesselNotCancelable', 'The vessel has already ended.', VesselNotCancelable);

/** The errors an operation can answer, by status. */
function pick<S extends number>(errors: Record<S, ZodOpenApiResponseObject>, ...statuses: S[]): ZodOpenApiResponsesObject {
  return Object.fromEntries(statuses.map((status) => [String(status), errors[status]])) as ZodOpenApiResponsesObject;
}

// ————— operations —————

const ANTHROPIC_HEADERS = z.object({
  'anthropic-version': z.string().optional().meta({ description: 'Forwarded to Anthropic as sent.', example: '2023-06-01' }),
  'anthropic-beta': z.string().optional().meta({ description: 'Forwarded to Anthropic as sent.' }),
});

const MESSAGES_SSE =
  'Server-Sent Events as Anthropic sends them (`message_start`, `content_block_delta`, …, `message_stop`), with `stream: true`; a translated model’s stream in the same events. ' +
  'A failure after the stream started is an `event: error` with Anthropic’s error envelope.';

const channeling: Record<string, ZodOpenApiPathItemObject> = {
  '/v1/messages': {
    servers: SERVERS.channeling,
    post: {
      operationId: 'createMessage',
      tags: ['channeling'],
      summary: 'Anthropic Messages API, metered',
      description:
        'Anthropic’s `POST /v1/messages`, unchanged: the body goes upstream as sent (claude-* models), or is translated for GPT and OpenRouter models (docs/translation.md). ' +
        'The request’s worst case is reserved before the provider is called and settled to tokens × price after; a request that would not fit has its `max_tokens` lowered to what does (`x-gateway-max-tokens`), or is refused with 429 (docs/api.md, "Metering: the hard cap").',
      security: PROXY_SECURITY,
      requestParams: { header: ANTHROPIC_HEADERS },
      requestBody: {
        required: true,
        description: 'Anthropic’s Messages request. The gateway checks the fields below; every other field is forwarded unchanged.',
        content: { 'application/json': { schema: MessagesBody } },
      },
      responses: {
        200: {
          description: 'The answer: JSON, or Server-Sent Events with `stream: true`.',
          headers: {
            ...REQUEST_ID,
            'x-gateway-cost-microdollars': ref('Cost'),
            'x-gateway-budget-remaining-microdollars': ref('BudgetRemaining'),
            'x-gateway-max-tokens': ref('MaxTokens'),
          },
          content: { 'application/json': { schema: Message }, 'text/event-stream': { schema: { type: 'string', description: MESSAGES_SSE } } },
        },
        ...pick(PROXY_ERRORS, 400, 401, 403, 404, 413, 429, 500, 529),
      },
      externalDocs: { description: 'Anthropic’s Messages API', url: 'https://docs.anthropic.com/en/api/messages' },
    },
  },
  '/v1/chat/completions': {
    servers: SERVERS.channeling,
    post: {
      operationId: 'createChatCompletion',
      tags: ['channeling'],
      summary: 'OpenAI Chat Completions API, metered (every model)',
      description:
        'OpenAI’s `POST /v1/chat/completions` (docs/openai.md), with the token, budgets, hard cap and prices of `/v1/messages`: Claude models translated to Anthropic’s Messages API and back; OpenAI and OpenRouter models passed through with every field the client sent (the answer is the upstream’s). ' +
        'A `max_completion_tokens` / `max_tokens` that would not fit is lowered (`x-gateway-max-tokens`), or the request is refused with 429.',
      security: PROXY_SECURITY,
      requestBody: { required: true, content: { 'application/json': { schema: ChatCompletionsRequest } } },
      responses: {
        200: {
          description:
            'The answer: a `chat.completion`, or with `stream: true` Server-Sent Events of `chat.completion.chunk` (`data: {…}` lines, then `data: [DONE]`).',
          headers: {
            ...REQUEST_ID,
            'x-gateway-cost-microdollars': ref('Cost'),
            'x-gateway-budget-remaining-microdollars': ref('BudgetRemaining'),
            'x-gateway-max-tokens': ref('MaxTokens'),
          },
          content: {
            'application/json': { schema: ChatCompletion },
            'text/event-stream': {
              schema: { type: 'string', description: 'OpenAI’s chunk stream; a failure after the start is a `data: {"error":{…}}` line.' },
            },
          },
        },
        ...pick(OPENAI_ERRORS, 400, 401, 403, 413, 429, 500, 502, 503),
      },
      externalDocs: { description: 'OpenAI’s Chat Completions API', url: 'https://platform.openai.com/docs/api-reference/chat/create' },
    },
  },
  '/v1/messages/count_tokens': {
    servers: SERVERS.channeling,
    post: {
      operationId: 'countMessageTokens',
      tags: ['channeling'],
      summary: 'Count input tokens (never charged)',
      security: PROXY_SECURITY,
      requestParams: { header: ANTHROPIC_HEADERS },
      requestBody: { required: true, content: { 'application/json': { schema: CountTokensBody } } },
      responses: {
        200: { description: 'The count.', headers: { ...REQUEST_ID, 'x-gateway-token-count': ref('TokenCount') }, ...json(CountTokensAnswer) },
        ...pick(PROXY_ERRORS, 400, 401, 403, 413, 429, 500, 529),
      },
    },
  },
  '/v1/models': {
    servers: SERVERS.channeling,
    get: {
      operationId: 'listModels',
      tags: ['channeling'],
      summary: 'The models this token’s project can use',
      description: 'Exactly the models `POST /v1/messages` serves and prices for the project: its custom-priced models, then the catalog’s.',
      security: PROXY_SECURITY,
      requestParams: {
        query: z.object({
          limit: z.int().min(1).max(1000).default(20).meta({ description: 'Page size.' }),
          after_id: z.string().optional().meta({ description: 'The page after this model.' }),
          before_id: z.string().optional().meta({ description: 'The page before this model.' }),
        }),
      },
      responses: { 200: { description: 'A page of models.', headers: REQUEST_ID, ...json(ModelList) }, ...pick(PROXY_ERRORS, 400, 401, 403, 500) },
    },
  },
  '/v1/models/{id}': {
    servers: SERVERS.channeling,
    get: {
      operationId: 'getModel',
      tags: ['channeling'],
      summary: 'One model',
      security: PROXY_SECURITY,
      requestParams: {
        path: z.object({ id: z.string().meta({ description: 'A model id; one path segment, so an id with `/` is percent-encoded (`openai%2Fgpt-4o`).' }) }),
      },
      responses: { 200: { description: 'The model.', headers: REQUEST_ID, ...json(Model) }, ...pick(PROXY_ERRORS, 400, 401, 403, 404, 500) },
    },
  },
};

const prompt: Record<string, ZodOpenApiPathItemObject> = {
  '/prompt': {
    servers: SERVERS.prompt,
    post: {
      operationId: 'prompt',
      tags: ['prompt'],
      summary: 'A one-shot agent run, JSON or SSE',
      description:
        'Runs an agent loop over the model: each turn one metered model call; tools (remote HTTP, MCP, Anthropic server tools) run by the gateway (docs/prompt.md). ' +
        `${IN_BODY} Send \`Accept: text/event-stream\` for Server-Sent Events while the run goes on; otherwise JSON at the end. ` +
        'Before the run, one admission step: the developer’s plan (402), the developer’s concurrency (429), the user’s budget (429).',
      security: BODY_TOKEN_SECURITY,
      requestBody: { required: true, content: { 'application/json': { schema: PromptBody } } },
      responses: {
        200: {
          description:
            'The run’s answer. JSON: the result and the events (a run that failed inside the gateway after the answer had started: `RunFailure`). ' +
            'SSE: `event: message` for each event as it happens and the result, then `event: done` with `{sessionId}`.',
          headers: { ...REQUEST_ID, 'x-session-id': ref('SessionId') },
          content: {
            'application/json': { schema: z.union([PromptAnswer, RunFailure]) },
            'text/event-stream': {
              schema: {
                type: 'string',
                description: 'Server-Sent Events: `event: message` (data: a PromptStreamMessage), then `event: done` (data: a PromptStreamDone).',
              },
              'x-events': { message: { $ref: '#/components/schemas/PromptStreamMessage' }, done: { $ref: '#/components/schemas/PromptStreamDone' } },
            },
          },
        },
        ...pick(CONJURE_ERRORS, 400, 401, 402, 403, 413, 415, 429, 500),
      },
    },
  },
};

const vesselPath = { path: z.object({ vesselId: z.string().meta({ description: 'The id `POST /incubate` answered.' }) }) };

const conjure: Record<string, ZodOpenApiPathItemObject> = {
  '/usage': {
    servers: SERVERS.conjure,
    get: {
      operationId: 'getUsage',
      tags: ['usage'],
      summary: 'The caller’s budget window: used, reserved, remaining',
      description:
        'The window of the token’s `budget.window` that contains now (UTC). Reading it also settles any abandoned reservation of this window. ' +
        'Money in microdollars, compute in seconds. Only `Authorization: Bearer` is read.',
      security: BEARER_SECURITY,
      responses: { 200: { description: 'The report.', headers: REQUEST_ID, ...json(UsageReportSchema) }, ...pick(CONJURE_ERRORS, 401, 403, 500) },
    },
  },
  '/incubate': {
    servers: SERVERS.conjure,
    post: {
      operationId: 'incubate',
      tags: ['incubate'],
      summary: 'Queue a background run (a vessel)',
      description:
        'A `/prompt` run that happens later, in the background, under the same budgets (docs/incubate.md). ' +
        `${IN_BODY} The token is verified now; the vessel runs under the caller it named even after the token expired. ` +
        '`idempotencyKey` is required: the same key with the same body answers the original vessel (200), with another body 409.',
      security: BODY_TOKEN_SECURITY,
      requestBody: { required: true, content: { 'application/json': { schema: IncubateBody } } },
      responses: {
        200: {
          description: 'An idempotent replay: the original vessel’s queue response; nothing new was queued.',
          headers: { ...REQUEST_ID, 'idempotent-replayed': ref('IdempotentReplayed') },
          ...json(QueueResponseSchema),
        },
        202: { description: 'Queued.', headers: REQUEST_ID, ...json(QueueResponseSchema) },
        ...pick(CONJURE_ERRORS, 400, 401, 402, 403, 409, 413, 415, 500, 503),
      },
    },
  },
  '/incubate/batch': {
    servers: SERVERS.conjure,
    post: {
      operationId: 'incubateBatch',
      tags: ['incubate'],
      summary: 'Queue up to 100 vessels',
      description:
        'Each item an independent vessel with its own key, sharing the options, callback and timing; one failed item never fails the others. ' +
        `${IN_BODY} 503 when no item could be queued because the queue is down; 413 when every item is too large.`,
      security: BODY_TOKEN_SECURITY,
      requestBody: { required: true, content: { 'application/json': { schema: BatchBody } } },
      responses: {
        202: { description: 'Each item’s outcome.', headers: REQUEST_ID, ...json(BatchResponse) },
        ...pick(CONJURE_ERRORS, 400, 401, 402, 403, 413, 415, 500, 503),
      },
    },
  },
  '/incubate/vessel/{vesselId}': {
    servers: SERVERS.conjure,
    get: {
      operationId: 'getVessel',
      tags: ['incubate'],
      summary: 'A vessel’s status record',
      description: 'Only a valid token of the project and user that queued the vessel sees it; anything else is the same 404.',
      security: BEARER_SECURITY,
      requestParams: vesselPath,
      responses: { 200: { description: 'The record.', headers: REQUEST_ID, ...json(VesselRecord) }, ...pick(CONJURE_ERRORS, 403, 404, 500) },
    },
  },
  '/incubate/vessel/{vesselId}/cancel': {
    servers: SERVERS.conjure,
    post: {
      operationId: 'cancelVessel',
      tags: ['incubate'],
      summary: 'Cancel a vessel',
      description:
        'A waiting vessel is canceled at once; a running one cooperatively (the answer waits up to 5 s, then shows `cancelRequested: true` if it has not stopped yet).',
      security: BEARER_SECURITY,
      requestParams: vesselPath,
      responses: {
        200: { description: 'The record.', headers: REQUEST_ID, ...json(VesselRecord) },
        ...pick(CONJURE_ERRORS, 403, 404),
        409: VESSEL_NOT_CANCELABLE,
        ...pick(CONJURE_ERRORS, 500),
      },
    },
  },
  '/openapi.json': {
    servers: SERVERS.conjure,
    get: {
      operationId: 'getOpenApiDocument',
      tags: ['meta'],
      summary: 'This document',
      description: 'The OpenAPI document of every HTTP route of the gateway, without a token.',
      security: [],
      responses: {
        200: {
          description: 'The document (docs/openapi.json).',
          headers: { ...REQUEST_ID, 'cache-control': ref('CacheControl') },
          content: { 'application/json': { schema: { type: 'object', description: 'An OpenAPI 3.1 document.' } } },
        },
        ...pick(CONJURE_ERRORS, 403, 500),
      },
    },
  },
};

const INFO_DESCRIPTION = `Metered, budgeted access to AI models behind the Anthropic Messages API, for the end users of app developers' projects.

Three base URLs (docs/api.md, "Base URLs and endpoints"); each path names its servers:

- **channeling URL** — Anthropic's API under \`/v1\`: point an Anthropic SDK or Claude Code at it, with the user's token as the API key. Errors in Anthropic's envelope \`{"type":"error","error":{"type","message"}}\`, with \`x-should-retry\`.
- **prompt URL** — \`POST /prompt\`, one-shot agent runs.
- **conjure URL** — \`/usage\`, \`/incubate\` (background runs) and this document. Errors, like \`/prompt\`'s, in the conjure envelope \`{"error":"<code>","message"?,…}\`.

Every answer carries \`request-id\`. Every route answers CORS preflights and serves pages on other origins the deployment, the project and the token allow (docs/api.md, "Browsers: CORS and origins"). \`/prompt\`, \`/incubate\` and \`/incubate/batch\` take only \`application/json\` (415 otherwise). Money is in microdollars (1 USD = 1,000,000), compute in seconds. \`/ws\` (WebSocket sessions) is documented in docs/ws.md.`;

/**
 * The request bodies' schemas, as the document names them: ids in zod's registry (the routes' schemas are the
 * domain's; they carry no name of their own).
 */
const REQUESTS: Array<[z.ZodType, string, string]> = [
  [MessagesBody, 'MessagesRequest', 'Anthropic’s Messages request: the fields the gateway checks; every other field is forwarded as sent.'],
  [CountTokensBody, 'CountTokensRequest', 'A Messages request without `max_tokens` and `stream`.'],
  [PromptBody, 'PromptRequest', 'The message and the run’s options (docs/prompt.md, "Options"): every key checked, an unknown one a 400 that names it.'],
  [IncubateBody, 'IncubateRequest', 'A vessel: `/prompt`’s message and options, an idempotency key, and optionally a callback and when to run.'],
  [BatchBody, 'BatchRequest', 'Up to 100 items, each its own vessel, sharing the options, callback and timing.'],
];

/** The document itself: zod-openapi renders the schemas (requests as inputs, answers as outputs) and the references. */
export function openApiDocument() {
  for (const [schema, id, description] of REQUESTS) z.globalRegistry.add(schema, { ...z.globalRegistry.get(schema), id, description, unusedIO: 'input' });
  const spec: ZodOpenApiObject = {
    openapi: '3.1.0',
    info: { title: 'Prompt gateway', version: packageJson.version, description: INFO_DESCRIPTION },
    servers: [LOCAL],
    tags: [
      { name: 'channeling', description: 'The channeling URL: the Anthropic-compatible API, metered.' },
      { name: 'prompt', description: 'The prompt URL: one-shot agent runs (docs/prompt.md).' },
      { name: 'usage', description: 'The conjure URL: the caller’s budget window.' },
      { name: 'incubate', description: 'The conjure URL: background runs (docs/incubate.md).' },
      { name: 'meta', description: 'The conjure URL: this document.' },
    ],
    paths: { ...channeling, ...prompt, ...conjure },
    components: {
      securitySchemes,
      headers,
      schemas: {
        BatchItem,
        HttpTool,
        ServerTool,
        RemoteMcpServer,
      },
    },
  };
  const document = createDocument(spec, { outputIdSuffix: 'Answer' });
  addStreamEvents(document.components?.schemas ?? {});
  return document;
}

/**
 * The SSE events' data of /prompt, as components (the stream's media type names them in `x-events`). They are no
 * body's schema, and zod-openapi renders a component registered by hand both as a request and as an answer, doubling
 * what it references: so each is rendered on its own, as an answer, and what that gives joins the components — a
 * component already there must come out the same.
 */
function addStreamEvents(schemas: Record<string, unknown>): void {
  for (const events of [PromptStreamMessage, PromptStreamDone]) {
    const { components } = createSchema(events, { io: 'output' });
    for (const [id, rendered] of Object.entries(components)) {
      if (id in schemas && !isDeepStrictEqual(schemas[id], rendered)) throw new Error(`${id} renders differently as a stream event's part`);
      schemas[id] ??= rendered;
    }
  }
}

/** Each operation of the document, as `METHOD /path`: what test/openapi compares with the apps' routes. */
export function documentedRoutes(document: { paths?: Record<string, Record<string, unknown>> }): string[] {
  const methods = ['get', 'put', 'post', 'delete', 'patch', 'options', 'head', 'trace'];
  return Object.entries(document.paths ?? {}).flatMap(([path, item]) =>
    Object.keys(item)
      .filter((key) => methods.includes(key))
      .map((method) => `${method.toUpperCase()} ${path}`),
  );
}
