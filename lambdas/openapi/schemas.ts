import * as z from 'zod';
import type { RunEvent, RunResult, ResultSubtype } from '../agent/result.ts';
import type { McpServerStatus } from '../agent/tools/mcp.ts';
import { WindowKind } from '../auth/claims.ts';
import type { BatchEntry } from '../conjure/incubate.ts';
import type { AnthropicErrorType } from '../providers/types.ts';
import type { ModelInfo } from '../proxy/models.ts';
import type { LiveSession, MeterFigures } from '../refusals/refusal.ts';
import type { tokenError } from '../refusals/conjure.ts';
import type { UsageReport } from '../usage/report.ts';
import type { WebhookFailure, WebhookStatus, WebhookView } from '../deliveries/record.ts';
import { TASK_IDENTIFIER, type QueueResponse, type VesselEndSubtype, type VesselView } from '../vessels/record.ts';
import { VesselStates } from '../vessels/states.ts';

/**
 * The answers' shapes, for the OpenAPI document (document.ts). The requests' schemas are the ones the routes validate
 * with (agent/options.ts, vessels/request.ts, proxy/schema.ts); the answers are built in plain TypeScript and never
 * parsed, so their schemas are written here — each checked at compile time against the type the route's code builds
 * (`mirrors`), and at run time against real answers (test/openapi/answers.test.ts). A zod schema in the domain would
 * only restate the type there, and be parsed by no one.
 */

type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

/**
 * `schema`, checked at compile time to describe the type `T` that the code builds: each assignable to the other, so
 * neither can change alone. A mismatch makes the argument `never`: "not assignable to parameter of type never".
 */
const mirrors =
  <T>() =>
  <S extends z.ZodType>(schema: S & (Same<z.output<S>, T> extends true ? unknown : never)): S =>
    schema;

const int = (description?: string) => (description ? z.int().min(0).meta({ description }) : z.int().min(0));
const isoTime = (description: string) => z.iso.datetime().meta({ description });

// ————— the channeling URL: Anthropic's shapes —————

const ANTHROPIC_ERROR_TYPES = [
  'invalid_request_error',
  'authentication_error',
  'permission_error',
  'billing_error',
  'not_found_error',
  'request_too_large',
  'rate_limit_error',
  'api_error',
  'overloaded_error',
] as const;
const AnthropicErrorTypeSchema = mirrors<AnthropicErrorType>()(z.enum(ANTHROPIC_ERROR_TYPES));

/** Anthropic's error envelope: every error of the channeling URL, the gateway's own and the provider's alike. */
export const AnthropicError = z
  .looseObject({
    type: z.literal('error'),
    error: z.looseObject({ type: AnthropicErrorTypeSchema, message: z.string() }),
  })
  .meta({
    id: 'AnthropicError',
    description: "Anthropic's error envelope. A provider's own error body is passed through as the provider sent it (it may carry more fields).",
  });

const ContentBlock = z.looseObject({ type: z.string() }).meta({ description: 'A content block (`text`, `tool_use`, `thinking`, …), as Anthropic defines it.' });

/** A Messages API answer: Anthropic's, passed through; a translated model's, in the same shape. */
export const Message = z
  .looseObject({
    id: z.string(),
    type: z.literal('message'),
    role: z.literal('assistant'),
    content: z.array(ContentBlock),
    model: z.string(),
    stop_reason: z.string().nullable(),
    stop_sequence: z.string().nullable().optional(),
    usage: z.looseObject({ input_tokens: z.int(), output_tokens: z.int() }),
  })
  .meta({
    id: 'Message',
    description:
      "Anthropic's Message object, as the provider answered it (a GPT or OpenRouter model's answer translated into it, docs/translation.md). " +
      'Fields beyond these are passed through.',
  });

export const CountTokensAnswer = z
  .object({ input_tokens: int('Input tokens of the request, as the provider counts them, or the gateway’s estimate (x-gateway-token-count: estimate).') })
  .meta({ id: 'CountTokensAnswer' });

export const Model = mirrors<ModelInfo>()(
  z
    .object({
      type: z.literal('model').meta({ description: "Anthropic's vocabulary." }),
      object: z.literal('model').meta({ description: "OpenAI's vocabulary." }),
      id: z.string().meta({ description: 'The name to send as `model`; OpenRouter models that would route elsewhere carry `or:`.' }),
      display_name: z.string(),
      created_at: z.string().meta({ description: 'Always 1970-01-01T00:00:00Z.' }),
      created: z.number().int().meta({ description: 'Unix seconds, as OpenAI gives them: always 0 (the gateway knows no release dates).' }),
      owned_by: z.enum(['anthropic', 'openai', 'openrouter']).meta({ description: 'The provider the name routes to.' }),
    })
    .meta({ id: 'Model' }),
);

