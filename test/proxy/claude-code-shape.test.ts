import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import type Anthropic from '@anthropic-ai/sdk';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { buildReplyPlan, lastUserTextAnthropic, lastUserTextOpenAI, parseDirectives } from '../../bin/local/upstreams/script.ts';
import { charge, priceFor, type PriceProvider, type TokenUsage } from '../../lambdas/pricing/prices.ts';
import type { CapturedRequest } from '../clients/claude-code-harness.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * Claude Code's real request shape, replayed through the proxy with the real Anthropic SDK (beta messages, the way
 * Claude Code calls it: `/v1/messages?beta=true`, its beta flags, its extra headers): a dozen tools with input
 * schemas, adaptive thinking, effort, context management, a system prompt of cached text blocks, a metadata user id
 * and a `role:"system"` message in the conversation. The bodies are the ones Claude Code 2.1.330 sent, captured by
 * test/clients/claude-code.test.ts (test/clients/fixtures/claude-code-requests.json).
 */

interface Fixture {
  claudeCodeVersion: string;
  requests: CapturedRequest[];
}

const fixture = JSON.parse(readFileSync(new URL('../clients/fixtures/claude-code-requests.json', import.meta.url), 'utf8')) as Fixture;
const captured = (run: string) => {
  const found = fixture.requests.find((r) => r.run === run);
  if (!found) throw new Error(`fixture has no capture of "${run}"`);
  return found;
};
const CLAUDE = captured('claude -p hi');
const GPT = captured('claude -p hi --model gpt-4.1');

type Body = Record<string, unknown> & {
  model: string;
  messages: { role: string; content: string | { type: string; text: string }[] }[];
  system: { type: string; text: string }[];
  tools: { name: string; defer_loading?: boolean }[];
  metadata: { user_id: string };
};

/**
 * The capture as sent, or continued by one more exchange so that Claude Code's system message sits in the middle of
 * the conversation (as it does from the second turn on).
 */
function bodyOf(c: CapturedRequest, shape: 'as captured' | 'continued', stream: boolean): Body {
  const body = structuredClone(c.body) as Body;
  if (shape === 'continued') {
    body.messages.push(
      { role: 'assistant', content: [{ type: 'text', text: 'Hello! What shall we work on?' }] },
      { role: 'user', content: [{ type: 'text', text: 'Show me the plan.' }] },
    );
  }
  body.stream = stream;
  return body;
}

/** The headers Claude Code sends besides the credential and the beta flags (the SDK sets those from `betas`). */
function extraHeaders(c: CapturedRequest): Record<string, string> {
  const { 'anthropic-beta': _betas, ...rest } = c.headers;
  return rest;
}

const betasOf = (c: CapturedRequest) => c.headers['anthropic-beta']!.split(',');

let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
});
afterAll(() => gw?.stop());
beforeEach(() => {
  gw.upstreams.anthropic!.requests.length = 0;
  gw.upstreams.openai!.requests.length = 0;
});

async function aiUsed(token: string): Promise<number> {
  const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  const { ai } = (await res.json()) as { ai: { used: number; reserved: number } };
  expect(ai.reserved).toBe(0);
  return ai.used;
}

let users = 0;

/**
 * Sends the body with the SDK's beta messages API, streamed or not, and returns the final message, the HTTP status
 * and what the user was charged (from /usage, the same for both).
 */
