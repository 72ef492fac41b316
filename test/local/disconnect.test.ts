/**
 * Clients that go away at every phase of a request, against the real `npm start` process (`npm start`'s command,
 * with its own DATA_DIR, port and DynamoDB Local). It runs as a separate process on purpose: the local runtime's
 * `awslambda` stream shim once crashed the whole gateway on 'Client disconnected', which an in-process gateway would
 * turn into a failure of the test runner instead of a dead server.
 *
 * After each disconnect: the process is still alive, GET /health answers 200, the reservation is released
 * (GET /usage: ai.reserved back to 0) and the charge is what was produced, computed from the simulated upstream's
 * token rules (bin/local/upstreams/script.ts) at claude-sonnet-4-6's price ($3 / $15 per Mtok = 3 / 15 µ$ a token):
 *
 *   before the headers  0, or the input (message_start reports input and 1 output token), never the full answer
 *   mid-stream          at least input + what the client saw, less than the full answer
 *   after the last byte exactly the full answer
 *   during the upload   nothing (no request was ever made)
 *
 * At the end the gateway process is sent SIGINT and nothing of its process group (java) may be left.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { estimateInputTokens, makeWords, wordChunks } from '../../bin/local/upstreams/script.ts';
import { estimateInputTokens as inputBound } from '../../lambdas/metering/estimate.ts';
import { anthropicRequest } from '../../lambdas/openai-ingress/request.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { startGatewayProcess, type GatewayProcess } from '../support/gateway-process.ts';
import { RawConn } from '../support/raw-conn.ts';

const INPUT_RATE = 3; // µ$ per input token, claude-sonnet-4-6
const OUTPUT_RATE = 15; // µ$ per output token

const dataDirs: string[] = [];
let gw: GatewayProcess | undefined;
/** Every process this file started, so a crash mid-file still ends with a clean-up of each. */
const started: GatewayProcess[] = [];
const crashes: string[] = [];

async function ensureGateway(): Promise<GatewayProcess> {
  if (gw?.alive()) return gw;
  if (gw) {
    // The previous scenario killed it: record why, clear its leftovers (java), and start afresh on a new DATA_DIR,
    // so the holds the dead process left (rightly kept until they expire) do not decide the next scenario's verdict.
    crashes.push(gw.output().slice(-2000));
    await gw.stop();
  }
  const dataDir = mkdtempSync(join(tmpdir(), 'gw-disconnect-'));
  dataDirs.push(dataDir);
  gw = await startGatewayProcess(dataDir);
  started.push(gw);
  return gw;
}

beforeAll(async () => {
  await ensureGateway();
}, 150_000);

afterAll(async () => {
  for (const p of started) await p.stop();
  for (const d of dataDirs) rmSync(d, { recursive: true, force: true });
}, 60_000);

beforeEach(async () => {
  await ensureGateway();
}, 150_000);

interface UsageReport {
  ai: { used: number; reserved: number };
}

async function usage(g: GatewayProcess): Promise<UsageReport> {
  const res = await fetch(`${g.url}/usage`, { headers: { authorization: `Bearer ${g.token}` }, signal: AbortSignal.timeout(5000) });
  expect(res.status).toBe(200);
  return (await res.json()) as UsageReport;
}

/** The checks every scenario ends with; returns the charge the disconnected request caused. */
async function afterDisconnect(g: GatewayProcess, usedBefore: number, settleWithinMs = 12_000): Promise<number> {
  await sleep(300);
  expect(g.alive(), `the gateway process died after the client disconnected:\n${g.output().slice(-3000)}`).toBe(true);
  const health = await fetch(`${g.url}/health`, { signal: AbortSignal.timeout(5000) });
  expect(health.status).toBe(200);
  // "After a moment": the reservation must be settled without anyone reading /usage first.
  const deadline = Date.now() + settleWithinMs;
  let report = await usage(g);
  while (report.ai.reserved !== 0 && Date.now() < deadline) {
    await sleep(200);
    report = await usage(g);
  }
  expect(report.ai.reserved, `a hold is still reserved ${settleWithinMs} ms after the disconnect`).toBe(0);
  expect(g.alive(), `the gateway process died:\n${g.output().slice(-3000)}`).toBe(true);
  return report.ai.used - usedBefore;
}

/** A request written by hand: the test decides when each byte goes out and when the socket dies. */
function requestHead(g: GatewayProcess, body: string, contentLength = Buffer.byteLength(body), path = '/v1/messages'): string {
  const host = new URL(g.url).host;
  return (
    `POST ${path} HTTP/1.1\r\nHost: ${host}\r\nx-api-key: ${g.token}\r\nanthropic-version: 2023-06-01\r\n` +
    `content-type: application/json\r\ncontent-length: ${contentLength}\r\n\r\n`
  );
}

