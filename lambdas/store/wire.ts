import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import type { AttributeValue, DynamoDBClient, PutItemCommandInput, UpdateItemCommandInput } from '@aws-sdk/client-dynamodb';
import { isServerError, isThrottlingError, isTransientError } from '@smithy/core/retry';
import type { RetryStrategyV2, SdkError } from '@smithy/types';
import { SignatureV4 } from '@smithy/signature-v4';

/**
 * The conditional writes on every metered request's path (store/conditional.ts: a reservation, a settlement, an
 * activity count) sent in DynamoDB's own JSON protocol — one signed POST each — instead of through the AWS SDK's
 * command stack. Measured (docs/benchmarks.md, "CPU per request by layer"), the SDK's stack was the largest layer of
 * the gateway's CPU per request: per write it resolves the endpoint rules, serialises through its schema walker,
 * builds and escapes a user agent, copies the request through a dozen middleware steps and parses the answer back
 * the same way — about three times the CPU of the request itself.
 *
 * What makes a write correct stays the SDK's, taken from an SDK client's configuration (store/dynamo.ts: the document
 * client's): the credentials (its default chain, cached and refreshed), the SigV4 signer (@smithy/signature-v4, the SDK's own) with
 * the client's clock offset, the retry strategy (the SDK's standard mode: attempts, the retry token bucket, backoff
 * with jitter) and the classification of what is worth retrying (@smithy/core/retry). Errors come back shaped as the
 * SDK's service exceptions: `name` DynamoDB's error type, `$metadata`, and the body's fields (`Item` of a failed
 * condition) on the error.
 *
 * Only the two actions conditional.ts sends; every other store call goes through the SDK.
 */

export type WriteAction = 'UpdateItem' | 'PutItem';
export type WriteInput = UpdateItemCommandInput | PutItemCommandInput;
export interface WriteOutput {
  Attributes?: Record<string, AttributeValue>;
}

/** One write as the steps see it. */
export interface WriteCall {
  action: WriteAction;
  input: WriteInput;
}

/** Code around a write or one of its sends (tests: a refused write, a delayed one, an answer lost after it applied). */
export type WriteStep = (call: WriteCall, next: () => Promise<WriteOutput>) => Promise<WriteOutput>;

/** An error as the SDK raises a service's or the network's: what isTransientError and isThrottlingError read. */
type WireError = SdkError & {
  code?: string;
  $fault?: 'client' | 'server';
  $metadata?: { httpStatusCode?: number; requestId?: string; attempts?: number; totalRetryDelay?: number };
};

const API_VERSION = 'DynamoDB_20120810';
const CONTENT_TYPE = 'application/x-amz-json-1.0';

/**
 * DynamoDB's JSON carries binary values as base64 (`B`, `BS`); the SDK turns them into bytes both ways. An attribute
 * *named* B or BS is a map key whose value is an object, never a string, so only the type tags match here.
 */
function toWire(this: unknown, key: string, value: unknown): unknown {
  // The holder's own value, not `value`: JSON.stringify hands a replacer what toJSON made of it, and a Buffer's
  // toJSON is `{type: 'Buffer', data: [...]}`.
  const original = (this as Record<string, unknown>)[key];
  return original instanceof Uint8Array ? Buffer.from(original.buffer, original.byteOffset, original.byteLength).toString('base64') : value;
}
function fromWire(key: string, value: unknown): unknown {
  if (key === 'B' && typeof value === 'string') return new Uint8Array(Buffer.from(value, 'base64'));
  if (key === 'BS' && Array.isArray(value) && value.every((v) => typeof v === 'string')) return value.map((v) => new Uint8Array(Buffer.from(v, 'base64')));
  return value;
}

export class StoreWire {
  /**
   * `call` steps run once around a whole write, before its retries (as the SDK's initialize step); `attempt` steps
   * run around each send, inside the retry loop (as its deserialize step). Empty in the deployed functions.
   */
  readonly steps: { call: WriteStep[]; attempt: WriteStep[] } = { call: [], attempt: [] };
  private readonly url: URL;
  private readonly agent: HttpAgent | HttpsAgent;
  private readonly signer: SignatureV4;
  private readonly strategy: Promise<RetryStrategyV2>;

  constructor(
    private readonly config: DynamoDBClient['config'],
    endpoint: string,
  ) {
    this.url = new URL(endpoint);
    const secure = this.url.protocol === 'https:';
    // Kept alive, as the SDK's handler keeps its sockets (a new TLS handshake per write would cost more than the rest).
    this.agent = secure ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
    this.signer = new SignatureV4({ credentials: config.credentials, region: config.region, service: 'dynamodb', sha256: config.sha256 });
    // The standard (and adaptive) strategies are V2 ones; the legacy interface is only used by a custom strategy.
    this.strategy = config.retryStrategy() as Promise<RetryStrategyV2>;
  }

