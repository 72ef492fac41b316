import * as z from 'zod';
import { instanceValue } from '../instance/state.ts';
import { originList } from '../origins/pattern.ts';

/**
 * Typed configuration read from the environment once per process.
 * Deployed functions get these from the CDK stack; the local runtime sets them before it loads any handler.
 */
/** Lambda's hard limit on one invocation; the local runtime enforces the same (docs/contract.md, "Hard cap"). */
export const MAX_INVOCATION_SECONDS = 900;

const EnvSchema = z.object({
  STAGE: z.string().default('local'),
  AWS_REGION: z.string().default('us-east-1'),
  /** Set only locally and in tests: DynamoDB Local's endpoint. Unset in AWS. */
  DYNAMODB_ENDPOINT: z.string().url().optional(),
  SQS_ENDPOINT: z.string().url().optional(),
  /** Queue URLs (QUEUES in lambdas/store/queues.ts): set by the stack on functions that may send, locally on all. */
  RUN_QUEUE_URL: z.string().url().optional(),
  WEBHOOK_QUEUE_URL: z.string().url().optional(),
  TURN_QUEUE_URL: z.string().url().optional(),
  /** Dead-letter queue URLs: set by the stack on functions whose manifest access lists the queue in `deadLetters`. */
  RUN_DEAD_LETTER_QUEUE_URL: z.string().url().optional(),
  WEBHOOK_DEAD_LETTER_QUEUE_URL: z.string().url().optional(),
  TURN_DEAD_LETTER_QUEUE_URL: z.string().url().optional(),
  /**
   * EventBridge Scheduler (lambdas/scheduling/scheduler.ts): set by the stack on functions whose manifest access has
   * `scheduler`, locally on all. The group the one-time schedules live in, the role Scheduler delivers them with, and
   * the ARNs of the queues they target (set with the queue's URL on a function that may send to it).
   */
  SCHEDULE_GROUP_NAME: z.string().min(1).optional(),
  SCHEDULER_ROLE_ARN: z.string().min(1).optional(),
  RUN_QUEUE_ARN: z.string().min(1).optional(),
  WEBHOOK_QUEUE_ARN: z.string().min(1).optional(),
  TURN_QUEUE_ARN: z.string().min(1).optional(),
  /** Set only locally and in tests: the scheduler stand-in's endpoint (bin/local/scheduler.ts). Unset in AWS. */
  SCHEDULER_ENDPOINT: z.string().url().optional(),
  /**
   * The API Gateway Management API endpoint of the /ws stage (`https://<domain>/<stage>`). The stack sets it on
   * functions with `connections` access that get no WebSocket event to read it from (the session sweeper). Locally
   * and in tests: the stand-in (bin/local/websocket.ts, `http://127.0.0.1:PORT/local`), used as every WebSocket
   * event's callbackUrl too.
   */
  WEBSOCKET_CALLBACK_URL: z.string().url().optional(),
  REGISTRY_TABLE: z.string().default('gateway-registry'),
  USAGE_TABLE: z.string().default('gateway-usage'),
  VESSELS_TABLE: z.string().default('gateway-vessels'),
  LEASES_TABLE: z.string().default('gateway-leases'),
  SESSIONS_TABLE: z.string().default('gateway-sessions'),
  ACTIVITY_TABLE: z.string().default('gateway-activity'),
  /** KMS key that encrypts projects' provider keys (AWS). */
  PROVIDER_KEYS_KMS_KEY_ID: z.string().optional(),
  /** Local alternative to KMS: a file holding a 32-byte AES key (created on first use). */
  PROVIDER_KEYS_LOCAL_KEY_FILE: z.string().optional(),
  ANTHROPIC_API_KEY: z.string().optional(),
  /** Secrets Manager secret holding the service's Anthropic key (deployed stacks). */
  ANTHROPIC_API_KEY_SECRET_ARN: z.string().optional(),
  ANTHROPIC_BASE_URL: z.string().url().default('https://api.anthropic.com'),
  OPENAI_BASE_URL: z.string().url().default('https://api.openai.com/v1'),
  OPENROUTER_BASE_URL: z.string().url().default('https://openrouter.ai/api/v1'),
  /** How long a verified project secret is trusted before it is read again. */
  SECRET_CACHE_SECONDS: z.coerce.number().int().min(0).default(60),
  /** Upstream request time-out for a provider call. */
  UPSTREAM_TIMEOUT_MS: z.coerce.number().int().positive().default(600_000),
  /**
   * A reservation older than this is considered abandoned and is settled by the sweep. It must outlast the longest
   * invocation (Lambda's 15 minutes, enforced by the local runtime too), so a running request is never swept.
   */
  RESERVATION_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(MAX_INVOCATION_SECONDS + 60, `must exceed the ${MAX_INVOCATION_SECONDS} s invocation limit by at least a minute`)
    .default(1_200),
  /**
   * How long a model call whose budget is held by the user's requests in flight waits for them to settle before it is
   * refused with 429 `x-should-retry: true` (docs/contract.md, "Holds wait"): 10 s deployed; tests shorten it.
   */
  BUDGET_HOLD_WAIT_MS: z.coerce.number().int().min(0).max(60_000).default(10_000),
  DEFAULT_MODEL: z.string().default('claude-sonnet-4-6'),
  /**
   * A waiting vessel whose trigger has not moved it for this long is re-driven by the reconciler (docs/incubate.md,
   * "The table is the source of truth"). Longer than the longest capacity back-off (30 s), so a healthy wait is not
   * re-driven; tests shorten it.
   */
  VESSEL_REDRIVE_AFTER_SECONDS: z.coerce.number().int().min(1).default(120),
  /**
   * A concurrency lease lapses this long after its last renewal (docs/contract.md, "Concurrency leases"); its renewal
   * interval (a third of it), an executing vessel's heartbeat and a parked vessel's check derive from it
   * (config/timing.ts). 60 s deployed; tests and local runs shorten it to see a crashed holder's slot freed sooner. At
   * least 3 s: an execution must confirm its claim within the lease less two of its 1 s cancel polls.
   */
  LEASE_TTL_SECONDS: z.coerce
    .number()
    .int()
    .min(3, 'must be at least 3 s (an execution confirms its claim within the lease less two 1 s polls)')
    .max(MAX_INVOCATION_SECONDS, `must not exceed the ${MAX_INVOCATION_SECONDS} s invocation limit`)
    .default(60),
  /**
   * The waits between webhook delivery attempts, in seconds, comma-separated: one retry per wait, then the dead-letter
   * queue (docs/webhooks.md). Svix's schedule by default; tests shorten it rather than wait for hours.
   */
  WEBHOOK_RETRY_WAITS: z
    .string()
    .regex(/^\s*\d+(\s*,\s*\d+)*\s*$/, 'must be whole seconds separated by commas')
    .default('5,300,1800,7200,18000,36000,36000')
    .transform((v) => v.split(',').map((s) => Number(s.trim()))),
  /**
   * /ws limits (docs/ws.md, "Limits"): a connection with no frame from its client and no turn running for
   * SESSION_IDLE_SECONDS is closed (below API Gateway's own 10 minutes, so the client is told why); at most
   * SESSION_FRAMES_PER_SECOND frames a second per connection; a session untouched for SESSION_RETENTION_SECONDS
   * is deleted by the table's TTL.
   */
  SESSION_IDLE_SECONDS: z.coerce.number().int().min(1).default(300),
  SESSION_FRAMES_PER_SECOND: z.coerce.number().int().min(1).default(10),
  SESSION_RETENTION_SECONDS: z.coerce
    .number()
    .int()
    .min(60)
    .default(7 * 24 * 3600),
  /**
   * The function's credentials, which Lambda sets from its role. Read only to sign calls to a local endpoint (the
   * *_ENDPOINT variables): the local runtime gives each function an access key of its own, by which its local IAM
   * knows the caller (docs/local.md, "As strict as AWS"). Against AWS the SDK's own credential chain is used.
   */
  AWS_ACCESS_KEY_ID: z.string().min(1).default('local'),
  AWS_SECRET_ACCESS_KEY: z.string().min(1).default('local'),
  /**
   * The origins whose pages may call this deployment at all (DESIGN §10; docs/browser.md): `*` (the default) or
   * comma-separated origin patterns (lambdas/origins/pattern.ts). Projects narrow it further (`project set-origins`).
   */
  CORS_ORIGINS: z
    .string()
    .default('*')
    .transform((v) => (v.trim() === '*' ? ('*' as const) : v.split(',').filter((o) => o.trim() !== '')))
    .pipe(z.union([z.literal('*'), originList(Number.MAX_SAFE_INTEGER)])),
  /** `1` lets outbound calls reach loopback: tests and the local runtime only, never the stack (contract.md). */
  ALLOW_LOOPBACK_URLS: z
    .string()
    .optional()
    .transform((v) => v === '1'),
});

export type Env = z.infer<typeof EnvSchema>;

/** Parsed once per instance; tests and the local runtime change the environment and call resetInstanceState(). */
export const env = instanceValue((): Env => EnvSchema.parse(process.env));

/** The credentials a client signs with when it talks to a local endpoint instead of AWS (AWS_ACCESS_KEY_ID above). */
export function localEndpointCredentials(): { accessKeyId: string; secretAccessKey: string } {
  const { AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY } = env();
  return { accessKeyId: AWS_ACCESS_KEY_ID, secretAccessKey: AWS_SECRET_ACCESS_KEY };
}