async function send(body: Body, c: CapturedRequest, betas: string[]) {
  const token = await gw.token({ user: `replay-${++users}` });
  const client = gw.client(token);
  const params = { ...body, betas } as unknown as Anthropic.Beta.MessageCreateParams;
  let message: Anthropic.Beta.BetaMessage;
  let response: Response;
  if (body.stream) {
    const stream = client.beta.messages.stream(params as Anthropic.Beta.MessageCreateParamsStreaming, { headers: extraHeaders(c) });
    response = (await stream.withResponse()).response;
    message = await stream.finalMessage();
  } else {
    // An explicit timeout, as Claude Code's own non-streaming fallback gives: without one the SDK refuses a
    // non-streamed request whose max_tokens (128,000 here) could take longer than ten minutes.
    const result = await client.beta.messages
      .create(params as Anthropic.Beta.MessageCreateParamsNonStreaming, { headers: extraHeaders(c), timeout: 600_000 })
      .withResponse();
    response = result.response;
    message = result.data;
  }
  return { message, status: response.status, costHeader: response.headers.get('x-gateway-cost-microdollars'), used: await aiUsed(token) };
}

const tokensOf = (m: Anthropic.Beta.BetaMessage): TokenUsage => ({
  input_tokens: m.usage.input_tokens,
  output_tokens: m.usage.output_tokens,
  cache_read_input_tokens: m.usage.cache_read_input_tokens,
  cache_creation_input_tokens: m.usage.cache_creation_input_tokens,
});

function expectCharged(result: Awaited<ReturnType<typeof send>>, stream: boolean, model: string, provider: PriceProvider) {
  const expected = charge(priceFor(model, provider)!, tokensOf(result.message)).microdollars;
  expect(expected).toBeGreaterThan(0);
  expect(result.used).toBe(expected);
  // Streamed answers cannot carry the cost header (it is sent before the usage is known).
  expect(result.costHeader).toBe(stream ? null : String(expected));
}

const CASES = [
  { shape: 'as captured', stream: true },
  { shape: 'as captured', stream: false },
  { shape: 'continued', stream: true },
  { shape: 'continued', stream: false },
] as const;

describe(`Claude Code ${fixture.claudeCodeVersion} request shape → Claude model (passed through)`, () => {
  it('the capture is a real Claude Code request with a mid-conversation system message', () => {
    expect(fixture.claudeCodeVersion).toBe('2.1.330');
    expect(CLAUDE.url).toBe('/v1/messages?beta=true');
    const body = CLAUDE.body as Body;
    expect(body.model).toBe('claude-opus-5-5');
    expect(body.messages.map((m) => m.role)).toEqual(['user', 'system']);
    expect(body.tools).toHaveLength(12);
    expect(Object.keys(body)).toEqual([
      'model',
      'messages',
      'system',
      'tools',
      'metadata',
      'max_tokens',
      'thinking',
      'context_management',
      'output_config',
      'stream',
    ]);
    expect([body.thinking, body.context_management, body.output_config]).toEqual([
      { type: 'adaptive', display: 'omitted' },
      { edits: [{ type: 'clear_thinking_20251015', keep: 'all' }] },
      { effort: 'medium' },
    ]);
  });

  it.each(CASES)('$shape, stream=$stream: 200, the body reaches Anthropic unchanged, betas forwarded, charged usage × price', async ({ shape, stream }) => {
    const body = bodyOf(CLAUDE, shape, stream);
    const result = await send(body, CLAUDE, betasOf(CLAUDE));
    expect(result.status).toBe(200);

    const [record, ...more] = gw.upstreams.anthropic!.requests;
    expect(more).toHaveLength(0);
    expect(record!.path).toBe('/v1/messages');
    // Byte for byte: the SDK's serialisation of the body (what the gateway received) arrives with the same length
    // and the same content; `betas` went into the header, not the body.
    expect(record!.body).toEqual(body);
    expect(Number(record!.headers['content-length'])).toBe(Buffer.byteLength(JSON.stringify(body)));
    expect(record!.headers['anthropic-beta']).toBe(CLAUDE.headers['anthropic-beta']);
    expect(record!.headers['anthropic-version']).toBe('2023-06-01');
    expect(record!.headers['x-api-key']).toBe('sk-ant-simulated');

    const expectedText = buildReplyPlan(parseDirectives(lastUserTextAnthropic(body)), body.max_tokens as number).text;
    expect(expectedText).toBe(
      shape === 'continued'
        ? 'Echo: Show me the plan.'
        : `Echo: ${(body.messages[0]!.content as { text: string }[])
            .map((b) => b.text)
            .join('\n')
            .trim()}`,
    );
    expect(result.message.content).toEqual([{ type: 'text', text: expectedText }]);
    expect(result.message.model).toBe('claude-opus-5-5');
    expectCharged(result, stream, 'claude-opus-5-5', 'anthropic');
  });

  it('forwards the mid-conversation-system-2026-04-07 beta that Claude Code sent before the feature became generally available', async () => {
    // 2.1.330 no longer sends it ("generally available; the header is not sent"); older versions still in use do.
    const betas = [...betasOf(CLAUDE), 'mid-conversation-system-2026-04-07'];
    const result = await send(bodyOf(CLAUDE, 'as captured', true), CLAUDE, betas);
    expect(result.status).toBe(200);
    expect(gw.upstreams.anthropic!.requests[0]!.headers['anthropic-beta']).toBe(
      'claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24,mid-conversation-system-2026-04-07',
    );
  });
});

