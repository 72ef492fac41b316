import { chmodSync, mkdirSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createServer, ServerResponse, type IncomingMessage, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { join, resolve } from 'node:path';
import type { Duplex } from 'node:stream';
import { pathToFileURL } from 'node:url';
import type {
  APIGatewayProxyEvent,
  APIGatewayProxyResult,
  Context,
  LambdaFunctionURLEvent,
  ScheduledEvent,
  SQSBatchResponse,
  SQSEvent,
  SQSRecord,
} from 'aws-lambda';
import { MAX_INVOCATION_SECONDS } from '../../lambdas/config/env.ts';
import type { RestRoute } from '../../lambdas/conjure/routes.ts';
import { FUNCTIONS, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { normalizePath } from '../../lambdas/http/path.ts';
import { formatAccessLine, setAccessLogSink, type AccessRecord } from '../../lambdas/observability/access-log.ts';
import { QUEUES, queueSpec, type QueueName } from '../../lambdas/store/queues.ts';
import { PROJECT_ROOT } from '../../lib/bundling.ts';
import { installAwsLambdaShim, isStreamingHandler, LocalResponseStream, STREAMING } from './awslambda-shim.ts';
import { ensureTables, startDynamoLocal, type LocalDynamo } from './dynamodb.ts';
import { apiGatewayEvent, functionUrlEvent, lambdaContext, readBody, scheduledEvent, splitTarget } from './events.ts';
import { startLocalIam, type LocalIam } from './iam.ts';
import { functionEnvironment, installInstances, invokeAs, registerFunctions } from './instances.ts';
import { apiGatewayLimits, type AwsRefusal, functionUrlPayloadRefusal } from './limits.ts';
import { pollQueue, sqsClient, startLocalQueues, type LocalQueues, type PollerActivity, type SqsHandler } from './queues.ts';
import { chainInvocations, invocationTraceHeader, MAX_CHAIN_INVOCATIONS, newTraceHeader } from './recursion.ts';
import { LocalScheduler } from './scheduler.ts';
import { LocalWebSockets, WEBSOCKET_PATH } from './websocket.ts';
import { startAnthropicUpstream } from './upstreams/anthropic.ts';
import { startOpenAIUpstream } from './upstreams/openai.ts';
import type { SimulatedUpstream } from './upstreams/types.ts';

/**
 * The whole gateway on one machine: DynamoDB Local, fauxqs, the scheduler stand-in, one HTTP server that turns
 * requests into the events AWS would deliver, pollers for each queue consumer and timers for each scheduled
 * function, calling the very handlers the cloud runs — every function of the manifest
 * (lambdas/handlers/manifest.ts), served as its trigger says.
 */
export interface GatewayOptions {
  port?: number;
  host?: string;
  /** Where DynamoDB data, the local provider-key key and runtime.json live. Omit for a throw-away in-memory store. */
  dataDir?: string;
  /** Use an already running DynamoDB Local instead of starting one. */
  dynamoEndpoint?: string;
  dynamoPort?: number;
  tablePrefix?: string;
  /** Serve the project's simulated Anthropic/OpenAI upstreams. Default: when ANTHROPIC_API_KEY is not set. */
  simulateUpstreams?: boolean;
  /** Extra environment for the handlers (applied after the runtime's own). */
  env?: Record<string, string>;
  /** Lambda's invocation limit, enforced locally (default 15 minutes); tests shorten it. */
  invocationTimeoutMs?: number;
  /** API Gateway's REST integration time-out (default 29 s, bin/local/limits.ts); tests shorten it. */
  restIntegrationTimeoutMs?: number;
  /** Prints one readable access-log line per request (npm start); by default the handlers' structured log is used. */
  accessLog?: (line: string) => void;
  /** Each access-log line as `{"access": {…record}}` instead, phases included (LOCAL_ACCESS_LOG=json; the bench reads it). */
  accessLogJson?: boolean;
  /**
   * Check each function's DynamoDB and SQS calls against its grants through the local stand-in for IAM
   * (bin/local/iam.ts; default true). The bench turns it off (LOCAL_IAM=off): in AWS that check happens inside
   * DynamoDB and SQS, not in the function, so its in-process HTTP hop is no part of a function's CPU. Off, the
   * functions reach the engines directly and SQS trace headers are not kept (no recursion emulation).
   */
  localIam?: boolean;
  /** The functions to serve: the manifest (lambdas/handlers/manifest.ts) unless a test passes a variant. */
  functions?: readonly FunctionSpec[];
  /**
   * The period of every `schedule` function instead of its rate (each also runs once at start-up); tests shorten it,
   * or lengthen it and call `invokeScheduled`.
   */
  scheduleIntervalMs?: number;
}

export interface RunningGateway {
  url: string;
  dynamoEndpoint: string;
  tables: Record<string, string>;
  queues: LocalQueues;
  scheduler: LocalScheduler;
  upstreams: { anthropic?: SimulatedUpstream; openai?: SimulatedUpstream };
  simulated: boolean;
  /** What is served, function by function (localFunctions()). */
  functions: LocalFunction[];
  /**
   * The WebSocket API, when a function has a `websocket` trigger: `ws://…/ws` on the same server, and the management
   * API stand-in the events' callback URL names (bin/local/websocket.ts).
   */
  websocket?: { url: string; managementEndpoint: string };
  /**
   * Runs the `schedule` function `functionId` now, as its rule would, and resolves when it has finished (after the
   * run in progress, if there is one: a function never runs twice at once). Rejects with the handler's error.
   */
  invokeScheduled(functionId: string): Promise<void>;
  /**
   * Resolves when every HTTP invocation under way has returned, as Lambda's would: a response is delivered before its
   * settlement is written (docs/architecture.md), so a test that reads the ledger right after an answer waits for this.
   */
  invocationsDone(): Promise<void>;
  /**
   * What the gateway is doing right now, read only: for tests that prove nothing more happens instead of sleeping
   * (test/support/drained.ts). Counts only grow; a test compares two reads to know that nothing started in between.
   */
  activity(): GatewayActivity;
  stop(): Promise<void>;
}

/** `RunningGateway.activity()`: the invocations under way, and how many have started, by trigger. */
export interface GatewayActivity {
  /** Each queue a function consumes, its pollers together (PollerActivity, bin/local/queues.ts). */
  queues: Partial<Record<QueueName, PollerActivity>>;
  /** HTTP requests (function URLs and the REST API): started since the gateway started, and not yet returned. */
  http: { started: number; running: number };
  /** WebSocket events ($connect, $default, $disconnect), counted the same way; none without a websocket function. */
  websocket: { started: number; running: number };
  /**
   * Each `schedule` function by id: its runs started (by its timer or `invokeScheduled`), whether one is running, and
   * how long until its timer's next run (monotonic time, so a test's moved `Date` does not move it).
   */
  schedules: Record<string, { started: number; running: boolean; nextRunInMs: number }>;
  /** Messages Lambda's recursive-loop detection, emulated, has stopped (bin/local/recursion.ts): each counted once. */
  recursionStopped: number;
}

/** How the local runtime serves one function of the manifest: the way AWS would invoke it. */
export type LocalFunction = {
  readonly id: string;
  /** Absolute path of the handler file. */
  readonly entry: string;
  /** Its manifest entry: what it may do (bin/local/iam.ts) and see (bin/local/instances.ts). */
  readonly spec: FunctionSpec;
  /** The name in the Lambda context and in local error lines (`ConjureApi` → `conjure-api`). */
  readonly functionName: string;
  readonly timeoutMs: number;
} /** Requests whose path is one of `paths` or under it, as a function-URL event to a streaming handler. */ & (
  | { readonly kind: 'streaming-url'; readonly paths: readonly string[] }
  /** Requests matching `routes` (and any path no other function serves), as an API Gateway REST proxy event. */
  | { readonly kind: 'rest'; readonly routes: readonly RestRoute[] }
  /**
   * Batches from the fauxqs queue, as SQS events; what the handler does not report failed is deleted. At most
   * `maxConcurrency` invocations at once (the trigger's, else DEFAULT_SQS_CONCURRENCY).
   */
  | { readonly kind: 'sqs'; readonly queue: QueueName; readonly batchSize: number; readonly maxConcurrency: number }
  /** A ScheduledEvent at start-up, then every `intervalMs` (the rate of `expression`); one invocation at a time. */
  | { readonly kind: 'schedule'; readonly expression: string; readonly intervalMs: number }
  /** WebSocket upgrades at `path` (/ws), as API Gateway's $connect, $default and $disconnect events; at most one. */
  | { readonly kind: 'websocket'; readonly path: string }
);

/**
 * How many invocations of an SQS consumer run at once locally when its trigger sets no maxConcurrency: Lambda's
 * event source starts with five concurrent pollers.
 */
export const DEFAULT_SQS_CONCURRENCY = 5;

/** The schedule group of the scheduler stand-in (SCHEDULE_GROUP_NAME locally). */
export const LOCAL_SCHEDULE_GROUP = 'local';
/** The delivery role the handlers name locally (SCHEDULER_ROLE_ARN); the stand-in assumes nothing. */
/** No stand-in for IAM (`localIam: false`): the engines' own endpoints, nothing checked, no trace kept. */
async function noLocalIam(o: Parameters<typeof startLocalIam>[0]): Promise<LocalIam> {
  return {
    dynamoEndpoint: o.dynamoEndpoint,
    sqsEndpoint: o.sqsEndpoint,
    traceOf: () => undefined,
    forget: () => undefined,
    denied: [],
    stop: async () => undefined,
  };
}

export const LOCAL_SCHEDULER_ROLE_ARN = 'arn:aws:iam::000000000000:role/local-scheduler-delivery';

const RATE_UNITS_MS: Readonly<Record<string, number>> = { minute: 60_000, hour: 3_600_000, day: 86_400_000 };

/**
 * The period of an EventBridge rule's `rate(value unit)` expression in milliseconds, by EventBridge's rules: a
 * positive whole value, the unit minute(s), hour(s) or day(s), singular exactly when the value is 1 (`rate(1
 * minute)`, `rate(5 minutes)`). `cron(…)` is refused: the local runtime serves rates only.
 */
export function rateIntervalMs(expression: string): number {
  if (/^cron\(.*\)$/.test(expression)) {
    throw new Error(`${expression}: the local runtime serves rate(…) schedules only, not cron(…); use a rate or implement cron in bin/local/runtime.ts`);
  }
  const match = /^rate\((\d+) ([a-z]+)\)$/.exec(expression);
  if (!match) throw new Error(`${expression} is not an EventBridge schedule expression: rate(1 minute), rate(5 minutes), rate(2 hours), rate(1 day)…`);
  const value = Number(match[1]);
  const unit = match[2]!;
  const singular = unit.endsWith('s') ? unit.slice(0, -1) : unit;
  const unitMs = RATE_UNITS_MS[singular];
  if (unitMs === undefined) throw new Error(`${expression}: the unit must be minute(s), hour(s) or day(s) (EventBridge rules run at most once a minute)`);
  if (value < 1) throw new Error(`${expression}: the value must be a positive whole number`);
  if ((value === 1) !== (unit === singular)) {
    throw new Error(
      `${expression}: EventBridge wants the singular unit for 1 and the plural otherwise (rate(1 ${singular}), rate(${value === 1 ? 2 : value} ${singular}s))`,
    );
  }
  return value * unitMs;
}

/**
 * What the local runtime serves for each function of the manifest, in manifest order. Throws, naming the function,
 * for a schedule it cannot follow (cron) or a second websocket function (the local server has one /ws), so
 * `npm start` refuses at startup instead of leaving a function silently unserved.
 */
export function localFunctions(functions: readonly FunctionSpec[] = FUNCTIONS): LocalFunction[] {
  const websockets = functions.filter((f) => f.trigger.kind === 'websocket').map((f) => f.id);
  if (websockets.length > 1) {
    throw new Error(
      `The local runtime serves one websocket function at ${WEBSOCKET_PATH}, and the manifest has ${websockets.length} ` +
        `(${websockets.join(', ')}; lambdas/handlers/manifest.ts): one WebSocket API routes $connect, $default and $disconnect to one function.`,
    );
  }
  return functions.map((spec): LocalFunction => {
    const common = {
      id: spec.id,
      spec,
      entry: join(PROJECT_ROOT, spec.entry),
      functionName: spec.id.replace(/([a-z0-9])([A-Z])/g, '$1-$2').toLowerCase(),
      timeoutMs: spec.timeoutSeconds * 1000,
    };
    const { trigger } = spec;
    switch (trigger.kind) {
      case 'streaming-url':
        return { ...common, kind: 'streaming-url', paths: trigger.paths };
      case 'rest':
        return { ...common, kind: 'rest', routes: trigger.routes };
      case 'sqs':
        return {
          ...common,
          kind: 'sqs',
          queue: trigger.queue,
          batchSize: trigger.batchSize ?? queueSpec(trigger.queue).batchSize,
          maxConcurrency: trigger.maxConcurrency ?? DEFAULT_SQS_CONCURRENCY,
        };
      case 'schedule': {
        let intervalMs: number;
        try {
          intervalMs = rateIntervalMs(trigger.expression);
        } catch (err) {
          throw new Error(`The manifest's ${spec.id} function (lambdas/handlers/manifest.ts): ${(err as Error).message}`);
        }
        return { ...common, kind: 'schedule', expression: trigger.expression, intervalMs };
      }
      case 'websocket':
        return { ...common, kind: 'websocket', path: WEBSOCKET_PATH };
      default:
        throw new Error(`${spec.id}: unknown trigger ${JSON.stringify(trigger)}`);
    }
  });
}

/** A loaded function: what it is served as, and its `handler` export. */
type Served = LocalFunction & { readonly handler: unknown };

type ApiHandler = (event: APIGatewayProxyEvent, context: Context) => Promise<APIGatewayProxyResult>;
type StreamHandler = (event: LambdaFunctionURLEvent, stream: LocalResponseStream, context: Context) => Promise<void>;
type ScheduledHandler = (event: ScheduledEvent, context: Context) => Promise<unknown>;
type AnyHandler = (...args: unknown[]) => unknown;

/**
 * A function's handler as Lambda invokes it: each call an invocation of that function, in its own environment and
 * instance (bin/local/instances.ts). An HTTP request, a WebSocket event or a schedule starts a new trace; a queue's
 * batch carries its messages' chain (bin/local/recursion.ts), and a message that would be the chain's 17th invocation
 * of a function whose manifest entry does not allow recursion is not handed to it: Lambda's recursive-loop detection
 * stops it, it stays on the queue (given back, as a failure) until its redrive policy moves it to the dead-letter queue.
 */
function asInvocations(
  fn: LocalFunction,
  handler: AnyHandler,
  environment: Readonly<Record<string, string | undefined>>,
  iam: LocalIam,
  recursion: { stopped: number },
): AnyHandler {
  let wrapped: AnyHandler;
  if (fn.kind === 'sqs') {
    const recursionAllowed = fn.spec.recursion?.allowed === true;
    const stoppedBefore = new Set<string>();
    wrapped = async (...args: unknown[]) => {
      const [event, context] = args as [SQSEvent, Context];
      const run: SQSRecord[] = [];
      const stopped: SQSRecord[] = [];
      for (const record of event.Records) {
        const trace = iam.traceOf(record.messageId);
        if (trace) record.attributes.AWSTraceHeader = trace;
        if (!recursionAllowed && chainInvocations(trace, fn.id) >= MAX_CHAIN_INVOCATIONS) stopped.push(record);
        else run.push(record);
      }
      for (const record of stopped) {
        if (stoppedBefore.has(record.messageId)) continue;
        stoppedBefore.add(record.messageId);
        recursion.stopped++;
        console.warn(
          `${fn.functionName}: Lambda's recursive-loop detection stopped message ${record.messageId}: its chain has invoked ${fn.id} ` +
            `${MAX_CHAIN_INVOCATIONS} times, and its manifest entry does not allow recursion (lambdas/handlers/manifest.ts, \`recursion\`)`,
        );
      }
      const failures = stopped.map((r) => ({ itemIdentifier: r.messageId }));
      if (run.length === 0) return { batchItemFailures: failures };
      const trace = invocationTraceHeader(
        run.map((r) => r.attributes.AWSTraceHeader),
        fn.id,
      );
      const result = (await invokeAs(fn.id, environment, trace, () => handler({ ...event, Records: run }, context))) as SQSBatchResponse | undefined;
      const failed = new Set((result?.batchItemFailures ?? []).map((f) => f.itemIdentifier));
      for (const record of run) if (!failed.has(record.messageId)) iam.forget(record.messageId);
      return failures.length || result ? { batchItemFailures: [...(result?.batchItemFailures ?? []), ...failures] } : undefined;
    };
  } else {
    wrapped = (...args: unknown[]) => invokeAs(fn.id, environment, newTraceHeader(), () => handler(...args));
  }
  if (isStreamingHandler(handler)) Object.defineProperty(wrapped, STREAMING, { value: true });
  return wrapped;
}

export async function startGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  // First, before anything starts: a function this runtime cannot serve refuses the start.
  const served = localFunctions(opts.functions);
  if (opts.scheduleIntervalMs !== undefined && !(Number.isInteger(opts.scheduleIntervalMs) && opts.scheduleIntervalMs > 0)) {
    throw new RangeError(`scheduleIntervalMs must be a positive whole number of milliseconds, got ${opts.scheduleIntervalMs}`);
  }
  const dataDir = opts.dataDir ? resolve(opts.dataDir) : undefined;
  if (dataDir) privateDataDir(dataDir);
  const prefix = opts.tablePrefix ?? 'gateway';
  // What the gateway sets in the environment is given back when it stops: a later gateway of this process (the next
  // test file of a vitest worker, which keeps its process from file to file) starts from the same environment.
  const environmentBefore = { ...process.env };
  const environmentSet: Record<string, string> = {};
  const cleanups: (() => Promise<void> | void)[] = [
    () => {
      restoreEnvironment(environmentBefore, environmentSet);
      // …and what was read from it (the parsed environment, clients) is read again by whoever comes next.
      resetInstanceState();
    },
  ];
  const stopAll = async () => {
    for (const fn of cleanups.reverse()) await fn();
  };
  try {
    let dynamo: LocalDynamo | undefined;
    let dynamoEndpoint = opts.dynamoEndpoint;
    if (!dynamoEndpoint) {
      dynamo = await startDynamoLocal({ port: opts.dynamoPort, path: dataDir ? join(dataDir, 'dynamodb') : undefined });
      cleanups.push(() => dynamo!.stop());
      dynamoEndpoint = dynamo.endpoint;
    }
    const tables = await ensureTables(dynamoEndpoint, prefix);
    const queues = await startLocalQueues(prefix);
    cleanups.push(() => queues.stop());

    const simulated = opts.simulateUpstreams ?? !process.env.ANTHROPIC_API_KEY;
    const upstreams: RunningGateway['upstreams'] = {};
    const upstreamEnv: Record<string, string> = {};
    if (simulated) {
      upstreams.anthropic = await startAnthropicUpstream();
      upstreams.openai = await startOpenAIUpstream();
      cleanups.push(
        () => upstreams.anthropic!.close(),
        () => upstreams.openai!.close(),
      );
      upstreamEnv.ANTHROPIC_BASE_URL = upstreams.anthropic.url;
      upstreamEnv.ANTHROPIC_API_KEY = 'sk-ant-simulated';
      upstreamEnv.OPENAI_BASE_URL = `${upstreams.openai.url}/v1`;
      upstreamEnv.OPENROUTER_BASE_URL = `${upstreams.openai.url}/api/v1`;
    }

    // EventBridge Scheduler's stand-in, reached by the handlers through the real Scheduler client (SCHEDULER_ENDPOINT):
    // its one-time schedules deliver to the queue they name by ARN, as in AWS.
    const scheduler = new LocalScheduler({
      file: dataDir ? join(dataDir, 'schedules.json') : undefined,
      sqs: sqsClient(queues.endpoint),
      targetQueueUrl: queues.urls.RUN_QUEUE_URL,
      targets: Object.fromEntries(QUEUES.map((q) => [queues.arns[q.name], queues.urls[q.envVar]])),
      queueUrls: Object.fromEntries(QUEUES.map((q) => [q.name, queues.urls[q.envVar]])),
      groupName: LOCAL_SCHEDULE_GROUP,
    });
    cleanups.push(() => scheduler.stop());
    const schedulerEndpoint = await scheduler.listen();
    scheduler.start();

    // API Gateway's WebSocket API: its management API stand-in listens now, so the handlers' environment can name it
    // (WEBSOCKET_CALLBACK_URL, the events' callbackUrl); /ws is served once the handlers are loaded.
    let webSockets: LocalWebSockets | undefined;
    if (served.some((f) => f.kind === 'websocket')) {
      const sockets = new LocalWebSockets();
      webSockets = sockets;
      cleanups.push(async () => {
        await sockets.stop();
        // No later gateway of this process should name a stand-in that is gone.
        if (process.env.WEBSOCKET_CALLBACK_URL === sockets.managementEndpoint) delete process.env.WEBSOCKET_CALLBACK_URL;
      });
      await sockets.listen();
    }

    const keyDir = dataDir ?? join(process.cwd(), '.data', 'tmp', `${prefix}-${process.pid}`);
    if (!dataDir) {
      mkdirSync(keyDir, { recursive: true, mode: 0o700 });
      cleanups.push(() => rmSync(keyDir, { recursive: true, force: true }));
    }
    Object.assign(process.env, {
      STAGE: 'local',
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'local',
      AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'local',
      DYNAMODB_ENDPOINT: dynamoEndpoint,
      SQS_ENDPOINT: queues.endpoint,
      ...tables,
      ...queues.urls,
      ...queues.deadLetterUrls,
      ...Object.fromEntries(QUEUES.map((q) => [q.arnEnvVar, queues.arns[q.name]])),
      SCHEDULER_ENDPOINT: schedulerEndpoint,
      SCHEDULE_GROUP_NAME: LOCAL_SCHEDULE_GROUP,
      SCHEDULER_ROLE_ARN: LOCAL_SCHEDULER_ROLE_ARN,
      ...(webSockets ? { WEBSOCKET_CALLBACK_URL: webSockets.managementEndpoint } : {}),
      PROVIDER_KEYS_LOCAL_KEY_FILE: join(keyDir, 'provider-keys.key'),
      POWERTOOLS_METRICS_DISABLED: process.env.POWERTOOLS_METRICS_DISABLED ?? 'true',
      POWERTOOLS_LOG_LEVEL: process.env.POWERTOOLS_LOG_LEVEL ?? 'WARN',
      // One developer edits projects with the CLI and tries them at once: trust a cached project for 1 s at most.
      SECRET_CACHE_SECONDS: process.env.SECRET_CACHE_SECONDS ?? '1',
      // Tools and MCP servers a developer runs on this machine are reachable (docs/contract.md, "Outbound safety");
      // loopback only, and never in a deployed stack.
      ALLOW_LOOPBACK_URLS: process.env.ALLOW_LOOPBACK_URLS ?? '1',
      ...upstreamEnv,
      ...opts.env,
    });
    for (const [key, value] of Object.entries(process.env)) if (value !== undefined && value !== environmentBefore[key]) environmentSet[key] = value;
    resetInstanceState();

    // Each function as its own Lambda: only the environment its manifest entry grants, its own instance state, and
    // its calls to DynamoDB and SQS checked against its grants (docs/local.md, "As strict as AWS").
    const iam: LocalIam = await (opts.localIam === false ? noLocalIam : startLocalIam)({
      functions: served.map((f) => ({ spec: f.spec, functionName: f.functionName })),
      // Where the environment sends them (a test may put a relay of its own in between).
      dynamoEndpoint: process.env.DYNAMODB_ENDPOINT ?? dynamoEndpoint,
      sqsEndpoint: process.env.SQS_ENDPOINT ?? queues.endpoint,
      tables,
      queues: Object.fromEntries(
        QUEUES.map((q) => [q.name, { url: queues.urls[q.envVar], deadLetterUrl: queues.deadLetterUrls[q.deadLetterEnvVar] }]),
      ) as Record<QueueName, { url: string; deadLetterUrl: string }>,
    });
    cleanups.push(() => iam.stop());
    const processEnvironment = { ...process.env };
    const environments = new Map(
      served.map((f) => [f.id, functionEnvironment(f.spec, f.functionName, processEnvironment, { dynamo: iam.dynamoEndpoint, sqs: iam.sqsEndpoint })]),
    );
    cleanups.push(installInstances(), registerFunctions(environments));
    const recursion = { stopped: 0 };

    // Handlers are loaded only now: middy reads the awslambda globals and the handlers read the environment at load.
    installAwsLambdaShim();
    const loaded: Served[] = [];
    for (const fn of served) {
      const { handler } = (await import(pathToFileURL(fn.entry).href)) as { handler?: unknown };
      if (typeof handler !== 'function') throw new Error(`${fn.entry} exports no handler function (the ${fn.id} function of the manifest)`);
      const environment = environments.get(fn.id)!;
      loaded.push({ ...fn, handler: asInvocations(fn, handler as AnyHandler, environment, iam, recursion) });
    }
    const http = httpFunctions(loaded);

    // Lambda's SQS event sources: a poller per consumer function on its fauxqs queue, up to its maxConcurrency.
    const pollers: { queue: QueueName; activity(): PollerActivity }[] = [];
    for (const fn of loaded) {
      if (fn.kind !== 'sqs') continue;
      const client = sqsClient(queues.endpoint);
      const poller = pollQueue({
        client,
        queueUrl: queues.urls[queueSpec(fn.queue).envVar],
        handler: fn.handler as SqsHandler,
        functionName: fn.functionName,
        batchSize: fn.batchSize,
        timeoutMs: fn.timeoutMs,
        concurrency: fn.maxConcurrency,
      });
      pollers.push({ queue: fn.queue, activity: poller.activity });
      cleanups.push(async () => {
        await poller.stop();
        client.destroy();
      });
    }

    // EventBridge rules: each scheduled function runs once now, then on its period.
    const scheduled = new Map<string, ScheduledRunner>();
    for (const fn of loaded) {
      if (fn.kind !== 'schedule') continue;
      const runner = scheduledRunner(fn, opts.scheduleIntervalMs ?? fn.intervalMs);
      scheduled.set(fn.id, runner);
      cleanups.push(() => runner.stop());
    }
    const invokeScheduled = async (functionId: string): Promise<void> => {
      const runner = scheduled.get(functionId);
      if (!runner) {
        throw new Error(`${functionId} is not a schedule function of this gateway (schedule functions: ${[...scheduled.keys()].join(', ') || 'none'})`);
      }
      await runner.invoke();
    };

    if (opts.accessLog) {
      const print = opts.accessLog;
      const format = opts.accessLogJson ? (record: Readonly<AccessRecord>) => JSON.stringify({ access: record }) : formatAccessLine;
      setAccessLogSink((record) => print(format(record)));
      cleanups.push(() => setAccessLogSink(undefined));
    }
    const invocations = new Set<Promise<void>>();
    let invocationsStarted = 0;
    const invocationsDone = async () => {
      await Promise.allSettled([...invocations]);
    };
    const serve = (req: IncomingMessage, res: ServerResponse) => {
      const invocation = route(req, res, {
        ...http,
        invocationTimeoutMs: opts.invocationTimeoutMs,
        restIntegrationTimeoutMs: opts.restIntegrationTimeoutMs,
      }).catch((err: unknown) => {
        console.error(`local runtime failed: ${(err as Error)?.stack ?? String(err)}`);
        if (!res.headersSent && !res.destroyed) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: 'local_runtime_error', message: (err as Error).message }));
        } else res.destroy();
      });
      invocationsStarted++;
      invocations.add(invocation);
      void invocation.finally(() => invocations.delete(invocation));
    };
    // Routing never reads the Host header, so a request without one (HTTP/1.0 style) is served, not refused bare.
    const server = createServer({ requireHostHeader: false }, serve);
    server.on('clientError', answerClientError);
    // Node hands CONNECT to a separate event and would drop it silently; it goes through the handlers like any
    // method, which refuse it (405) in the app's envelope.
    server.on('connect', (req: IncomingMessage, socket: Duplex) => {
      const res = new ServerResponse(req);
      res.assignSocket(socket as Socket);
      res.shouldKeepAlive = false;
      res.once('finish', () => socket.end());
      serve(req, res);
    });
    server.keepAliveTimeout = 65_000;
    const wsFunction = loaded.find((f) => f.kind === 'websocket');
    if (webSockets && wsFunction) {
      webSockets.serve(wsFunction);
      const sockets = webSockets;
      server.on('upgrade', (req: IncomingMessage, socket: Duplex, head: Buffer) => sockets.handleUpgrade(req, socket, head));
    }
    await listen(server, opts.port ?? 0, opts.host ?? '127.0.0.1');
    cleanups.push(() => closeServer(server));
    // Runs before the server closes (cleanups run in reverse): an upgraded socket would keep server.close() waiting.
    if (webSockets) cleanups.push(() => webSockets!.stop());
    const { port } = server.address() as { port: number };
    const url = `http://${opts.host ?? '127.0.0.1'}:${port}`;
    const websocket = webSockets
      ? { url: `ws://${opts.host ?? '127.0.0.1'}:${port}${WEBSOCKET_PATH}`, managementEndpoint: webSockets.managementEndpoint }
      : undefined;

    if (dataDir) {
      writeFileSync(
        join(dataDir, 'runtime.json'),
        JSON.stringify(
          {
            url,
            pid: process.pid,
            dynamoEndpoint,
            tables,
            keyFile: process.env.PROVIDER_KEYS_LOCAL_KEY_FILE,
            sqsEndpoint: queues.endpoint,
            queues: queues.urls,
            // The operator CLI checks webhook URLs (alert targets) by the gateway's own outbound policy.
            allowLoopbackUrls: process.env.ALLOW_LOOPBACK_URLS === '1',
          },
          null,
          2,
        ),
        { mode: 0o600 },
      );
      chmodSync(join(dataDir, 'runtime.json'), 0o600);
      cleanups.push(() => rmSync(join(dataDir, 'runtime.json'), { force: true }));
    }
    const activity = (): GatewayActivity => {
      const byQueue: GatewayActivity['queues'] = {};
      for (const p of pollers) {
        const a = p.activity();
        const sum = byQueue[p.queue];
        byQueue[p.queue] = sum
          ? { received: sum.received + a.received, running: sum.running + a.running, released: new Map([...sum.released, ...a.released]) }
          : a;
      }
      return {
        queues: byQueue,
        http: { started: invocationsStarted, running: invocations.size },
        websocket: webSockets?.activity() ?? { started: 0, running: 0 },
        schedules: Object.fromEntries([...scheduled].map(([id, runner]) => [id, runner.activity()])),
        recursionStopped: recursion.stopped,
      };
    };
    return {
      url,
      dynamoEndpoint,
      tables,
      queues,
      scheduler,
      upstreams,
      simulated,
      functions: served,
      ...(websocket ? { websocket } : {}),
      invokeScheduled,
      invocationsDone,
      activity,
      stop: stopAll,
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

/**
 * Puts back what a gateway changed in process.env since `before`, key by key — except a key that something else (a
 * gateway started later in the same process, still running) has changed again since.
 */
function restoreEnvironment(before: Readonly<Record<string, string | undefined>>, set: Readonly<Record<string, string>>): void {
  for (const [key, value] of Object.entries(set)) {
    if (process.env[key] !== value) continue;
    if (before[key] === undefined) delete process.env[key];
    else process.env[key] = before[key];
  }
}

interface ScheduledRunner {
  /** Runs the handler now, after the run in progress if there is one; rejects with the handler's error. */
  invoke(): Promise<void>;
  /** Stops the timer and waits for the run in progress. */
  stop(): Promise<void>;
  /** Runs started, whether one is running, and how long until the timer's next tick (GatewayActivity). */
  activity(): { started: number; running: boolean; nextRunInMs: number };
}

/**
 * An EventBridge rule on a schedule, locally: invokes the handler with a ScheduledEvent at once and then every
 * `intervalMs`, one invocation at a time — a tick that comes while the previous run is still going is skipped. A
 * failure is logged and the next tick runs again; it never stops the runtime.
 */
function scheduledRunner(fn: Served & { kind: 'schedule' }, intervalMs: number): ScheduledRunner {
  let current: Promise<void> | undefined;
  let stopped = false;
  let started = 0;
  // When the timer last ticked (monotonic): Node re-arms an interval when its callback runs, so the next tick comes
  // `intervalMs` after that at the earliest.
  let tickedAt = performance.now();
  const run = (): Promise<void> => {
    started++;
    const invocation = (async () => {
      try {
        await (fn.handler as ScheduledHandler)(scheduledEvent(fn.functionName), lambdaContext(fn.functionName, fn.timeoutMs));
      } catch (err) {
        console.error(`${fn.functionName} (${fn.expression}) failed: ${(err as Error)?.stack ?? String(err)}`);
        throw err;
      }
    })();
    current = invocation;
    void invocation
      .then(
        () => undefined,
        () => undefined,
      )
      .then(() => {
        if (current === invocation) current = undefined;
      });
    return invocation;
  };
  const tick = () => {
    tickedAt = performance.now();
    if (stopped || current) return;
    run().catch(() => undefined); // logged above
  };
  const timer = setInterval(tick, intervalMs);
  timer.unref();
  tick();
  return {
    async invoke() {
      while (current) await current.catch(() => undefined);
      if (stopped) throw new Error(`${fn.id} is stopped`);
      await run();
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      while (current) await current.catch(() => undefined);
    },
    activity: () => ({
      started,
      running: current !== undefined,
      // A second early, for the timer's own lateness in reading the clock (libuv's cached loop time).
      nextRunInMs: stopped ? Number.POSITIVE_INFINITY : tickedAt + intervalMs - 1_000 - performance.now(),
    }),
  };
}

/** The functions the HTTP server serves: function URLs by path prefix, the REST API by route. */
interface HttpFunctions {
  streaming: ReadonlyArray<Served & { kind: 'streaming-url' }>;
  rest: ReadonlyArray<Served & { kind: 'rest' }>;
}

function httpFunctions(loaded: readonly Served[]): HttpFunctions {
  return {
    streaming: loaded.filter((f): f is Served & { kind: 'streaming-url' } => f.kind === 'streaming-url'),
    rest: loaded.filter((f): f is Served & { kind: 'rest' } => f.kind === 'rest'),
  };
}

/** True when `path` is `prefix` or lies under it (`/v1`, `/v1/messages`; not `/v1x`). */
function underPrefix(path: string, prefix: string): boolean {
  return path === prefix || path.startsWith(`${prefix}/`);
}

/**
 * True when `path` matches an API Gateway resource path: literal segments, `{name}` for one segment, `{name+}` for
 * the rest. A trailing slash is accepted, as the routers accept it.
 */
export function matchesResourcePath(template: string, path: string): boolean {
  const want = template.split('/').filter(Boolean);
  const got = path.split('/').filter(Boolean);
  for (let i = 0; i < want.length; i++) {
    const segment = want[i]!;
    if (/^\{[^}]+\+\}$/.test(segment)) return got.length > i;
    if (got[i] === undefined) return false;
    if (!/^\{[^}]+\}$/.test(segment) && segment !== got[i]) return false;
  }
  return got.length === want.length;
}