export const ModelList = z
  .object({
    object: z.literal('list'),
    data: z.array(Model),
    has_more: z.boolean(),
    first_id: z.string().nullable(),
    last_id: z.string().nullable(),
  })
  .meta({
    id: 'ModelList',
    description:
      'The models this token’s project can use, in Anthropic’s list shape and cursor paging and OpenAI’s list shape at once. ' +
      'Without an `anthropic-version` header and without paging parameters (as the OpenAI SDK asks), every model in one page.',
  });

// ————— the channeling URL: OpenAI's shapes (POST /v1/chat/completions, docs/openai.md) —————

/** OpenAI's error envelope: every error of the OpenAI-compatible route. */
export const OpenAIError = z
  .looseObject({
    error: z.looseObject({ message: z.string(), type: z.string(), param: z.string().nullable(), code: z.string().nullable() }),
  })
  .meta({ id: 'OpenAIError', description: 'OpenAI\'s error envelope (docs/openai.md, "Errors").' });

/** What the gateway itself checks of a Chat Completions request; the rest is translated (docs/openai.md). */
export const ChatCompletionsRequest = z
  .looseObject({
    model: z
      .string()
      .min(1)
      .meta({ description: 'Any routed model: `claude-*` (translated), `gpt-*` / o-series (OpenAI) and `or:*` (OpenRouter) passed through.' }),
    messages: z.array(z.looseObject({ role: z.string() })),
    stream: z.boolean().optional(),
    max_completion_tokens: z.int().min(1).optional(),
    max_tokens: z.int().min(1).optional(),
    n: z.int().min(1).max(128).optional().meta({ description: 'Above 1 for OpenAI models only; the output limit is reserved once per choice.' }),
  })
  .meta({ id: 'ChatCompletionsRequest', description: "OpenAI's Chat Completions request; what maps to what, and what is refused, is in docs/openai.md." });

export const ChatCompletion = z
  .looseObject({
    id: z.string(),
    object: z.literal('chat.completion'),
    created: z.int(),
    model: z.string(),
    choices: z.array(
      z.looseObject({ index: z.int(), message: z.looseObject({ role: z.literal('assistant'), content: z.string().nullable() }), finish_reason: z.string() }),
    ),
    usage: z.looseObject({ prompt_tokens: z.int(), completion_tokens: z.int(), total_tokens: z.int() }),
  })
  .meta({ id: 'ChatCompletion', description: "OpenAI's chat.completion object, translated from the Claude model's answer." });

// ————— the conjure envelope —————

/** The conjure envelope: `error` names the refusal; most carry a `message`, some their figures. */
export const ConjureError = z
  .looseObject({ error: z.string().meta({ description: 'The refusal’s code.' }), message: z.string().optional() })
  .meta({ id: 'ConjureError', description: 'The conjure envelope of an error (docs/api.md, "Conjure errors").' });

export const TokenError = z
  .object({
    error: z.enum(['token_expired', 'token_revoked', 'invalid_token'] as const satisfies readonly ReturnType<typeof tokenError>[]).meta({
      description:
        '`token_expired` for an expired token, `token_revoked` for a revoked one or a blocked user’s, `invalid_token` for every other failure (missing, malformed, forged, unknown issuer).',
    }),
    message: z.string().meta({ description: 'Which check failed (docs/api.md, "401 messages"); never the token itself.' }),
  })
  .meta({ id: 'TokenError', examples: [{ error: 'token_expired', message: 'Token expired' }] });

const Meter = mirrors<MeterFigures>()(z.object({ used: int(), remaining: int(), budget: int() }));

export const UserBudgetExhausted = z
  .object({
    error: z.literal('user_budget_exhausted'),
    message: z.string(),
    ai: Meter.meta({ description: 'Microdollars.' }),
    compute: Meter.meta({ description: 'Seconds.' }),
  })
  .meta({
    id: 'UserBudgetExhausted',
    description:
      'The user’s AI or compute budget is spent (retry-after: seconds to the window’s reset), or held by the user’s runs in flight (retry-after: 1).',
  });

export const DeveloperBudgetExhausted = z
  .object({
    error: z.literal('developer_budget_exhausted'),
    used: int('Compute seconds used this month.'),
    available: int('Compute seconds left this month.'),
    planSeconds: int(),
    poolSeconds: int(),
  })
  .meta({ id: 'DeveloperBudgetExhausted', description: 'The developer’s monthly compute plan is spent.' });

const LiveSessionSchema = mirrors<LiveSession>()(z.object({ sessionId: z.string(), userId: z.string(), ageMs: int() }));