const messages = (text: string, extra: Record<string, unknown> = {}) => ({
  model: 'claude-sonnet-4-6',
  max_tokens: 400,
  messages: [{ role: 'user', content: text }],
  ...extra,
});

const count = (text: string, event: string) => text.split(`event: ${event}\n`).length - 1;

describe('a client that disconnects', () => {
  it('before the headers (the upstream is still thinking), streaming: charged the input the provider reports', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    // (events 200 ms apart, so reading on to message_start does not also see the rest of the answer)
    const body = messages('[[latency:2000]] [[delay:200]] [[words:5]]', { stream: true });
    const conn = await RawConn.open(g.url);
    await conn.write(requestHead(g, JSON.stringify(body)) + JSON.stringify(body));
    await sleep(500);
    expect(conn.received, 'nothing should have been answered yet').toBe(0);
    conn.destroy();
    const input = estimateInputTokens(body) * INPUT_RATE;
    const charge = await afterDisconnect(g, before);
    // The provider bills the prompt even though nobody reads the answer: the gateway reads on to message_start
    // (input, and output_tokens: 1) and stops the stream there — not 0, not the gateway's (larger) input bound.
    expect(charge, `charge ${charge} µ$ (full answer would be ${input + 5 * OUTPUT_RATE})`).toBe(input + OUTPUT_RATE);
  });

  it('before the headers, not streaming: the answer the provider completed is charged in full', async () => {
    // The provider finishes and bills a non-streamed answer whoever reads it; the gateway waits for it and charges
    // it, so a client cannot make the operator pay by hanging up just before the answer.
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const body = messages('[[latency:2000]] [[words:5]]');
    const conn = await RawConn.open(g.url);
    await conn.write(requestHead(g, JSON.stringify(body)) + JSON.stringify(body));
    await sleep(500);
    expect(conn.received).toBe(0);
    conn.destroy();
    const input = estimateInputTokens(body) * INPUT_RATE;
    const charge = await afterDisconnect(g, before);
    expect(charge, `charge ${charge} µ$`).toBe(input + 5 * OUTPUT_RATE);
  });

  it('mid-stream: charged at least the input and what it received, less than the full answer', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const words = 200;
    const body = messages(`[[delay:50]] [[words:${words}]]`, { stream: true });
    const conn = await RawConn.open(g.url);
    await conn.write(requestHead(g, JSON.stringify(body)) + JSON.stringify(body));
    const seen = 3;
    await conn.waitFor(`${seen} content_block_delta events`, () => count(conn.body, 'content_block_delta') >= seen);
    expect(conn.status).toBe(200);
    const deltasSeen = count(conn.body, 'content_block_delta');
    conn.destroy();
    const input = estimateInputTokens(body) * INPUT_RATE;
    const full = input + words * OUTPUT_RATE;
    // docs/contract.md, Streams: output = max(reported, deltas, characters ÷ 4) over what the gateway received,
    // which is at least what reached the client.
    const chars = wordChunks(makeWords(words)).slice(0, deltasSeen).join('').length;
    const atLeast = input + Math.max(deltasSeen, Math.ceil(chars / 4)) * OUTPUT_RATE;
    const charge = await afterDisconnect(g, before);
    expect(charge, `charge ${charge} µ$; input ${input}, full ${full}`).toBeGreaterThanOrEqual(atLeast);
    expect(charge, `charge ${charge} µ$: the gateway read the stream to its end after the client left`).toBeLessThan(full);
    expect((charge - input) % OUTPUT_RATE, `charge ${charge} µ$ is not input + whole output tokens`).toBe(0);
  });

  it('right after the last byte of a stream: charged exactly the full answer', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const words = 20;
    const body = messages(`[[words:${words}]]`, { stream: true });
    const conn = await RawConn.open(g.url);
    await conn.write(requestHead(g, JSON.stringify(body)) + JSON.stringify(body));
    await conn.waitFor('message_stop', () => /event: message_stop\ndata: [^\n]*\n\n/.test(conn.body));
    conn.destroy(); // before the terminating chunk is read
    const charge = await afterDisconnect(g, before);
    expect(charge).toBe(estimateInputTokens(body) * INPUT_RATE + words * OUTPUT_RATE);
  });

  it('right after the last byte of a JSON answer: charged exactly the full answer', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const body = messages('[[words:7]]');
    const conn = await RawConn.open(g.url);
    await conn.write(requestHead(g, JSON.stringify(body)) + JSON.stringify(body));
    await conn.waitFor('the whole JSON answer', () => {
      try {
        return (JSON.parse(conn.body) as { type?: string }).type === 'message';
      } catch {
        return false;
      }
    });
    conn.destroy();
    const charge = await afterDisconnect(g, before);
    expect(charge).toBe(estimateInputTokens(body) * INPUT_RATE + 7 * OUTPUT_RATE);
  });

  it('during the body upload (half the body sent): nothing charged', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const text = JSON.stringify(messages(`[[words:5]] ${'x'.repeat(200_000)}`));
    const conn = await RawConn.open(g.url);
    await conn.write(requestHead(g, text) + text.slice(0, text.length / 2));
    await sleep(200);
    conn.destroy();
    expect(await afterDisconnect(g, before, 3000)).toBe(0);
  });

  it('after the headers only, and right after connecting: nothing charged', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const text = JSON.stringify(messages('[[words:5]]'));
    const headersOnly = await RawConn.open(g.url);
    await headersOnly.write(requestHead(g, text));
    await sleep(200);
    headersOnly.destroy();
    const bare = await RawConn.open(g.url);
    bare.destroy();
    expect(await afterDisconnect(g, before, 3000)).toBe(0);
  });

  it('many at once, at random phases: the gateway survives and holds nothing', async () => {
    // Twenty clients mid-stream and before headers at the same time, all dropped together.
    const g = await ensureGateway();
    const conns = await Promise.all(
      Array.from({ length: 20 }, async (_, i) => {
        const body = messages(i % 2 ? '[[delay:30]] [[words:100]]' : '[[latency:1500]] [[words:3]]', { stream: true });
        const conn = await RawConn.open(g.url);
        await conn.write(requestHead(g, JSON.stringify(body)) + JSON.stringify(body));
        return conn;
      }),
    );
    await sleep(400);
    for (const c of conns) c.destroy();
    await afterDisconnect(g, 0);
  });
});

