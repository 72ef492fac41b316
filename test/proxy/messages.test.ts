import Anthropic, { type APIError } from '@anthropic-ai/sdk';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { estimateInputTokens, EMPTY_ECHO_TEXT, THINKING_SIGNATURE, THINKING_TEXT } from '../../bin/local/upstreams/script.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/** claude-sonnet-4-6 in the bundled catalog: $3 in, $15 out, $0.30 cache read, $3.75 cache write per Mtok. */
const sonnet = (u: { input_tokens: number; output_tokens: number; cache_read_input_tokens?: number | null; cache_creation_input_tokens?: number | null }) =>
  Math.ceil(
    (u.input_tokens * 3_000_000 +
      u.output_tokens * 15_000_000 +
      (u.cache_read_input_tokens ?? 0) * 300_000 +
      (u.cache_creation_input_tokens ?? 0) * 3_750_000) /
      1_000_000,
  );

let gw: TestGateway;

/** The ledger once every invocation under way has returned: an answer is delivered before its settlement is written. */
async function settledUsage(...args: Parameters<typeof readUsage>): ReturnType<typeof readUsage> {
  await gw.invocationsDone();
  return readUsage(...args);
}
let token: string;
let client: Anthropic;

beforeAll(async () => {
  gw = await startTestGateway();
  token = await gw.token({ user: 'alice' });
  client = gw.client(token);
});
afterAll(() => gw?.stop());

const lastUpstream = () => gw.upstreams.anthropic!.requests.at(-1)!;