export const ConcurrentLimitReached = z
  .object({
    error: z.literal('concurrent_limit_reached'),
    active: int('Live runs of the developer, across all their projects.'),
    max: int('The tier’s concurrent runs.'),
    sessions: z.array(LiveSessionSchema).meta({ description: 'The live runs of the caller’s own project, oldest first.' }),
  })
  .meta({ id: 'ConcurrentLimitReached', description: 'The developer’s tier is fully in use (retry-after: 1).' });

const VesselStatus = z.enum(VesselStates.statuses).meta({ id: 'VesselStatus' });

export const VesselNotCancelable = z
  .object({ error: z.literal('vessel_not_cancelable'), status: VesselStatus, message: z.string() })
  .meta({ id: 'VesselNotCancelable', description: 'Cancel of a vessel that has already ended; `status` is its final status.' });

// ————— /usage —————

const UsageMeter = z.object({
  used: int('Settled in this window.'),
  remaining: int('max(0, budget − used − reserved).'),
  budget: int('The token’s budget for this meter.'),
  reserved: int('Worst cases of the user’s requests still in flight.'),
});

export const UsageReportSchema = mirrors<UsageReport>()(
  z
    .object({
      user_id: z.string().meta({ description: 'The token’s `sub`.' }),
      issuer_id: z.string().meta({ description: 'The token’s `iss`: the project.' }),
      window: WindowKind,
      window_start: isoTime('The start of the current window, UTC (1970-01-01T00:00:00.000Z for lifetime).'),
      allowed: z.boolean().meta({ description: 'True while both ai.remaining and compute.remaining are above 0.' }),
      ai: UsageMeter.extend({ overrun: int('Charged above the requests’ reservations in this window: normally 0.') }).meta({ description: 'Microdollars.' }),
      compute: UsageMeter.meta({ description: 'Seconds.' }),
    })
    .meta({ id: 'UsageReport' }),
);

// ————— /prompt —————

const RESULT_SUBTYPES = [
  'success',
  'error_max_turns',
  'error_max_budget_usd',
  'error_max_structured_output_retries',
  'error_during_execution',
  'error_max_duration',
  'interrupted',
] as const;
const ResultSubtypeSchema = mirrors<ResultSubtype>()(z.enum(RESULT_SUBTYPES));

const McpServerStatusSchema = mirrors<McpServerStatus>()(
  z.object({
    name: z.string(),
    status: z.enum(['connected', 'failed']),
    tools: int('How many of its tools are offered to the model.'),
    error: z.string().optional(),
    skipped: z.array(z.object({ tool: z.string(), reason: z.string() })).optional(),
  }),
);

const Usage = z.object({ input_tokens: int(), output_tokens: int() });

export const RunResultSchema = mirrors<RunResult>()(
  z
    .object({
      type: z.literal('result'),
      subtype: ResultSubtypeSchema,
      is_error: z.boolean(),
      text: z.string().meta({ description: 'The final answer’s text; for an error subtype, the last turn’s text.' }),
      total_cost_usd: z.number(),
      total_cost_microdollars: int('The same cost as an exact integer.'),
      duration_secs: z.number(),
      num_turns: int(),
      usage: Usage,
      model: z.string(),
      structured_output: z.unknown().optional().meta({ description: 'With `outputFormat`: the answer, valid against its schema.' }),
      mcp_servers: z.array(McpServerStatusSchema).optional().meta({ description: 'With `mcpServers`: each server’s status.' }),
      error: z.string().optional().meta({ description: 'What ended the run, for an error subtype.' }),
    })
    .meta({ id: 'RunResult', description: 'The run’s result (docs/prompt.md, "Result subtypes"): every subtype comes with HTTP 200.' }),
);

const ToolKind = z.enum(['http', 'mcp']);
export const RunEventSchema = mirrors<RunEvent>()(
  z
    .discriminatedUnion('type', [
      z.object({ type: z.literal('assistant'), subtype: z.literal('text'), text: z.string() }),
      z.object({ type: z.literal('tool_use'), subtype: ToolKind, id: z.string(), name: z.string(), input: z.unknown() }),
      z.object({ type: z.literal('tool_result'), subtype: ToolKind, tool_use_id: z.string(), name: z.string(), is_error: z.boolean(), text: z.string() }),
    ])
    .meta({ id: 'RunEvent', description: 'What happens during a run: the model’s text, each tool call and its result.' }),
);

export const PromptAnswer = z
  .object({
    result: RunResultSchema,
    messages: z.array(z.union([RunEventSchema, RunResultSchema])).meta({ description: 'The run’s events (one assistant text per turn), then the result.' }),
    sessionId: z.string(),
  })
  .meta({ id: 'PromptAnswer' });

/** A run that failed inside the gateway after the answer had started (HTTP 200): the conjure envelope. */
export const RunFailure = z.object({ error: z.literal('internal_error'), message: z.string() }).meta({ id: 'RunFailure' });