describe('a client of POST /v1/chat/completions that disconnects (the OpenAI-compatible route)', () => {
  const chat = (text: string, extra: Record<string, unknown> = {}) => ({
    model: 'claude-sonnet-4-6',
    max_tokens: 400,
    messages: [{ role: 'user', content: text }],
    ...extra,
  });
  /** The simulated upstream's input count of what the route sends it (the request translated to Anthropic's format). */
  const inputOf = (body: Record<string, unknown>) => estimateInputTokens(anthropicRequest(body).body) * INPUT_RATE;
  const send = async (g: GatewayProcess, body: Record<string, unknown>) => {
    const conn = await RawConn.open(g.url);
    const text = JSON.stringify(body);
    await conn.write(requestHead(g, text, Buffer.byteLength(text), '/v1/chat/completions') + text);
    return conn;
  };

  it('before the headers, not streaming: the answer the provider completed is charged in full', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const body = chat('[[latency:2000]] [[words:5]]');
    const conn = await send(g, body);
    await sleep(500);
    expect(conn.received).toBe(0);
    conn.destroy();
    expect(await afterDisconnect(g, before)).toBe(inputOf(body) + 5 * OUTPUT_RATE);
  });

  it('mid-stream: charged the input and at least what it received, less than the full answer; nothing left held', async () => {
    const g = await ensureGateway();
    const before = (await usage(g)).ai.used;
    const words = 200;
    const body = chat(`[[delay:50]] [[words:${words}]]`, { stream: true });
    const conn = await send(g, body);
    const chunks = () => conn.body.split('"delta":{"content":').length - 1;
    await conn.waitFor('3 content chunks', () => chunks() >= 3);
    expect(conn.status).toBe(200);
    const seen = chunks();
    conn.destroy();
    const input = inputOf(body);
    const charge = await afterDisconnect(g, before);
    expect(charge, `charge ${charge} µ$`).toBeGreaterThanOrEqual(input + seen * OUTPUT_RATE);
    expect(charge, `charge ${charge} µ$: the gateway read the stream to its end after the client left`).toBeLessThan(input + words * OUTPUT_RATE);
  });
});

