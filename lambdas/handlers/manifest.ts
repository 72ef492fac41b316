import { CONJURE_ROUTES, type RestRoute } from '../conjure/routes.ts';
import type { QueueName } from '../store/queues.ts';
import type { TableSpec } from '../store/tables.ts';

/**
 * The one description of every Lambda function, as tables.ts is for the tables and queues.ts for the queues:
 * - the CDK stack (lib/gateway-stack.ts) builds each function, its trigger and its grants from it;
 * - the bundler (lib/bundling.ts), the bundle-size benchmark and the cold-import test bundle its entries;
 * - the local runtime (bin/local/runtime.ts) loads every entry and serves each trigger the way AWS would.
 * Adding a function is one entry here plus its handler file (which exports `handler`). Plain data: no CDK import,
 * so bin/, bench/ and tests load it cheaply.
 */

export type TableId = TableSpec['id'];

/** What invokes a function. */
export type FunctionTrigger =
  /** A public function URL in RESPONSE_STREAM mode; locally, requests whose path is, or is under, one of `paths`. */
  | { readonly kind: 'streaming-url'; readonly paths: readonly string[] }
  /** Methods of the conjure REST API (API Gateway, proxy integration); locally, requests matching `routes`. */
  | { readonly kind: 'rest'; readonly routes: readonly RestRoute[] }
  /**
   * An SQS event source on a queue of QUEUES, reporting partial batch failures. `batchSize` defaults to the queue's
   * own (lambdas/store/queues.ts); the function's timeout may not exceed the queue's consumerTimeoutSeconds.
   */
  | { readonly kind: 'sqs'; readonly queue: QueueName; readonly batchSize?: number; readonly maxConcurrency?: number }
  /** The routes $connect, $disconnect and $default of an API Gateway WebSocket API. */
  | { readonly kind: 'websocket' }
  /** An EventBridge rule: `rate(5 minutes)` or `cron(…)`. */
  | { readonly kind: 'schedule'; readonly expression: string };

export type TriggerKind = FunctionTrigger['kind'];

/** What IAM the stack grants a function, resource by resource; nothing else is allowed. */
export interface FunctionAccess {
  /** Tables it may read, or read and write. Every function is told every table's name regardless. */
  readonly tables: Readonly<Partial<Record<TableId, 'read' | 'readwrite'>>>;
  /**
   * It calls providers: `kms:Decrypt` on the provider-keys key, read of the service's Anthropic key secret, and
   * the upstream base URLs and those two ARNs in its environment.
   */
  readonly providers: boolean;
  /** Queues it may send to (`sqs:SendMessage`, and the queue's URL and ARN in its environment). */
  readonly queues: readonly QueueName[];
  /** Queues whose dead-letter queue it may send to itself (`sqs:SendMessage` there, and its URL in its environment). */
  readonly deadLetters?: readonly QueueName[];
  /**
   * It creates and deletes one-time EventBridge Scheduler schedules in the gateway's group, delivered to one of its
   * `queues` (`scheduler:CreateSchedule`/`DeleteSchedule` there, `iam:PassRole` of the delivery role, and
   * SCHEDULE_GROUP_NAME, SCHEDULER_ROLE_ARN in its environment: lambdas/scheduling/scheduler.ts).
   */
  readonly scheduler?: boolean;
  /**
   * It encrypts with the provider-keys key (`kms:Encrypt` only, and PROVIDER_KEYS_KMS_KEY_ID in its environment), as
   * keyCipher() does for provider keys: webhook callback secrets are stored that way.
   */
  readonly encrypts?: boolean;
  /**
   * It decrypts with the provider-keys key (`kms:Decrypt` only, and PROVIDER_KEYS_KMS_KEY_ID), without the rest of
   * `providers`: the webhook sender reads callback secrets.
   */
  readonly decrypts?: boolean;
  /**
   * It posts frames to (and closes) the connections of the gateway's WebSocket API, without being that API's
   * handler: `execute-api:ManageConnections` on that API's connections only, and WEBSOCKET_CALLBACK_URL (the stage's
   * management endpoint) in its environment. A function with a `websocket` trigger has this right already.
   */
  readonly connections?: boolean;
}

