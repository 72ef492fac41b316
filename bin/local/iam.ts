import { Agent, createServer, request, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { FunctionSpec, TableId } from '../../lambdas/handlers/manifest.ts';
import { QUEUES, type QueueName } from '../../lambdas/store/queues.ts';
import { TABLES } from '../../lambdas/store/tables.ts';
import { localAccessKeyId } from './instances.ts';

/**
 * The local stand-in for IAM (docs/local.md, "As strict as AWS"): DynamoDB Local and fauxqs check nothing, so the
 * functions reach them through this proxy, which knows each caller by the access key its calls are signed with
 * (bin/local/instances.ts) and lets through only what that function's manifest entry grants — the same grants the
 * stack turns into IAM statements (lib/gateway-stack.ts). A call outside them gets the AccessDeniedException AWS would
 * send, so a missing grant fails a test as it would fail in AWS. Calls signed with any other key (the test process,
 * the CLI, the runtime's own pollers) are the operator's and pass.
 *
 * It also reads the trace header the AWS SDK puts on a function's SendMessage (X-Amzn-Trace-Id) and keeps it by
 * message id, as SQS keeps it as the message's AWSTraceHeader: the recursion emulation (bin/local/recursion.ts).
 */

/** DynamoDB actions of the grants lib/constructs/data.ts makes (CDK's readData / readWriteData). */
const READ_ACTIONS = new Set(['GetItem', 'BatchGetItem', 'Query', 'Scan', 'ConditionCheckItem', 'DescribeTable']);
const WRITE_ACTIONS = new Set(['PutItem', 'UpdateItem', 'DeleteItem', 'BatchWriteItem']);
/** What Lambda's SQS event source does with its function's role on the function's trigger queue. */
const CONSUME_ACTIONS = new Set([
  'ReceiveMessage',
  'DeleteMessage',
  'DeleteMessageBatch',
  'ChangeMessageVisibility',
  'ChangeMessageVisibilityBatch',
  'GetQueueAttributes',
]);
/** Trace headers kept for messages not yet consumed; the oldest go first past this many. */
const MAX_TRACES = 100_000;

export interface LocalIamOptions {
  readonly functions: ReadonlyArray<{ readonly spec: FunctionSpec; readonly functionName: string }>;
  readonly dynamoEndpoint: string;
  readonly sqsEndpoint: string;
  /** Table names by their environment variable (REGISTRY_TABLE…). */
  readonly tables: Readonly<Record<string, string>>;
  /** Queue URLs: each queue's and its dead-letter queue's. */
  readonly queues: Readonly<Record<QueueName, { readonly url: string; readonly deadLetterUrl: string }>>;
}

export interface LocalIam {
  /** The endpoints the functions are given instead of DynamoDB Local's and fauxqs's. */
  readonly dynamoEndpoint: string;
  readonly sqsEndpoint: string;
  /** The trace header a function's SendMessage carried for `messageId`, if a function sent it. */
  traceOf(messageId: string): string | undefined;
  /** Forgets a consumed message's trace. */
  forget(messageId: string): void;
  /** Calls refused so far, newest last: `<function> may not <action> on <resource>`. */
  readonly denied: readonly string[];
  stop(): Promise<void>;
}

interface Need {
  readonly action: string;
  readonly resource: string;
  readonly allowed: boolean;
}

export async function startLocalIam(opts: LocalIamOptions): Promise<LocalIam> {
  const owners = new Map(opts.functions.map((f) => [localAccessKeyId(f.spec.id), f]));
  const tableIds = new Map<string, TableId>();
  for (const spec of TABLES) {
    const name = opts.tables[spec.envVar];
    if (name) tableIds.set(name, spec.id);
  }
  const traces = new Map<string, string>();
  const denied: string[] = [];
  const agent = new Agent({ keepAlive: true });

  const dynamoNeeds = (spec: FunctionSpec, action: string, body: DynamoBody): Need[] => {
    const need = (act: string, table: string | undefined, index?: string): Need => {
      const id = table === undefined ? undefined : tableIds.get(table);
      const mode = id ? spec.access.tables[id] : undefined;
      const allowed = mode === 'readwrite' ? READ_ACTIONS.has(act) || WRITE_ACTIONS.has(act) : mode === 'read' ? READ_ACTIONS.has(act) : false;
      return { action: `dynamodb:${act}`, resource: `table/${table ?? '?'}${index ? `/index/${index}` : ''}`, allowed };
    };
    switch (action) {
      case 'TransactWriteItems':
        return (body.TransactItems ?? []).map((item) => {
          if (item.Put) return need('PutItem', item.Put.TableName);
          if (item.Update) return need('UpdateItem', item.Update.TableName);
          if (item.Delete) return need('DeleteItem', item.Delete.TableName);
          return need('ConditionCheckItem', item.ConditionCheck?.TableName);
        });
      case 'TransactGetItems':
        return (body.TransactItems ?? []).map((item) => need('GetItem', item.Get?.TableName));
      case 'BatchGetItem':
      case 'BatchWriteItem':
        return Object.keys(body.RequestItems ?? {}).map((table) => need(action, table));
      default:
        return [need(action, body.TableName, body.IndexName)];
    }
  };

  const sqsNeeds = (spec: FunctionSpec, action: string, body: { QueueUrl?: string }): Need[] => {
    const queue = QUEUES.find((q) => opts.queues[q.name]?.url === body.QueueUrl);
    const deadLetter = QUEUES.find((q) => opts.queues[q.name]?.deadLetterUrl === body.QueueUrl);
    const resource = queue ? `queue/${queue.name}` : deadLetter ? `queue/${deadLetter.name}-dead-letter` : `queue/${body.QueueUrl ?? '?'}`;
    let allowed = false;
    if (action === 'SendMessage' || action === 'SendMessageBatch') {
      allowed = queue ? spec.access.queues.includes(queue.name) : deadLetter ? (spec.access.deadLetters ?? []).includes(deadLetter.name) : false;
    } else if (CONSUME_ACTIONS.has(action)) {
      allowed = !!queue && spec.trigger.kind === 'sqs' && spec.trigger.queue === queue.name;
    }
    return [{ action: `sqs:${action}`, resource, allowed }];
  };

  const serve = (service: 'dynamodb' | 'sqs', upstream: URL) => async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const raw = Buffer.concat(chunks);
    const owner = owners.get(/Credential=([^/,\s]+)\//.exec(req.headers.authorization ?? '')?.[1] ?? '');
    const target = String(req.headers['x-amz-target'] ?? '');
    const action = target.slice(target.indexOf('.') + 1);
    if (owner) {
      let body: Record<string, unknown> = {};
      try {
        body = JSON.parse(raw.toString('utf8') || '{}') as Record<string, unknown>;
      } catch {
        // The service answers a body it cannot parse; nothing here to check.
      }
      const needs = service === 'dynamodb' ? dynamoNeeds(owner.spec, action, body as DynamoBody) : sqsNeeds(owner.spec, action, body);
      const refused = needs.find((n) => !n.allowed);
      if (refused) {
        const line = `${owner.spec.id} may not ${refused.action} on ${refused.resource}`;
        denied.push(line);
        console.error(`local IAM: ${line} — its manifest entry (lambdas/handlers/manifest.ts) does not grant it, so neither would its role in AWS`);
        const message =
          `User: arn:aws:sts::000000000000:assumed-role/${owner.functionName}-role/${owner.functionName} is not authorized to perform: ` +
          `${refused.action} on resource: arn:aws:${service}:us-east-1:000000000000:${refused.resource} because no identity-based policy allows the ${refused.action} action`;
        res.writeHead(400, {
          'content-type': 'application/x-amz-json-1.0',
          ...(service === 'sqs' ? { 'x-amzn-query-error': 'AccessDenied;Sender' } : {}),
        });
        res.end(JSON.stringify({ __type: 'com.amazon.coral.service#AccessDeniedException', [service === 'sqs' ? 'message' : 'Message']: message }));
        return;
      }
    }
    const trace = service === 'sqs' && owner && action.startsWith('SendMessage') ? req.headers['x-amzn-trace-id'] : undefined;
    const forward = request(
      { agent, host: upstream.hostname, port: upstream.port, method: req.method, path: req.url, headers: { ...req.headers, host: upstream.host } },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        if (typeof trace !== 'string') {
          answer.pipe(res);
          return;
        }
        const out: Buffer[] = [];
        answer.on('data', (c: Buffer) => out.push(c));
        answer.on('end', () => {
          const text = Buffer.concat(out);
          res.end(text);
          try {
            const sent = JSON.parse(text.toString('utf8')) as { MessageId?: string; Successful?: { MessageId?: string }[] };
            for (const id of [sent.MessageId, ...(sent.Successful ?? []).map((s) => s.MessageId)]) {
              if (!id) continue;
              traces.set(id, trace);
              if (traces.size > MAX_TRACES) traces.delete(traces.keys().next().value!);
            }
          } catch {
            // an error answer: nothing was sent
          }
        });
      },
    );
    // The service could not be reached: the caller's connection fails as its own would have, not with an answer.
    forward.on('error', () => res.destroy());
    forward.end(raw);
  };

  const listen = async (handler: (req: IncomingMessage, res: ServerResponse) => Promise<void>): Promise<{ server: Server; url: string }> => {
    const server = createServer((req, res) => {
      handler(req, res).catch((err: unknown) => {
        if (!res.headersSent) res.writeHead(500, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ message: `local IAM failed: ${(err as Error).message}` }));
      });
    });
    server.keepAliveTimeout = 65_000;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
  };
  const dynamo = await listen(serve('dynamodb', new URL(opts.dynamoEndpoint)));
  const sqs = await listen(serve('sqs', new URL(opts.sqsEndpoint)));
  return {
    dynamoEndpoint: dynamo.url,
    sqsEndpoint: sqs.url,
    traceOf: (id) => traces.get(id),
    forget: (id) => void traces.delete(id),
    denied,
    async stop() {
      for (const { server } of [dynamo, sqs]) {
        await new Promise<void>((resolve) => {
          server.close(() => resolve());
          server.closeAllConnections();
        });
      }
      agent.destroy();
    },
  };
}

interface DynamoBody {
  TableName?: string;
  IndexName?: string;
  RequestItems?: Record<string, unknown>;
  TransactItems?: Array<{
    Put?: { TableName?: string };
    Update?: { TableName?: string };
    Delete?: { TableName?: string };
    ConditionCheck?: { TableName?: string };
    Get?: { TableName?: string };
  }>;
}