export const PromptStreamMessage = z
  .union([RunEventSchema, RunResultSchema, z.object({ type: z.literal('error'), error: z.literal('internal_error'), message: z.string() })])
  .meta({ id: 'PromptStreamMessage', description: 'The data of an `event: message`.' });

export const PromptStreamDone = z.object({ sessionId: z.string() }).meta({ id: 'PromptStreamDone', description: 'The data of the last event, `event: done`.' });

// ————— /incubate —————

export const QueueResponseSchema = mirrors<QueueResponse>()(
  z
    .object({
      vesselId: z.string(),
      idempotencyKey: z.string(),
      status: z.literal('queued'),
      scheduledFor: isoTime('When the vessel is due.'),
    })
    .meta({ id: 'QueueResponse' }),
);

const BatchItemError = z.object({ code: z.string().meta({ description: 'The item’s refusal (docs/incubate.md, "Batch").' }), message: z.string() });

export const BatchEntrySchema = mirrors<BatchEntry>()(
  z
    .discriminatedUnion('status', [
      z.object({
        index: int(),
        idempotencyKey: z.string().nullable(),
        status: z.literal('queued'),
        vesselId: z.string(),
        scheduledFor: z.string(),
        replayed: z.literal(true).optional().meta({ description: 'An idempotent replay: nothing new was queued.' }),
      }),
      z.object({ index: int(), idempotencyKey: z.string().nullable(), status: z.literal('failed'), error: BatchItemError }),
    ])
    .meta({ id: 'BatchEntry' }),
);

export const BatchResponse = z
  .object({ total: int(), queued: int(), failed: int(), items: z.array(BatchEntrySchema).meta({ description: 'One per item, in order.' }) })
  .meta({ id: 'BatchResponse' });

const WEBHOOK_STATUSES = ['pending', 'delivered', 'failed'] as const;
const WEBHOOK_FAILURES = ['exhausted', 'gone', 'refused'] as const;

const WebhookViewSchema = mirrors<WebhookView>()(
  z
    .object({
      status: mirrors<WebhookStatus>()(z.enum(WEBHOOK_STATUSES)),
      failure: mirrors<WebhookFailure>()(z.enum(WEBHOOK_FAILURES)).optional(),
      attempts: z.array(
        z.object({
          round: int(),
          attempt: int(),
          time: z.string(),
          statusCode: z.int().optional(),
          error: z.string().optional(),
          durationMs: int(),
        }),
      ),
      nextAttemptAt: z.string().optional(),
    })
    .meta({ description: 'The callback’s delivery (docs/webhooks.md, "The delivery record").' }),
);

const VESSEL_END_SUBTYPES = [...RESULT_SUBTYPES, 'error_user_budget_exhausted', 'error_developer_budget_exhausted', 'error_token_revoked', 'canceled'] as const;

const VesselOutputSchema = z.object({
  success: z.boolean(),
  text: z.string().meta({ description: 'The answer; a failed run’s error.' }),
  truncated: z.literal(true).optional().meta({ description: 'The output was too large to keep whole: `text` is cut.' }),
  result: z.object({
    type: z.literal('result'),
    subtype: mirrors<VesselEndSubtype>()(z.enum(VESSEL_END_SUBTYPES)),
    total_cost_usd: z.number(),
    total_cost_microdollars: int(),
    usage: Usage,
    num_turns: int(),
    duration_secs: z.number(),
    model: z.string().optional(),
    structured_output: z.unknown().optional(),
  }),
});

export const VesselRecord = mirrors<VesselView>()(
  z
    .object({
      vesselId: z.string(),
      status: VesselStatus,
      // The code builds it as a string; the document says which (a `const` beside the type).
      taskIdentifier: z.string().meta({ const: TASK_IDENTIFIER, description: 'Every vessel runs the one agent task.' }),
      isCompleted: z.boolean().meta({ description: 'True for every end: a poller stops on it.' }),
      isSuccess: z.boolean(),
      isFailed: z.boolean(),
      isCanceled: z.boolean(),
      idempotencyKey: z.string(),
      createdAt: z.string(),
      updatedAt: z.string(),
      scheduledFor: z.string(),
      attempts: int('Executions started: 0 or 1.'),
      startedAt: z.string().optional(),
      completedAt: z.string().optional(),
      cancelRequested: z.boolean().optional().meta({ const: true, description: 'Present (true) while a cancel of a running vessel is being carried out.' }),
      callback: z.object({ url: z.string(), signed: z.boolean() }).optional(),
      output: VesselOutputSchema.optional().meta({ description: 'Once the vessel has ended.' }),
      webhook: WebhookViewSchema.optional(),
    })
    .meta({ id: 'VesselRecord', description: 'The vessel status record (docs/incubate.md, "The record").' }),
);