describe('POST /v1/messages (Anthropic path)', () => {
  it('answers messages.create and charges usage × price, reporting cost and remaining budget', async () => {
    const before = await settledUsage({ projectId: gw.projectId, userId: 'alice', budget: { ai: 10_000_000, compute: 3600, window: 'day' } });
    const { data, response, request_id } = await client.messages
      .create({ model: 'claude-sonnet-4-6', max_tokens: 100, messages: [{ role: 'user', content: 'Hello there' }] })
      .withResponse();
    expect(data.content).toEqual([{ type: 'text', text: 'Echo: Hello there' }]);
    expect(data.stop_reason).toBe('end_turn');
    expect(data.usage.output_tokens).toBe(3);
    const cost = sonnet(data.usage);
    expect(Number(response.headers.get('x-gateway-cost-microdollars'))).toBe(cost);
    expect(request_id).toMatch(/^req_gw_[0-9a-f]{24}$/);
    const after = await settledUsage({ projectId: gw.projectId, userId: 'alice', budget: { ai: 10_000_000, compute: 3600, window: 'day' } });
    expect(after.used.ai - before.used.ai).toBe(cost);
    expect(after.reserved.ai).toBe(0);
    expect(Number(response.headers.get('x-gateway-budget-remaining-microdollars'))).toBe(10_000_000 - after.used.ai);
  });

  it('passes the body through unchanged and forwards version and beta headers, never the user token', async () => {
    const body = {
      model: 'claude-sonnet-4-6',
      max_tokens: 50,
      system: [{ type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } }],
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi [[cache:read=7,write=3]]' }] }],
      temperature: 0.2,
      top_k: 5,
      metadata: { user_id: 'u-42' },
      tools: [{ name: 'lookup', description: 'Looks up', input_schema: { type: 'object', properties: { q: { type: 'string' } } } }],
      some_future_field: { nested: [1, 2, 3] },
    };
    const res = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: {
        'x-api-key': token,
        'anthropic-version': '2023-06-01',
        'anthropic-beta': 'prompt-caching-2024-07-31,foo-2025',
        'content-type': 'application/json',
      },
      body: JSON.stringify(body),
    });
    expect(res.status).toBe(200);
    const msg = (await res.json()) as Anthropic.Message;
    const up = lastUpstream();
    expect(up.body).toEqual(body);
    expect(up.headers['anthropic-version']).toBe('2023-06-01');
    expect(up.headers['anthropic-beta']).toBe('prompt-caching-2024-07-31,foo-2025');
    expect(up.headers['x-api-key']).toBe('sk-ant-simulated');
    expect(up.headers.authorization).toBeUndefined();
    expect(msg.usage.cache_read_input_tokens).toBe(7);
    expect(msg.usage.cache_creation_input_tokens).toBe(3);
    expect(Number(res.headers.get('x-gateway-cost-microdollars'))).toBe(sonnet(msg.usage));
  });

  it('accepts the token as x-api-key or Authorization: Bearer', async () => {
    for (const headers of [{ 'x-api-key': token }, { authorization: `Bearer ${token}` }] as Record<string, string>[]) {
      const res = await fetch(`${gw.url}/v1/messages`, {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }),
      });
      expect(res.status).toBe(200);
    }
  });

  it('streams text events and finalMessage equals the non-streamed answer', async () => {
    const params = { model: 'claude-sonnet-4-6', max_tokens: 100, messages: [{ role: 'user' as const, content: '[[words:6]]' }] };
    const texts: string[] = [];
    const stream = client.messages.stream(params).on('text', (t) => texts.push(t));
    const streamed = await stream.finalMessage();
    const plain = await client.messages.create(params);
    expect(texts).toEqual(['word1 ', 'word2 ', 'word3 ', 'word4 ', 'word5 ', 'word6']);
    expect(streamed.content).toEqual(plain.content);
    expect(streamed.usage).toEqual(plain.usage);
    expect(streamed.stop_reason).toBe('end_turn');
  });

  it('round-trips a tool call in a stream', async () => {
    const tools: Anthropic.Tool[] = [
      { name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
    ];
    const first = await client.messages
      .stream({ model: 'claude-sonnet-4-6', max_tokens: 200, tools, messages: [{ role: 'user', content: 'Weather? [[tool:get_weather {"city":"Paris"}]]' }] })
      .finalMessage();
    expect(first.stop_reason).toBe('tool_use');
    const call = first.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use')!;
    expect(call.name).toBe('get_weather');
    expect(call.input).toEqual({ city: 'Paris' });
    const second = await client.messages
      .stream({
        model: 'claude-sonnet-4-6',
        max_tokens: 200,
        tools,
        messages: [
          { role: 'user', content: 'Weather? [[tool:get_weather {"city":"Paris"}]]' },
          { role: 'assistant', content: first.content },
          { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'Sunny, 21°C' }] },
        ],
      })
      .finalMessage();
    expect(second.content).toEqual([{ type: 'text', text: EMPTY_ECHO_TEXT }]);
    expect(second.stop_reason).toBe('end_turn');
  });

  it('streams thinking blocks with their signature', async () => {
    const msg = await client.messages
      .stream({
        model: 'claude-sonnet-4-6',
        max_tokens: 2000,
        thinking: { type: 'enabled', budget_tokens: 1024 },
        messages: [{ role: 'user', content: 'Think [[thinking]] [[words:2]]' }],
      })
      .finalMessage();
    expect(msg.content[0]).toEqual({ type: 'thinking', thinking: THINKING_TEXT, signature: THINKING_SIGNATURE });
    expect(msg.content[1]).toEqual({ type: 'text', text: 'word1 word2' });
  });

  it('stops at max_tokens and charges the truncated output', async () => {
    const { data, response } = await client.messages
      .create({ model: 'claude-sonnet-4-6', max_tokens: 3, messages: [{ role: 'user', content: '[[words:10]]' }] })
      .withResponse();
    expect(data.stop_reason).toBe('max_tokens');
    expect(data.usage.output_tokens).toBe(3);
    expect(Number(response.headers.get('x-gateway-cost-microdollars'))).toBe(sonnet(data.usage));
  });
});

describe('count_tokens and models', () => {
  it('passes count_tokens through for Claude models, uncharged', async () => {
    const params = { model: 'claude-sonnet-4-6', messages: [{ role: 'user' as const, content: 'How many tokens is this?' }] };
    const before = (await settledUsage({ projectId: gw.projectId, userId: 'alice', budget: { ai: 10_000_000, compute: 3600, window: 'day' } })).used.ai;
    const counted = await client.messages.countTokens(params);
    expect(counted.input_tokens).toBe(estimateInputTokens(params));
    const after = (await settledUsage({ projectId: gw.projectId, userId: 'alice', budget: { ai: 10_000_000, compute: 3600, window: 'day' } })).used.ai;
    expect(after).toBe(before);
  });

  it('lists the models the gateway can price, with paging, custom-priced ones included', async () => {
    await gw.setPricing('claude-house-1', { inputUsdPerMtok: 1, outputUsdPerMtok: 2 });
    const ids: string[] = [];
    for await (const m of client.models.list({ limit: 50 })) ids.push(m.id);
    expect(ids).toContain('claude-sonnet-4-6');
    expect(ids).toContain('claude-house-1');
    // GPT models need the project's OpenAI key: without it they are not listed, because they would be refused
    expect(ids).not.toContain('gpt-4o');
    await gw.setProviderKey('openai', 'sk-test-openai');
    const withKey: string[] = [];
    for await (const m of client.models.list({ limit: 1000 })) withKey.push(m.id);
    expect(withKey).toContain('gpt-4o');
    expect(new Set(ids).size).toBe(ids.length);
    const page = await client.models.list({ limit: 2 });
    expect(page.data).toHaveLength(2);
    expect(page.has_more).toBe(true);
    const one = await client.models.retrieve('claude-sonnet-4-6');
    expect(one).toMatchObject({ type: 'model', id: 'claude-sonnet-4-6' });
  });
});

