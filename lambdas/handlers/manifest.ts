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
  /** Queues it may send to (`sqs:SendMessage`, and the queue's URL in its environment). */
  readonly queues: readonly QueueName[];
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
}

/** Registry read (projects and their secrets), Usage read/write (budget windows): what every metered function needs. */
const LEDGER = { Registry: 'read', Usage: 'readwrite' } as const;

export const FUNCTIONS = [
  {
    id: 'Channeling',
    entry: 'lambdas/handlers/channeling.ts',
    description: 'Prompt gateway channeling proxy (/v1/messages, /v1/models, /v1/messages/count_tokens)',
    memoryMb: 1024,
    timeoutSeconds: 900,
    trigger: { kind: 'streaming-url', paths: ['/v1'] },
    access: { tables: LEDGER, providers: true, queues: [] },
  },
  {
    id: 'ConjureApi',
    entry: 'lambdas/handlers/conjure-api.ts',
    description: 'Prompt gateway conjure REST API (/usage; /incubate later)',
    memoryMb: 512,
    timeoutSeconds: 29,
    trigger: { kind: 'rest', routes: CONJURE_ROUTES },
    access: { tables: LEDGER, providers: false, queues: [] },
  },
  {
    id: 'Prompt',
    entry: 'lambdas/handlers/prompt.ts',
    description: 'Prompt gateway /prompt (one-shot agent runs, JSON or SSE)',
    memoryMb: 1024,
    timeoutSeconds: 900,
    trigger: { kind: 'streaming-url', paths: ['/prompt'] },
    // Leases: the developer's concurrency; providers: the model calls; no queue.
    access: { tables: { ...LEDGER, Leases: 'readwrite' }, providers: true, queues: [] },
  },
] as const satisfies readonly FunctionSpec[];

export type FunctionId = (typeof FUNCTIONS)[number]['id'];

/** The FUNCTIONS entry of `id`. */
export function functionSpec(id: FunctionId): FunctionSpec {
  const spec = FUNCTIONS.find((f) => f.id === id);
  if (!spec) throw new Error(`No function ${String(id)} in the manifest`);
  return spec;
}