/** The function serving a (normalised) path: a function URL by its prefixes, else the REST function of its route. */
export function functionForPath<F extends LocalFunction>(functions: readonly F[], path: string): F | undefined {
  const streaming = functions.find((f) => f.kind === 'streaming-url' && f.paths.some((prefix) => underPrefix(path, prefix)));
  if (streaming) return streaming;
  const rest = functions.filter((f) => f.kind === 'rest');
  // A path no route declares goes to the first REST function, which answers it in its own envelope (404 or 405):
  // locally there is no API Gateway in front to refuse it (docs/api.md).
  return rest.find((f) => f.kind === 'rest' && f.routes.some((r) => matchesResourcePath(r.path, path))) ?? rest[0];
}

/**
 * Picks the function the way the AWS URLs would (a function URL for the paths it serves — channeling for the
 * Messages API under /v1 —, the REST API for the rest) from the path alone, normalised once by the same function
 * the routers use, and calls its real handler. Nothing a client does here may throw past this point.
 */
async function route(
  req: IncomingMessage,
  res: ServerResponse,
  h: HttpFunctions & { invocationTimeoutMs?: number; restIntegrationTimeoutMs?: number },
): Promise<void> {
  const path = normalizePath(splitTarget(req.url).path);
  if (path === '/health' || path === '/health/') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"status":"ok"}');
    return;
  }
  // A CONNECT request has no body to read (the connection would be a tunnel).
  // Up to API Gateway's 10 MB: what is over is refused below as AWS would, and the rest of the upload is not kept.
  const read = req.method === 'CONNECT' ? { body: Buffer.alloc(0), truncated: false } : await readBody(req, apiGatewayLimits.maxBodyBytes);
  if (!read) return; // the client went away mid-upload: nothing to answer
  const fn = functionForPath<Served>([...h.streaming, ...h.rest], path);
  const answer = (refusal: { statusCode: number; headers: Readonly<Record<string, string>>; body: string }) => {
    res.writeHead(refusal.statusCode, refusal.headers);
    res.end(refusal.body);
  };
  if (fn?.kind === 'streaming-url') {
    const event = functionUrlEvent(req, read.body);
    const refusal = functionUrlPayloadRefusal(event, read.body.length, read.truncated);
    if (refusal) answer(refusal);
    else await invokeStreaming(fn.handler, event, res, fn.functionName, h.invocationTimeoutMs ?? fn.timeoutMs);
  } else if (fn?.kind === 'rest') {
    // API Gateway's own answers (its DEFAULT_4XX/5XX gateway responses) give a page's Origin back, as the stack
    // configures them (lib/constructs/api.ts); a function URL's own refusals carry no CORS headers, in AWS or here.
    const origin = req.headers.origin;
    const gatewayAnswer = (refusal: AwsRefusal) =>
      answer(origin === undefined ? refusal : { ...refusal, headers: { ...refusal.headers, 'access-control-allow-origin': origin, vary: 'Origin' } });
    // Every method of a declared path reaches the function with the event API Gateway would give it: OPTIONS (a CORS
    // preflight, routed to the function on every resource with a route: lib/constructs/api.ts) like GET or POST.
    const resource = fn.routes.find((r) => matchesResourcePath(r.path, path))?.path;
    const event = read.truncated ? undefined : apiGatewayEvent(req, read.body, resource);
    if (!event) gatewayAnswer(apiGatewayLimits.tooLarge);
    else if (apiGatewayLimits.payloadRefused(event, read.body.length)) gatewayAnswer(apiGatewayLimits.integrationFailure);
    else {
      // API Gateway answers 504 at its integration time-out; the function runs on, as Lambda's would.
      const invocation = (fn.handler as ApiHandler)(event, lambdaContext(fn.functionName, fn.timeoutMs));
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<undefined>((resolve) => {
        timer = setTimeout(() => resolve(undefined), h.restIntegrationTimeoutMs ?? apiGatewayLimits.integrationTimeoutMs);
      });
      const result = await Promise.race([invocation, timedOut]).finally(() => clearTimeout(timer));
      if (!result) {
        gatewayAnswer(apiGatewayLimits.timedOut);
        await invocation.catch(() => undefined);
      } else {
        res.writeHead(result.statusCode, result.headers as Record<string, string>);
        res.end(result.isBase64Encoded ? Buffer.from(result.body, 'base64') : result.body);
      }
    }
  } else {
    // No function serves HTTP here but the health check (a manifest without a URL or REST function).
    res.writeHead(404, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ message: 'Not Found' }));
  }
  if (read.truncated) {
    // Closing at once would reset the connection while the client is still sending, and a reset can discard the
    // answer before the client reads it: discard what still comes for a moment (a lingering close), then cut.
    const linger = () => {
      req.resume();
      setTimeout(() => req.socket.destroy(), LINGER_MS).unref();
    };
    if (res.writableFinished) linger();
    else res.once('finish', linger);
  }
}