  write(action: WriteAction, input: WriteInput): Promise<WriteOutput> {
    const call: WriteCall = { action, input };
    return around(this.steps.call, call, () => this.withRetries(call));
  }

  destroy(): void {
    this.agent.destroy();
  }

  /** The SDK's retry middleware, step for step (@smithy/core/retry `retryMiddleware`), around each attempt. */
  private async withRetries(call: WriteCall): Promise<WriteOutput> {
    const strategy = await this.strategy;
    const body = JSON.stringify(call.input, toWire);
    let token = await strategy.acquireInitialRetryToken('');
    let attempts = 0;
    let totalRetryDelay = 0;
    for (;;) {
      try {
        const out = await around(this.steps.attempt, call, () => this.post(call.action, body));
        strategy.recordSuccess(token);
        return out;
      } catch (err) {
        const error = err as WireError;
        error.$metadata = { ...error.$metadata, attempts: attempts + 1, totalRetryDelay };
        try {
          token = await strategy.refreshRetryTokenForRetry(token, { error, errorType: retryErrorType(error) });
        } catch {
          throw error;
        }
        attempts = token.getRetryCount();
        const delay = token.getRetryDelay();
        totalRetryDelay += delay;
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }

  private async post(action: WriteAction, body: string): Promise<WriteOutput> {
    const { hostname, port, host, protocol, pathname } = this.url;
    const signed = await this.signer.sign(
      {
        method: 'POST',
        protocol,
        hostname,
        ...(port ? { port: Number(port) } : {}),
        path: pathname,
        query: {},
        headers: { host, 'content-type': CONTENT_TYPE, 'content-length': String(Buffer.byteLength(body)), 'x-amz-target': `${API_VERSION}.${action}` },
        body,
      },
      { signingDate: new Date(Date.now() + (this.config.systemClockOffset ?? 0)) },
    );
    const send = protocol === 'https:' ? httpsRequest : httpRequest;
    const answer = await new Promise<{ status: number; text: string; requestId?: string }>((resolve, reject) => {
      const req = send({ agent: this.agent, hostname, port, method: 'POST', path: pathname, headers: signed.headers }, (res: IncomingMessage) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', reject);
        res.on('end', () => {
          const requestId = res.headers['x-amzn-requestid'];
          resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString('utf8'), ...(typeof requestId === 'string' ? { requestId } : {}) });
        });
      });
      req.on('error', reject);
      req.end(body);
    });
    let parsed: Record<string, unknown>;
    try {
      parsed = answer.text ? (JSON.parse(answer.text, fromWire) as Record<string, unknown>) : {};
    } catch {
      parsed = {};
    }
    if (answer.status >= 200 && answer.status < 300) return parsed as WriteOutput;
    throw serviceError(answer.status, answer.requestId, parsed);
  }
}

/** The error DynamoDB answered, as the SDK shapes it: `name` its type, its body's other fields on the error. */
function serviceError(status: number, requestId: string | undefined, body: Record<string, unknown>): WireError {
  const type = typeof body.__type === 'string' ? body.__type : '';
  const name = type.slice(type.lastIndexOf('#') + 1) || (status >= 500 ? 'InternalServerError' : 'UnknownError');
  const message = typeof body.message === 'string' ? body.message : typeof body.Message === 'string' ? body.Message : name;
  const { __type: _type, message: _m, Message: _M, cause: _c, ...fields } = body;
  return Object.assign(new Error(message) as WireError, fields, {
    name,
    $fault: status >= 500 ? ('server' as const) : ('client' as const),
    $metadata: { httpStatusCode: status, ...(requestId ? { requestId } : {}) },
  });
}

/** As the SDK's `getRetryErrorType`. */
function retryErrorType(error: WireError): 'THROTTLING' | 'TRANSIENT' | 'SERVER_ERROR' | 'CLIENT_ERROR' {
  if (isThrottlingError(error)) return 'THROTTLING';
  if (isTransientError(error)) return 'TRANSIENT';
  if (isServerError(error)) return 'SERVER_ERROR';
  return 'CLIENT_ERROR';
}

function around(steps: readonly WriteStep[], call: WriteCall, last: () => Promise<WriteOutput>): Promise<WriteOutput> {
  const at = (i: number): Promise<WriteOutput> => (i === steps.length ? last() : steps[i]!(call, () => at(i + 1)));
  return at(0);
}