describe('a client of a passed-through stream (gpt-4o on POST /v1/chat/completions) that disconnects', () => {
  // The development project holds a placeholder OpenAI key while the upstreams are simulated (bin/local/seed.ts), and
  // gpt-4o has the catalog's price. The simulated upstream counts its prompt from the body as sent (the client's
  // messages: passthrough changes none of them) and one output token per word of each choice.
  const pricing = priceFor('gpt-4o', 'openai')!;
  const µ$ = (input: number, output: number) => charge(pricing, { input_tokens: input, output_tokens: output }).microdollars;
  const gpt = (text: string, includeUsage: boolean, extra: Record<string, unknown> = {}) => ({
    model: 'gpt-4o',
    max_completion_tokens: 400,
    stream: true,
    ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
    messages: [{ role: 'user', content: text }],
    ...extra,
  });
  const send = async (g: GatewayProcess, body: Record<string, unknown>) => {
    const conn = await RawConn.open(g.url);
    const text = JSON.stringify(body);
    await conn.write(requestHead(g, text, Buffer.byteLength(text), '/v1/chat/completions') + text);
    return conn;
  };
  /**
   * The output tokens of a charge made of the prompt at the gateway's input bound (lambdas/metering/estimate.ts) and
   * whole output tokens, at most `max` — or undefined when the charge is not of that form. OpenAI reports the prompt
   * only in a stream's last chunk: a stream cut short is charged its input bound and what was produced (docs/openai.md,
   * "Metering"), which for a short prompt is more than the prompt the provider counts.
   */
  const outputAtBound = (charge: number, body: Record<string, unknown>, max: number) =>
    Array.from({ length: max + 1 }, (_, k) => k).find((k) => µ$(inputBound(body), k) === charge);
  const contentChunks = (conn: RawConn) => conn.body.split('"delta":{"content":"word').length - 1;

  for (const includeUsage of [false, true]) {
    const asked = includeUsage ? 'with include_usage' : 'without include_usage';

    it(`before the headers (the upstream is still thinking), ${asked}: the prompt at its bound and what was produced, not the whole answer; nothing held`, async () => {
      const g = await ensureGateway();
      const before = (await usage(g)).ai.used;
      const words = 5;
      // (chunks 200 ms apart, so reading on to the first chunk does not also read the rest of the answer)
      const body = gpt(`[[latency:2000]] [[delay:200]] [[words:${words}]]`, includeUsage);
      const conn = await send(g, body);
      await sleep(500);
      expect(conn.received, 'nothing should have been answered yet').toBe(0);
      conn.destroy();
      const charge = await afterDisconnect(g, before);
      const produced = outputAtBound(charge, body, words);
      expect(produced, `charge ${charge} µ$ is not the input bound (${inputBound(body)} tokens) and whole output tokens`).toBeDefined();
      expect(produced!, `charge ${charge} µ$: the gateway read the stream to its end after the client left`).toBeLessThan(words);
    });

    it(`mid-stream, ${asked}: the prompt at its bound and at least what it received, less than the whole answer; nothing held`, async () => {
      const g = await ensureGateway();
      const before = (await usage(g)).ai.used;
      const words = 200;
      const body = gpt(`[[delay:50]] [[words:${words}]]`, includeUsage);
      const conn = await send(g, body);
      await conn.waitFor('3 content chunks', () => contentChunks(conn) >= 3);
      expect(conn.status).toBe(200);
      const seen = contentChunks(conn);
      conn.destroy();
      const charge = await afterDisconnect(g, before);
      const produced = outputAtBound(charge, body, words);
      expect(produced, `charge ${charge} µ$ is not the input bound (${inputBound(body)} tokens) and whole output tokens`).toBeDefined();
      expect(produced!, `charge ${charge} µ$: less than the ${seen} words the client received`).toBeGreaterThanOrEqual(seen);
      expect(produced!, `charge ${charge} µ$: the gateway read the stream to its end after the client left`).toBeLessThan(words);
    });

    it(`right after [DONE], ${asked}: charged exactly the full answer (the usage the upstream reported)`, async () => {
      const g = await ensureGateway();
      const before = (await usage(g)).ai.used;
      const words = 20;
      const body = gpt(`[[words:${words}]]`, includeUsage);
      const conn = await send(g, body);
      await conn.waitFor('data: [DONE]', () => conn.body.includes('data: [DONE]'));
      conn.destroy();
      expect(await afterDisconnect(g, before)).toBe(µ$(estimateInputTokens(body), words));
    });
  }

  it('many at once, at random phases, with and without include_usage: the gateway survives and holds nothing', async () => {
    const g = await ensureGateway();
    const conns = await Promise.all(
      Array.from({ length: 20 }, (_, i) => send(g, gpt(i % 2 ? '[[delay:30]] [[words:100]]' : '[[latency:1500]] [[words:3]]', i % 4 < 2))),
    );
    await sleep(400);
    for (const c of conns) c.destroy();
    await afterDisconnect(g, 0);
  });
});

describe('stopping', () => {
  it('SIGINT stops the gateway and leaves no process of its group (no java) behind; no crash happened before', async () => {
    const g = await ensureGateway();
    const { leftovers } = await g.stop();
    expect(leftovers, 'processes left in the gateway’s process group after SIGINT').toEqual([]);
    // bin/local.ts stops DynamoDB Local, the queues and the server, then says so.
    expect(g.output()).toMatch(/SIGINT: stopping…\s+Stopped\./);
    expect(crashes, 'gateway processes that died during the file').toEqual([]);
  }, 60_000);
});