const LINGER_MS = 500;

/**
 * Calls a RESPONSE_STREAM handler the way Lambda does, with the HTTP response as its stream — including Lambda's
 * limit on how long an invocation may run: past it the response is cut (the stream is destroyed, so the proxy stops
 * the upstream and settles what was produced). A request therefore never outlives its reservation, whose expiry is
 * longer (RESERVATION_TTL_SECONDS).
 */
export async function invokeStreaming(
  handler: unknown,
  event: LambdaFunctionURLEvent,
  res: ServerResponse,
  name: string,
  timeoutMs = MAX_INVOCATION_SECONDS * 1000,
): Promise<void> {
  if (!isStreamingHandler(handler)) throw new Error(`${name} is not a streaming handler`);
  const stream = new LocalResponseStream(res);
  const timer = setTimeout(() => {
    console.error(`${name}: invocation timed out after ${timeoutMs / 1000} s; the response is cut, as Lambda would`);
    stream.destroy(new Error(`Task timed out after ${timeoutMs / 1000} seconds`));
    res.destroy();
  }, timeoutMs);
  try {
    await (handler as StreamHandler)(event, stream, lambdaContext(name, timeoutMs));
  } catch (err) {
    // A pipe broken by a client that left is not a failure of the handler; anything else is a gateway bug.
    if (res.destroyed || stream.destroyed) return;
    console.error(`${name} handler failed: ${(err as Error)?.stack ?? String(err)}`);
    // Lambda answers a failure before the prelude with 502; after it, the connection simply ends.
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: 'Internal Server Error' }));
    } else if (!res.writableEnded) res.destroy(err as Error);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * What Node's HTTP parser refuses before any handler could see it (a malformed request line, an unknown method,
 * oversized headers): a short JSON answer and a closed connection, never a crash.
 */