describe(`Claude Code ${fixture.claudeCodeVersion} request shape → GPT model (translated)`, () => {
  const joined = (content: string | { text: string }[]) => (typeof content === 'string' ? content : content.map((b) => b.text).join('\n\n'));

  it.each(CASES)('$shape, stream=$stream: 200, the system message at its position in the OpenAI request, charged usage × price', async ({ shape, stream }) => {
    const body = bodyOf(GPT, shape, stream);
    expect(body.model).toBe('gpt-4.1');
    const result = await send(body, GPT, betasOf(GPT));
    expect(result.status).toBe(200);
    expect(gw.upstreams.anthropic!.requests).toHaveLength(0);

    const [record, ...more] = gw.upstreams.openai!.requests;
    expect(more).toHaveLength(0);
    expect(record!.path).toBe('/v1/chat/completions');
    const chat = record!.body as Record<string, unknown> & { messages: unknown[]; tools: { function: { name: string } }[] };
    const [user, system] = body.messages;
    const expectedMessages: unknown[] = [
      { role: 'system', content: joined(body.system) },
      { role: 'user', content: (user!.content as { text: string }[]).map((b) => ({ type: 'text', text: b.text })) },
      { role: 'system', content: joined(system!.content) },
    ];
    if (shape === 'continued') {
      expectedMessages.push({ role: 'assistant', content: 'Hello! What shall we work on?' }, { role: 'user', content: 'Show me the plan.' });
    }
    expect(chat.messages).toEqual(expectedMessages);
    // Tools: every one but the deferred placeholder (deferred tools wait for a tool search to load them).
    expect(chat.tools.map((t) => t.function.name)).toEqual(body.tools.filter((t) => t.defer_loading !== true).map((t) => t.name));
    expect(chat.tools.map((t) => t.function.name)).not.toContain('DeferredToolPlaceholder');
    const { messages: _m, tools: _t, ...rest } = chat;
    expect(rest).toEqual({
      model: 'gpt-4.1',
      user: createHash('sha256').update(body.metadata.user_id).digest('hex'),
      max_tokens: 32_000,
      stream,
      ...(stream ? { stream_options: { include_usage: true } } : {}),
    });

    const expectedText = buildReplyPlan(parseDirectives(lastUserTextOpenAI(chat)), 32_000).text;
    expect(expectedText).toBe(
      shape === 'continued'
        ? 'Echo: Show me the plan.'
        : `Echo: ${(user!.content as { text: string }[])
            .map((b) => b.text)
            .join('\n')
            .trim()}`,
    );
    expect(result.message.content).toEqual([{ type: 'text', text: expectedText }]);
    expect(result.message.model).toBe('gpt-4.1');
    expectCharged(result, stream, 'gpt-4.1', 'openai');
  });
});
