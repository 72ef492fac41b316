import { randomUUID } from 'node:crypto';
import { ApiGatewayManagementApiClient, DeleteConnectionCommand, PostToConnectionCommand } from '@aws-sdk/client-apigatewaymanagementapi';
import type { APIGatewayEventWebsocketRequestContextV2, APIGatewayProxyStructuredResultV2, APIGatewayProxyWebsocketEventV2 } from 'aws-lambda';
import { env } from '../config/env.ts';
import { onInstanceReset } from '../instance/state.ts';
import { headersFrom } from './request.ts';

/**
 * API Gateway WebSocket events as a small domain union, and the way back to a client (ConnectionSender). Translation
 * only: nothing here decides whether a connection is allowed or what a message means.
 */

/**
 * What API Gateway really delivers for a WebSocket route. `@types/aws-lambda` leaves out the handshake's headers
 * (present on $connect, partly on $disconnect) and the close code and reason of $disconnect.
 */
export type WebSocketLambdaEvent = Omit<APIGatewayProxyWebsocketEventV2, 'requestContext'> & {
  headers?: Record<string, string | undefined>;
  multiValueHeaders?: Record<string, string[] | undefined>;
  /** As typed by `@types/aws-lambda`, but `messageId` only on messages (API Gateway sends none with $connect). */
  requestContext: Omit<APIGatewayEventWebsocketRequestContextV2, 'messageId'> & {
    messageId?: string;
    disconnectStatusCode?: number;
    disconnectReason?: string;
    identity?: { sourceIp?: string; userAgent?: string };
  };
};

interface Common {
  readonly connectionId: string;
  /** API Gateway's id of this event (for logs). */
  readonly requestId: string;
  /**
   * `https://<domain>/<stage>`: the management endpoint that reaches this connection (apiGatewayConnectionSender);
   * WEBSOCKET_CALLBACK_URL instead when set (the local runtime's stand-in).
   */
  readonly callbackUrl: string;
}

export type WebSocketEvent =
  /** A client asks to connect: the handshake's headers and query string (where a token travels). */
  | (Common & { readonly kind: 'connect'; readonly headers: Headers; readonly query: URLSearchParams; readonly sourceIp?: string })
  /** The connection is gone (closed by either side, or idle); the close code and reason when API Gateway gives them. */
  | (Common & { readonly kind: 'disconnect'; readonly statusCode?: number; readonly reason?: string })
  /** A message from the client, text or (base64-delivered) binary, on its route ($default unless a route matched). */
  | (Common & { readonly kind: 'message'; readonly route: string; readonly data: string | Uint8Array });

/** The domain event of an API Gateway WebSocket event (by its eventType, so custom route keys are messages too). */
export function webSocketEventFrom(event: WebSocketLambdaEvent): WebSocketEvent {
  const ctx = event.requestContext;
  const common: Common = {
    connectionId: ctx.connectionId,
    requestId: ctx.requestId,
    // Locally the management API is a stand-in over plain HTTP (bin/local/websocket.ts): WEBSOCKET_CALLBACK_URL names it.
    callbackUrl: env().WEBSOCKET_CALLBACK_URL ?? `https://${ctx.domainName}/${ctx.stage}`,
  };
  switch (ctx.eventType) {
    case 'CONNECT': {
      const query = new URLSearchParams();
      if (event.multiValueQueryStringParameters) {
        for (const [name, values] of Object.entries(event.multiValueQueryStringParameters)) for (const v of values ?? []) query.append(name, v);
      } else {
        for (const [name, value] of Object.entries(event.queryStringParameters ?? {})) if (value !== undefined) query.append(name, value);
      }
      return {
        ...common,
        kind: 'connect',
        headers: headersFrom(event.headers ?? {}),
        query,
        ...(ctx.identity?.sourceIp ? { sourceIp: ctx.identity.sourceIp } : {}),
      };
    }
    case 'DISCONNECT':
      return {
        ...common,
        kind: 'disconnect',
        ...(ctx.disconnectStatusCode !== undefined ? { statusCode: ctx.disconnectStatusCode } : {}),
        ...(ctx.disconnectReason ? { reason: ctx.disconnectReason } : {}),
      };
    case 'MESSAGE': {
      const body = event.body ?? '';
      return {
        ...common,
        kind: 'message',
        route: ctx.routeKey,
        data: event.isBase64Encoded ? new Uint8Array(Buffer.from(body, 'base64')) : body,
      };
    }
    default:
      throw new Error(`Unknown WebSocket event type ${String((ctx as { eventType?: unknown }).eventType)}`);
  }
}

/**
 * What a WebSocket route's function answers: 200 accepts a $connect (any other status refuses the handshake with
 * it); for $disconnect and messages API Gateway only notes it.
 */
export function webSocketResult(statusCode = 200, body?: string): APIGatewayProxyStructuredResultV2 {
  return body === undefined ? { statusCode } : { statusCode, body };
}

/**
 * API Gateway's quota on one WebSocket frame, 32 KB (docs/ws.md, "Limits"): a client frame over it closes the
 * connection with 1009. Browsers and most libraries send a message as one frame, so it is in practice the limit on a
 * client's message; a larger one goes as `part` frames (below).
 */