function answerClientError(err: NodeJS.ErrnoException, socket: Duplex): void {
  if (!socket.writable || (err as { code?: string }).code === 'ECONNRESET') {
    socket.destroy();
    return;
  }
  const tooLarge = err.code === 'HPE_HEADER_OVERFLOW';
  const status = tooLarge ? '431 Request Header Fields Too Large' : '400 Bad Request';
  const body = JSON.stringify({
    error: tooLarge ? 'request_headers_too_large' : 'bad_request',
    message: `Malformed HTTP request (${err.code ?? 'parse error'})`,
  });
  socket.end(`HTTP/1.1 ${status}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`);
}

function listen(server: Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

function closeServer(server: Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/** What the gateway keeps in DATA_DIR (and what a file browser adds); a directory holding only these is the gateway's. */
const DATA_DIR_ENTRIES = new Set([
  'dynamodb',
  'provider-keys.key',
  'runtime.json',
  'dev-token.txt',
  'schedules.json',
  'schedules.json.tmp',
  'tmp',
  '.DS_Store',
]);

/**
 * DATA_DIR holds the provider-key key, the registry (project secrets) and a 30-day token: it is created 0700 and
 * its files are 0600. A DATA_DIR made by an earlier version (0755) is tightened in place when it is the gateway's own;
 * one that holds other files, or belongs to another user, is never chmod-ed (think DATA_DIR=$HOME or /tmp): the
 * gateway refuses to keep secrets there and says what to do.
 */
function privateDataDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  if (process.platform === 'win32') return;
  const st = statSync(dir);
  if ((st.mode & 0o077) !== 0) {
    const foreign = readdirSync(dir).filter((entry) => !DATA_DIR_ENTRIES.has(entry));
    const mine = st.uid === process.getuid?.();
    if (!mine || foreign.length > 0) {
      const why = mine
        ? `holds files that are not the gateway's (${foreign.slice(0, 3).join(', ')}${foreign.length > 3 ? ', …' : ''})`
        : 'belongs to another user';
      throw new Error(
        `DATA_DIR ${dir} is open to other users (mode ${(st.mode & 0o777).toString(8)}) and ${why}; the gateway keeps secrets there. ` +
          `Use a directory of its own (e.g. DATA_DIR=${join(dir, '.prompt-gateway')}) or run: chmod 700 ${dir}`,
      );
    }
    chmodSync(dir, 0o700);
  }
  for (const file of ['provider-keys.key', 'runtime.json', 'dev-token.txt', 'schedules.json']) {
    try {
      chmodSync(join(dir, file), 0o600);
    } catch {
      // not there yet: it is created 0600
    }
  }
}
