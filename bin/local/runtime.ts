import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { join, resolve } from 'node:path';
import type { APIGatewayProxyEvent, APIGatewayProxyResult, Context, LambdaFunctionURLEvent } from 'aws-lambda';
import { resetEnv } from '../../lambdas/config/env.ts';
import { resetDocumentClient } from '../../lambdas/store/dynamo.ts';
import { resetKeyCipher } from '../../lambdas/registry/key-cipher.ts';
import { clearProjectCache } from '../../lambdas/registry/project-cache.ts';
import { installAwsLambdaShim, isStreamingHandler, LocalResponseStream } from './awslambda-shim.ts';
import { ensureTables, startDynamoLocal, type LocalDynamo } from './dynamodb.ts';
import { apiGatewayEvent, functionUrlEvent, lambdaContext, readBody } from './events.ts';
import { sqsClient, startLocalQueues, type LocalQueues } from './queues.ts';
import { LocalScheduler } from './scheduler.ts';
import { startAnthropicUpstream } from './upstreams/anthropic.ts';
import { startOpenAIUpstream } from './upstreams/openai.ts';
import type { SimulatedUpstream } from './upstreams/types.ts';

/**
 * The whole gateway on one machine: DynamoDB Local, fauxqs, the scheduler stand-in and one HTTP server that turns
 * requests into the events AWS would deliver and calls the very handlers the cloud runs.
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
}

export interface RunningGateway {
  url: string;
  dynamoEndpoint: string;
  tables: Record<string, string>;
  queues: LocalQueues;
  scheduler: LocalScheduler;
  upstreams: { anthropic?: SimulatedUpstream; openai?: SimulatedUpstream };
  simulated: boolean;
  stop(): Promise<void>;
}

type ApiHandler = (event: APIGatewayProxyEvent, context: Context) => Promise<APIGatewayProxyResult>;
type StreamHandler = (event: LambdaFunctionURLEvent, stream: LocalResponseStream, context: Context) => Promise<void>;

export async function startGateway(opts: GatewayOptions = {}): Promise<RunningGateway> {
  const dataDir = opts.dataDir ? resolve(opts.dataDir) : undefined;
  const prefix = opts.tablePrefix ?? 'gateway';
  const cleanups: (() => Promise<void> | void)[] = [];
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
      cleanups.push(() => upstreams.anthropic!.close(), () => upstreams.openai!.close());
      upstreamEnv.ANTHROPIC_BASE_URL = upstreams.anthropic.url;
      upstreamEnv.ANTHROPIC_API_KEY = 'sk-ant-simulated';
      upstreamEnv.OPENAI_BASE_URL = `${upstreams.openai.url}/v1`;
      upstreamEnv.OPENROUTER_BASE_URL = `${upstreams.openai.url}/api/v1`;
    }

    const keyDir = dataDir ?? join(process.cwd(), '.data', 'tmp', `${prefix}-${process.pid}`);
    if (!dataDir) cleanups.push(() => rmSync(keyDir, { recursive: true, force: true }));
    Object.assign(process.env, {
      STAGE: 'local',
      AWS_REGION: 'us-east-1',
      AWS_ACCESS_KEY_ID: process.env.AWS_ACCESS_KEY_ID ?? 'local',
      AWS_SECRET_ACCESS_KEY: process.env.AWS_SECRET_ACCESS_KEY ?? 'local',
      DYNAMODB_ENDPOINT: dynamoEndpoint,
      SQS_ENDPOINT: queues.endpoint,
      ...tables,
      ...queues.urls,
      PROVIDER_KEYS_LOCAL_KEY_FILE: join(keyDir, 'provider-keys.key'),
      POWERTOOLS_METRICS_DISABLED: process.env.POWERTOOLS_METRICS_DISABLED ?? 'true',
      POWERTOOLS_LOG_LEVEL: process.env.POWERTOOLS_LOG_LEVEL ?? 'WARN',
      ...upstreamEnv,
      ...opts.env,
    });
    resetEnv();
    resetDocumentClient();
    resetKeyCipher();
    clearProjectCache();

    const scheduler = new LocalScheduler({
      file: dataDir ? join(dataDir, 'schedules.json') : undefined,
      sqs: sqsClient(queues.endpoint),
      targetQueueUrl: queues.urls.RUN_QUEUE_URL,
    });
    scheduler.start();
    cleanups.push(() => scheduler.stop());

    // Handlers are loaded only now: middy reads the awslambda globals and the handlers read the environment at load.
    installAwsLambdaShim();
    const channeling = (await import('../../lambdas/handlers/channeling.ts')).handler as unknown as StreamHandler;
    const conjure = (await import('../../lambdas/handlers/conjure-api.ts')).handler as unknown as ApiHandler;

    const server = createServer((req, res) => {
      void route(req, res, { channeling, conjure }).catch((err: unknown) => {
        if (!res.headersSent) {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: 'local_runtime_error', message: (err as Error).message }));
        } else res.destroy();
      });
    });
    server.keepAliveTimeout = 65_000;
    await listen(server, opts.port ?? 0, opts.host ?? '127.0.0.1');
    cleanups.push(() => closeServer(server));
    const { port } = server.address() as { port: number };
    const url = `http://${opts.host ?? '127.0.0.1'}:${port}`;

    if (dataDir) {
      mkdirSync(dataDir, { recursive: true });
      writeFileSync(
        join(dataDir, 'runtime.json'),
        JSON.stringify({ url, pid: process.pid, dynamoEndpoint, tables, keyFile: process.env.PROVIDER_KEYS_LOCAL_KEY_FILE }, null, 2),
      );
      cleanups.push(() => rmSync(join(dataDir, 'runtime.json'), { force: true }));
    }
    return { url, dynamoEndpoint, tables, queues, scheduler, upstreams, simulated, stop: stopAll };
  } catch (err) {
    await stopAll();
    throw err;
  }
}

async function route(req: IncomingMessage, res: ServerResponse, h: { channeling: StreamHandler; conjure: ApiHandler }): Promise<void> {
  const path = new URL(req.url ?? '/', 'http://localhost').pathname;
  if (path === '/health') {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{"status":"ok"}');
    return;
  }
  const body = await readBody(req);
  if (path.startsWith('/v1/')) {
    await invokeStreaming(h.channeling, functionUrlEvent(req, body), res, 'channeling');
    return;
  }
  const result = await h.conjure(apiGatewayEvent(req, body), lambdaContext('conjure-api', 29_000));
  res.writeHead(result.statusCode, result.headers as Record<string, string>);
  res.end(result.isBase64Encoded ? Buffer.from(result.body, 'base64') : result.body);
}

/** Calls a RESPONSE_STREAM handler the way Lambda does, with the HTTP response as its stream. */
export async function invokeStreaming(handler: unknown, event: LambdaFunctionURLEvent, res: ServerResponse, name: string): Promise<void> {
  if (!isStreamingHandler(handler)) throw new Error(`${name} is not a streaming handler`);
  const stream = new LocalResponseStream(res);
  try {
    await (handler as StreamHandler)(event, stream, lambdaContext(name));
  } catch (err) {
    // Lambda answers a failure before the prelude with 502; after it, the connection simply ends.
    if (!res.headersSent) {
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ message: 'Internal Server Error' }));
    } else if (!res.writableEnded) res.destroy(err as Error);
  }
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