export const MAX_FRAME_BYTES = 32 * 1024;
/**
 * API Gateway's quota on one message, 128 KB: the most a client's message of several continuation frames may total,
 * and the most one PostToConnection takes (a bigger one is refused with 413 PayloadTooLargeException).
 */
export const MAX_MESSAGE_BYTES = 128 * 1024;

/**
 * A slice of a message too large for one frame (docs/ws.md, "Large messages"): the `data` of parts 0…count-1 of one
 * `id`, joined in index order, is the message's JSON text. Clients send them to the gateway, and the gateway sends
 * its own frames over MAX_FRAME_BYTES to clients this way.
 */
export interface PartFrame {
  type: 'part';
  id: string;
  index: number;
  count: number;
  data: string;
}

/** How many bytes a UTF-16 code unit (or a surrogate pair) takes once JSON.stringify has escaped it, as UTF-8. */
function escapedBytes(text: string, i: number): { units: number; bytes: number } {
  const c = text.charCodeAt(i);
  if (c === 0x22 || c === 0x5c) return { units: 1, bytes: 2 };
  if (c < 0x20) return { units: 1, bytes: c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d ? 2 : 6 };
  if (c < 0x80) return { units: 1, bytes: 1 };
  if (c < 0x800) return { units: 1, bytes: 2 };
  if (c >= 0xd800 && c <= 0xdbff) {
    const next = text.charCodeAt(i + 1);
    // A pair is never cut between two parts; a lone surrogate is escaped (\udXXX).
    return next >= 0xdc00 && next <= 0xdfff ? { units: 2, bytes: 4 } : { units: 1, bytes: 6 };
  }
  if (c >= 0xdc00 && c <= 0xdfff) return { units: 1, bytes: 6 };
  return { units: 1, bytes: 3 };
}

/**
 * `text` as `part` frames of `id`, each at most `maxBytes` of UTF-8 once encoded (JSON text, in order). A text that
 * fits in one frame is one part.
 */
export function splitIntoParts(text: string, id: string, maxBytes = MAX_FRAME_BYTES): string[] {
  // The envelope with room for any index and count this text can need (a part carries at least one code unit).
  const envelope = Buffer.byteLength(JSON.stringify({ type: 'part', id, index: text.length, count: text.length, data: '' }));
  const room = maxBytes - envelope;
  if (room < 6) throw new RangeError(`A part of ${maxBytes} bytes has no room for data beside its envelope (id ${JSON.stringify(id)})`);
  const slices: string[] = [];
  let start = 0;
  let bytes = 0;
  for (let i = 0; i < text.length; ) {
    const step = escapedBytes(text, i);
    if (bytes + step.bytes > room) {
      slices.push(text.slice(start, i));
      start = i;
      bytes = 0;
    }
    bytes += step.bytes;
    i += step.units;
  }
  slices.push(text.slice(start));
  return slices.map((data, index) => JSON.stringify({ type: 'part', id, index, count: slices.length, data } satisfies PartFrame));
}

/** The way back to WebSocket clients. */
export interface ConnectionSender {
  /**
   * Sends one message; false when the connection is gone (the client left), so the caller can forget it. A text over
   * MAX_FRAME_BYTES goes as `part` frames (splitIntoParts), so none is refused by PostToConnection nor arrives as a
   * frame over API Gateway's quota.
   */
  send(connectionId: string, data: string | Uint8Array): Promise<boolean>;
  /** Closes the connection; closing one that is already gone is not an error. */
  close(connectionId: string): Promise<void>;
}

const clients = new Map<string, ApiGatewayManagementApiClient>();
onInstanceReset(() => {
  for (const client of clients.values()) client.destroy();
  clients.clear();
});

/** One management API client per endpoint and instance. */
function managementClient(endpoint: string): ApiGatewayManagementApiClient {
  let client = clients.get(endpoint);
  if (!client) {
    client = new ApiGatewayManagementApiClient({ endpoint, region: env().AWS_REGION });
    clients.set(endpoint, client);
  }
  return client;
}

function isGone(err: unknown): boolean {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } } | undefined;
  return e?.name === 'GoneException' || e?.$metadata?.httpStatusCode === 410;
}

/**
 * A ConnectionSender on the API Gateway Management API of one WebSocket stage (`callbackUrl` of an event, or the
 * stage's callback URL). The function needs `execute-api:ManageConnections` on that API (the stack grants it to a
 * function with a `websocket` trigger).
 */
export function apiGatewayConnectionSender(endpoint: string): ConnectionSender {
  return {
    async send(connectionId, data) {
      const bytes = typeof data === 'string' ? new TextEncoder().encode(data) : data;
      // One PostToConnection per part, in order: a client joins them by id (docs/ws.md, "Large messages").
      const posts =
        typeof data === 'string' && bytes.byteLength > MAX_FRAME_BYTES ? splitIntoParts(data, randomUUID()).map((p) => new TextEncoder().encode(p)) : [bytes];
      try {
        for (const post of posts) await managementClient(endpoint).send(new PostToConnectionCommand({ ConnectionId: connectionId, Data: post }));
        return true;
      } catch (err) {
        if (isGone(err)) return false;
        throw err;
      }
    },
    async close(connectionId) {
      try {
        await managementClient(endpoint).send(new DeleteConnectionCommand({ ConnectionId: connectionId }));
      } catch (err) {
        if (!isGone(err)) throw err;
      }
    },
  };
}