export interface FunctionSpec {
  /** Construct id, and the name in outputs (`<id>FunctionName`), alarms and the dashboard. */
  readonly id: string;
  /** Handler file, relative to the repository root; it exports `handler`. */
  readonly entry: string;
  readonly description: string;
  readonly memoryMb: number;
  readonly timeoutSeconds: number;
  readonly trigger: FunctionTrigger;
  readonly access: FunctionAccess;
  /**
   * The function sends to the queue that triggers it, on purpose: a chain of its own invocations through that queue
   * is part of its design, and `reason` says what bounds it. Lambda's recursive-loop detection stops such a chain
   * after 16 invocations unless the function's RecursiveLoop is Allow, which the stack sets exactly for the entries
   * that declare this (Terminate, the default, for every other); the local runtime stops an undeclared loop the same
   * way. A function that may send to its own trigger queue must declare it (test/lib/deploy.test.ts), so every
   * loop is a decision (docs/deploy.md, "Recursive loops").
   */
  readonly recursion?: { readonly allowed: true; readonly reason: string };
}

/**
 * Registry read (projects and their secrets), Usage read/write (budget windows, and the items of the budget alerts a
 * settlement fires), and Activity write (every settlement adds to it: lambdas/activity/record.ts): what every metered
 * function needs. A settlement that fires a budget alert hands it to the webhook queue (lambdas/alerts/fire.ts), so
 * every metered function may also send there (`ALERTS`).
 */
const LEDGER = { Registry: 'read', Usage: 'readwrite', Activity: 'readwrite' } as const;
const ALERTS = 'webhook';