describe('errors in the Anthropic envelope', () => {
  it('bad token → AuthenticationError (401)', async () => {
    const bad = gw.client('not.a.token');
    const err = await bad.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((err as APIError).error).toEqual({ type: 'error', error: { type: 'authentication_error', message: 'Malformed token' } });
    expect((err as APIError).requestID).toMatch(/^req_gw_/);
  });

  it('spent budget → RateLimitError (429)', async () => {
    const broke = gw.client(await gw.token({ user: 'broke', budget: { ai: 0 } }));
    const err = await broke.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.RateLimitError);
    expect((err as APIError).message).toMatch(/AI budget exhausted: 0 of 0 microdollars/);
  });

  it('malformed bodies → BadRequestError naming the field', async () => {
    const cases: [unknown, RegExp][] = [
      [{ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: 'x' }] }, /max_tokens is required/],
      [{ model: 'claude-sonnet-4-6', max_tokens: 5 }, /messages is required/],
      [{ model: 'claude-sonnet-4-6', max_tokens: 5, messages: [{ role: 7, content: 'x' }] }, /^messages\.0\.role: role must be a string/],
      [{ model: 'claude-sonnet-4-6', max_tokens: 5, messages: ['x'] }, /^messages\.0: /],
      [{ model: 'claude-sonnet-4-6', max_tokens: 1.5, messages: [] }, /max_tokens must be an integer/],
      [{ max_tokens: 5, messages: [] }, /model is required/],
    ];
    for (const [body, message] of cases) {
      const err = await client.messages.create(body as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(Anthropic.BadRequestError);
      expect((err as APIError).error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error' } });
      expect(((err as APIError).error as { error: { message: string } }).error.message).toMatch(message);
    }
    const res = await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': token }, body: '{not json' });
    expect(res.status).toBe(400);
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'Request body is not valid JSON' } });
    // (the SDK itself refuses a huge non-streamed max_tokens, so this one goes raw)
    const huge = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': token },
      body: JSON.stringify({ model: 'claude-sonnet-4-6', max_tokens: 600_000_000_000_000, messages: [{ role: 'user', content: 'x' }] }),
    });
    expect(huge.status).toBe(400);
    expect(await huge.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'max_tokens must be at most 1,000,000' } });
  });

  it('refuses a model with no price instead of charging $0, and serves it once priced', async () => {
    const err = await client.messages
      .create({ model: 'claude-imaginary-9', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect(((err as APIError).error as { error: { message: string } }).error.message).toMatch(/^Model "claude-imaginary-9" has no known price/);
    await gw.setPricing('claude-imaginary-9', { inputUsdPerMtok: 2, outputUsdPerMtok: 4 });
    const { data, response } = await client.messages
      .create({ model: 'claude-imaginary-9', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] })
      .withResponse();
    expect(Number(response.headers.get('x-gateway-cost-microdollars'))).toBe(Math.ceil(data.usage.input_tokens * 2 + data.usage.output_tokens * 4));
  });

  it('answers a wrong method in the Anthropic envelope', async () => {
    const res = await fetch(`${gw.url}/v1/messages`, { headers: { 'x-api-key': token } });
    expect(res.status).toBe(405);
    expect(await res.json()).toEqual({ type: 'error', error: { type: 'invalid_request_error', message: 'GET is not allowed on /v1/messages' } });
    const conjure = await fetch(`${gw.url}/usage`, { method: 'POST' });
    expect(conjure.status).toBe(405);
    expect(await conjure.json()).toEqual({ error: 'method_not_allowed', message: 'POST is not allowed on /usage' });
  });

  it('answers an unknown route with not_found_error', async () => {
    const res = await fetch(`${gw.url}/v1/nothing`, { headers: { 'x-api-key': token } });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { type: string } }).error.type).toBe('not_found_error');
    expect(res.headers.get('request-id')).toMatch(/^req_gw_/);
  });
});
