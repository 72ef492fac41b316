import type { FetchLike } from '@modelcontextprotocol/sdk/shared/transport.js';
import { outboundFetch } from '../../outbound/fetch.ts';

/**
 * The fetch an MCP server's transports use (docs/prompt.md, "Limits on tools"): the guarded outbound fetch, whose
 * response bodies are capped beneath the SDK, so no answer of a server is ever read past a limit, whatever the SDK does
 * with it. A JSON body is cut at `maxMessageBytes` in all; an event stream at `maxMessageBytes` for any one event (its
 * field lines, up to the blank line that ends it) and at `maxStreamBytes` for all its events together. At a limit the
 * body errors with `McpAnswerTooLarge` and is cancelled (the connection is closed: the rest is never read), and
 * `onTooLarge` says which requests it was answering — the JSON-RPC ids of the request whose POST it answers, none for
 * a stream the transport opened on its own (the GET stream that carries the SSE transport's every answer).
 */

export interface McpReadLimits {
  /** One JSON body, or one event of a stream. */
  maxMessageBytes: number;
  /** All the events of one stream. */
  maxStreamBytes: number;
  /** A POST that carries requests: its answer, body included (the tool-call time limit). */
  requestTimeoutMs: number;
  /** Any other exchange: the streams the transports hold open for the session. */
  streamTimeoutMs: number;
}

export class McpAnswerTooLarge extends Error {
  constructor(
    readonly limit: number,
    what: 'message' | 'stream',
  ) {
    super(
      what === 'message'
        ? `the server sent a message larger than ${limit} bytes, the most the gateway reads of one MCP message`
        : `the server's event stream passed ${limit} bytes, the most the gateway reads of one stream`,
    );
    this.name = 'McpAnswerTooLarge';
  }
}

/** The ids of the JSON-RPC requests in a body the transport sends (a message or a batch); none for anything else. */
function requestIds(body: unknown): Array<string | number> {
  if (typeof body !== 'string') return [];
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return [];
  }
  const messages = Array.isArray(parsed) ? parsed : [parsed];
  return messages.flatMap((m) => {
    const id = (m as { id?: unknown } | null)?.id;
    return typeof (m as { method?: unknown } | null)?.method === 'string' && (typeof id === 'string' || typeof id === 'number') ? [id] : [];
  });
}

const LF = 0x0a;
const CR = 0x0d;

/**
 * Counts an event stream's bytes as they pass: an event ends at a blank line (CR, LF or CRLF line ends, as the SSE
 * format allows), so the count of the event in progress restarts there.
 */
function eventStreamCap(limits: McpReadLimits, onTooLarge: (err: McpAnswerTooLarge) => void): TransformStream<Uint8Array, Uint8Array> {
  let total = 0;
  let event = 0;
  let atLineStart = true;
  let afterCR = false;
  return new TransformStream({
    transform(chunk, controller) {
      total += chunk.byteLength;
      if (total > limits.maxStreamBytes) {
        return refuse(controller, new McpAnswerTooLarge(limits.maxStreamBytes, 'stream'), onTooLarge);
      }
      for (let i = 0; i < chunk.byteLength; i++) {
        const byte = chunk[i];
        if (byte === LF && afterCR) {
          afterCR = false; // the LF of a CRLF: the line ended at its CR
          continue;
        }
        afterCR = byte === CR;
        if (byte === LF || byte === CR) {
          if (atLineStart)
            event = 0; // a blank line: the event is dispatched
          else atLineStart = true;
          continue;
        }
        atLineStart = false;
        if (++event > limits.maxMessageBytes) {
          return refuse(controller, new McpAnswerTooLarge(limits.maxMessageBytes, 'message'), onTooLarge);
        }
      }
      controller.enqueue(chunk);
    },
  });
}

/** Ends a capped body with `err`, and says so. */
function refuse(controller: TransformStreamDefaultController<Uint8Array>, err: McpAnswerTooLarge, onTooLarge: (err: McpAnswerTooLarge) => void): void {
  controller.error(err);
  onTooLarge(err);
}

/** Counts a JSON (or any other) body: it is one message. */
function messageCap(limits: McpReadLimits, onTooLarge: (err: McpAnswerTooLarge) => void): TransformStream<Uint8Array, Uint8Array> {
  let total = 0;
  return new TransformStream({
    transform(chunk, controller) {
      total += chunk.byteLength;
      if (total > limits.maxMessageBytes) {
        return refuse(controller, new McpAnswerTooLarge(limits.maxMessageBytes, 'message'), onTooLarge);
      }
      controller.enqueue(chunk);
    },
  });
}

/** Statuses whose response can carry no body (the Response constructor refuses one). */
const NULL_BODY = new Set([101, 103, 204, 205, 304]);

/**
 * A fetch for the MCP transports of one server; `onTooLarge(err, ids)` is told when a body was cut (after the body
 * has errored), with the ids of the requests that body was answering.
 */
export function cappedMcpFetch(limits: McpReadLimits, onTooLarge: (err: McpAnswerTooLarge, ids: Array<string | number>) => void): FetchLike {
  return async (url, init) => {
    const ids = requestIds(init?.body);
    const timeoutMs = ids.length > 0 ? limits.requestTimeoutMs : limits.streamTimeoutMs;
    const res = await outboundFetch(url, init, { timeoutMs });
    if (!res.body || NULL_BODY.has(res.status)) return res;
    const told = (err: McpAnswerTooLarge) => onTooLarge(err, ids);
    const stream = (res.headers.get('content-type') ?? '').toLowerCase().includes('text/event-stream');
    const body = res.body.pipeThrough(stream ? eventStreamCap(limits, told) : messageCap(limits, told));
    const capped = new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
    // The transports name a redirect's target from the response's URL (the request's when it is empty).
    Object.defineProperty(capped, 'url', { value: res.url });
    return capped;
  };
}