export const FUNCTIONS = [
  {
    id: 'Channeling',
    entry: 'lambdas/handlers/channeling.ts',
    description: 'Prompt gateway channeling proxy (/v1/messages, /v1/models, /v1/messages/count_tokens)',
    // One full vCPU: Lambda allots CPU in proportion to memory, and the gateway's CPU per request stretched over a
    // smaller share lands on every answer's latency; an instance needs ~90 MB. At this size its own time costs about
    // 1 % of the AI spend it meters for a typical 10 s stream (docs/benchmarks.md, "Lambda memory size").
    memoryMb: 1769,
    timeoutSeconds: 900,
    trigger: { kind: 'streaming-url', paths: ['/v1'] },
    // webhook: a settlement's budget alert (ALERTS).
    access: { tables: LEDGER, providers: true, queues: [ALERTS] },
  },
  {
    id: 'ConjureApi',
    entry: 'lambdas/handlers/conjure-api.ts',
    description: 'Prompt gateway conjure REST API (/usage, /incubate)',
    memoryMb: 512,
    timeoutSeconds: 29,
    trigger: { kind: 'rest', routes: CONJURE_ROUTES },
    // Vessels: /incubate creates and cancels them; the run queue and the scheduler start them (now, within 15
    // minutes, or later); webhook: cancelling a waiting vessel ends it, and an ended vessel's callback is handed to
    // the webhook queue at once (vessels/cancel.ts → end.ts → callback.ts); encrypts: a callback's secret is stored
    // encrypted.
    access: { tables: { ...LEDGER, Vessels: 'readwrite' }, providers: false, queues: ['run', 'webhook'], scheduler: true, encrypts: true },
  },
  {
    id: 'Prompt',
    entry: 'lambdas/handlers/prompt.ts',
    description: 'Prompt gateway /prompt (one-shot agent runs, JSON or SSE)',
    memoryMb: 1024,
    timeoutSeconds: 900,
    trigger: { kind: 'streaming-url', paths: ['/prompt'] },
    // Leases: the developer's concurrency; providers: the model calls; Vessels and the run queue: a run's end wakes
    // the developer's oldest vessel parked for its slot (lambdas/vessels/park.ts); webhook: budget alerts (ALERTS).
    access: { tables: { ...LEDGER, Leases: 'readwrite', Vessels: 'readwrite' }, providers: true, queues: ['run', ALERTS] },
  },
  {
    id: 'VesselExecutor',
    entry: 'lambdas/handlers/vessel-executor.ts',
    description: 'Prompt gateway vessel executor (runs incubated vessels from the run queue)',
    memoryMb: 1024,
    timeoutSeconds: 900,
    // One vessel per invocation (the run queue's batch size); at most 20 at once across all developers.
    trigger: { kind: 'sqs', queue: 'run', maxConcurrency: 20 },
    // Leases: the developer's concurrency; run: a vessel put back until due or capacity; webhook: its callback.
    access: { tables: { ...LEDGER, Vessels: 'readwrite', Leases: 'readwrite' }, providers: true, queues: ['run', 'webhook'], scheduler: false },
    recursion: {
      allowed: true,
      reason:
        'It sends to its own run queue from inside an invocation: an early message put back until the vessel is due, ' +
        "the back-offs while the developer's budget or slot is held, and the wake of the next parked vessel. Each hop is " +
        "a conditional state transition of a vessel in the Vessels table; a vessel's put-backs end when it is due and " +
        'admitted, or canceled, and the reconciler re-drives from the table whatever a lost message left behind.',
    },
  },
  {
    id: 'VesselReconciler',
    entry: 'lambdas/handlers/vessel-reconciler.ts',
    description: 'Prompt gateway vessel reconciler (re-drives stuck vessels every minute)',
    memoryMb: 256,
    timeoutSeconds: 60,
    trigger: { kind: 'schedule', expression: 'rate(1 minute)' },
    // Registry and Leases read: whether a parked vessel's developer has a free slot (tier − live leases); run:
    // re-drives and wakes; webhook: the callback of a vessel it ends. It never schedules (only cancel removes schedules).
    access: { tables: { Vessels: 'readwrite', Leases: 'read', Registry: 'read' }, providers: false, queues: ['run', 'webhook'] },
  },
  {
    id: 'WebhookSender',
    entry: 'lambdas/handlers/webhook-sender.ts',
    description: 'Prompt gateway webhook sender (delivers vessel callbacks and budget alerts from the webhook queue)',
    memoryMb: 256,
    timeoutSeconds: 30,
    // Ten deliveries per invocation (the webhook queue's batch size), made concurrently, each cut at 10 s.
    trigger: { kind: 'sqs', queue: 'webhook' },
    // Vessels and Usage: each attempt is claimed and recorded on its vessel, or on its budget alert's item; decrypts:
    // the callback (or alert) secret; webhook: the next attempt (delayed, or scheduled beyond 15 minutes), and its
    // dead-letter queue once the retries are spent.
    access: {
      tables: { Vessels: 'readwrite', Usage: 'readwrite' },
      providers: false,
      decrypts: true,
      queues: ['webhook'],
      deadLetters: ['webhook'],
      scheduler: true,
    },
    recursion: {
      allowed: true,
      reason:
        'It sends to its own webhook queue: the next attempt of a delivery (delayed, or scheduled beyond 15 minutes) and ' +
        'an early message put back. Each hop is a conditional transition of the delivery record on its vessel or alert; the ' +
        'retries are bounded by WEBHOOK_RETRY_WAITS, after which the delivery goes to the dead-letter queue.',
    },
  },
  {
    id: 'Sessions',
    entry: 'lambdas/handlers/sessions.ts',
    description: 'Prompt gateway /ws sessions (WebSocket $connect, $default and $disconnect)',
    memoryMb: 512,
    // API Gateway's integration limit: a frame is answered at once; a turn is handed to SessionTurn.
    timeoutSeconds: 29,
    trigger: { kind: 'websocket' },
    // Registry: the token on $connect; Sessions: connections, sessions and their turn state; turn: a turn (or its
    // resumption once every tool result is in) is handed to the worker.
    access: { tables: { Registry: 'read', Sessions: 'readwrite' }, providers: false, queues: ['turn'] },
  },
  {
    id: 'SessionTurn',
    entry: 'lambdas/handlers/session-turn.ts',
    description: 'Prompt gateway /ws turn worker (runs a session turn, streaming frames to its connection)',
    memoryMb: 1024,
    timeoutSeconds: 900,
    // One turn per invocation (the turn queue's batch size).
    trigger: { kind: 'sqs', queue: 'turn' },
    // Leases: the developer's concurrency per turn; providers: the model calls; Vessels and run: a turn's end wakes
    // the developer's oldest vessel parked for its slot; connections: the turn's frames go back via PostToConnection;
    // webhook: budget alerts (ALERTS).
    access: {
      tables: { ...LEDGER, Sessions: 'readwrite', Leases: 'readwrite', Vessels: 'readwrite' },
      providers: true,
      queues: ['run', ALERTS],
      connections: true,
    },
  },
  {
    id: 'SessionSweeper',
    entry: 'lambdas/handlers/session-sweeper.ts',
    description: 'Prompt gateway /ws sweeper (closes idle connections, frees turns whose worker stopped)',
    memoryMb: 256,
    timeoutSeconds: 60,
    trigger: { kind: 'schedule', expression: 'rate(1 minute)' },
    access: { tables: { Sessions: 'readwrite' }, providers: false, queues: [], connections: true },
  },
] as const satisfies readonly FunctionSpec[];

export type FunctionId = (typeof FUNCTIONS)[number]['id'];

/** The FUNCTIONS entry of `id`. */
export function functionSpec(id: FunctionId): FunctionSpec {
  const spec = FUNCTIONS.find((f) => f.id === id);
  if (!spec) throw new Error(`No function ${String(id)} in the manifest`);
  return spec;
}
