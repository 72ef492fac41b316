import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cappedMcpFetch, McpAnswerTooLarge, type McpReadLimits } from '../../../lambdas/agent/tools/mcp-fetch.ts';
import { resetInstanceState } from '../../../lambdas/instance/state.ts';

/**
 * The capped fetch beneath the MCP transports, on its own against a real HTTP server: an event stream is counted per
 * event — an event ends at a blank line, whatever line ends (LF, CR, CRLF) the server uses — and in all; any other body
 * in all; a cut body errors with McpAnswerTooLarge and names the JSON-RPC ids of the request it answered.
 */
const LIMITS: McpReadLimits = { maxMessageBytes: 1_000, maxStreamBytes: 10_000, requestTimeoutMs: 5_000, streamTimeoutMs: 5_000 };
const bodies: Record<string, { type: string; text: string }> = {};
let server: Server;
let base: string;

beforeAll(async () => {
  process.env.ALLOW_LOOPBACK_URLS = '1';
  resetInstanceState();
  server = createServer((req, res) => {
    const body = bodies[req.url ?? ''];
    if (!body) return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': body.type }).end(body.text);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});
afterAll(async () => {
  server.closeAllConnections();
  await new Promise((resolve) => server.close(resolve));
  delete process.env.ALLOW_LOOPBACK_URLS;
  resetInstanceState();
});

/** An event whose data line makes it exactly `bytes` long, line end excluded. */
const event = (bytes: number) => `data: ${'x'.repeat(bytes - 6)}`;

async function read(path: string, body?: string): Promise<{ text?: string; error?: unknown; told: Array<{ limit: number; ids: Array<string | number> }> }> {
  const told: Array<{ limit: number; ids: Array<string | number> }> = [];
  const fetch = cappedMcpFetch(LIMITS, (err, ids) => told.push({ limit: err.limit, ids }));
  const res = await fetch(`${base}${path}`, body === undefined ? {} : { method: 'POST', body });
  try {
    return { text: await res.text(), told };
  } catch (error) {
    return { error, told };
  }
}

describe('event streams', () => {
  it.each([
    ['LF', '\n'],
    ['CR', '\r'],
    ['CRLF', '\r\n'],
  ])('events of exactly the limit, ended by blank lines (%s), pass whole', async (label, eol) => {
    const text = Array.from({ length: 8 }, () => `${event(LIMITS.maxMessageBytes)}${eol}${eol}`).join('');
    bodies[`/ok-${label}`] = { type: 'text/event-stream', text };
    expect(await read(`/ok-${label}`)).toEqual({ text, told: [] });
  });

  it('one byte more in one event cuts the stream, naming the request it answered', async () => {
    bodies['/event'] = { type: 'text/event-stream', text: `${event(10)}\n\n${event(LIMITS.maxMessageBytes + 1)}\n\n` };
    const out = await read('/event', JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: {} }));
    expect(out.error).toBeInstanceOf(McpAnswerTooLarge);
    expect((out.error as Error).message).toBe('the server sent a message larger than 1000 bytes, the most the gateway reads of one MCP message');
    expect(out.told).toEqual([{ limit: LIMITS.maxMessageBytes, ids: [7] }]);
  });

  it('a line end alone does not end an event: two lines of one event count together', async () => {
    bodies['/lines'] = { type: 'text/event-stream', text: `${event(600)}\r\n${event(600)}\r\n\r\n` };
    const out = await read('/lines');
    expect(out.error).toBeInstanceOf(McpAnswerTooLarge);
    expect(out.told).toEqual([{ limit: LIMITS.maxMessageBytes, ids: [] }]);
  });

  it('small events past the stream limit cut it', async () => {
    bodies['/many'] = { type: 'text/event-stream', text: `${event(500)}\n\n`.repeat(21) };
    const out = await read('/many');
    expect((out.error as Error).message).toBe("the server's event stream passed 10000 bytes, the most the gateway reads of one stream");
    expect(out.told).toEqual([{ limit: LIMITS.maxStreamBytes, ids: [] }]);
  });
});

describe('other bodies', () => {
  it('a JSON body of the limit passes; one byte more is cut', async () => {
    bodies['/json-ok'] = { type: 'application/json', text: `"${'j'.repeat(LIMITS.maxMessageBytes - 2)}"` };
    expect(await read('/json-ok')).toEqual({ text: bodies['/json-ok'].text, told: [] });
    bodies['/json-big'] = { type: 'application/json', text: `"${'j'.repeat(LIMITS.maxMessageBytes - 1)}"` };
    const out = await read(
      '/json-big',
      JSON.stringify([
        { jsonrpc: '2.0', id: 'a', method: 'tools/list' },
        { jsonrpc: '2.0', method: 'notifications/x' },
      ]),
    );
    expect(out.error).toBeInstanceOf(McpAnswerTooLarge);
    expect(out.told).toEqual([{ limit: LIMITS.maxMessageBytes, ids: ['a'] }]);
  });
});
