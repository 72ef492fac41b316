import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { worstCaseOf } from '../../lambdas/metering/reservation.ts';
import { anthropicRequest } from '../../lambdas/openai-ingress/request.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import type { MessagesRequest } from '../../lambdas/providers/types.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * POST /v1/chat/completions for Claude models (DESIGN §11, docs/openai.md) with the real `openai` SDK against a whole
 * local gateway and its simulated Anthropic upstream: JSON, streams with and without usage, a tool round trip,
 * structured output with zod, the hard cap, refusals in OpenAI's envelope — and every charge equal to the ledger.
 */
const MODEL = 'claude-sonnet-4-6';
const pricing = priceFor(MODEL, 'anthropic')!;
let gw: TestGateway;
let seq = 0;
const lines: string[] = [];

beforeAll(async () => {
  gw = await startTestGateway({ accessLog: (line) => lines.push(line) });
});
afterAll(async () => {
  await gw?.stop();
});

async function user(ai = 5_000_000, window: BudgetClaim['window'] = 'day') {
  const id = `oai-${++seq}`;
  const budget: BudgetClaim = { ai, compute: 0, window };
  const token = await gw.token({ user: id, budget });
  const usage = async () => {
    await gw.invocationsDone();
    return readUsage({ projectId: gw.projectId, userId: id, budget });
  };
  return { id, token, usage };
}

/** The real SDK, as an app would make it (`baseURL` = the channeling URL + /v1), counting its HTTP calls. */
function client(token: string, opts: Partial<ConstructorParameters<typeof OpenAI>[0]> = {}) {
  const calls: Response[] = [];
  const openai = new OpenAI({
    baseURL: `${gw.url}/v1`,
    apiKey: token,
    maxRetries: 0,
    fetch: async (url, init) => {
      const res = await fetch(url, init);
      // Streams are not cloned: an unread clone would hold the body the SDK reads.
      calls.push(res.headers.get('content-type')?.includes('event-stream') ? new Response(null, { headers: res.headers }) : res.clone());
      return res;
    },
    ...opts,
  });
  return { openai, calls };
}

/** What the ledger must hold for an answer's usage: the usage priced as Anthropic's counters. */
function priced(usage: OpenAI.CompletionUsage): number {
  const cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
  return charge(pricing, { input_tokens: usage.prompt_tokens - cached, cache_read_input_tokens: cached, output_tokens: usage.completion_tokens }).microdollars;
}

describe('chat.completions.create', () => {
  it('JSON: an OpenAI completion, usage with cache reads and writes in prompt_tokens, cost headers, charged exactly what the ledger holds', async () => {
    const u = await user();
    const { openai, calls } = client(u.token);
    gw.upstreams.anthropic!.requests.length = 0;
    const completion = await openai.chat.completions.create({
      model: MODEL,
      messages: [
        { role: 'developer', content: 'Be brief.' },
        { role: 'user', content: 'hi [[words:5]] [[cache:read=100,write=0]]' },
      ],
      max_completion_tokens: 200,
      temperature: 0.2,
      stop: 'END',
      user: 'end-user-7',
    });
    expect(completion.object).toBe('chat.completion');
    expect(completion.id).toMatch(/^chatcmpl-/);
    expect(completion.model).toBe(MODEL);
    expect(completion.choices[0]!.message).toMatchObject({ role: 'assistant', content: 'word1 word2 word3 word4 word5' });
    expect(completion.choices[0]!.finish_reason).toBe('stop');
    const usage = completion.usage!;
    expect(usage.prompt_tokens_details?.cached_tokens).toBe(100);
    expect(usage.prompt_tokens).toBeGreaterThanOrEqual(100);
    expect(usage.total_tokens).toBe(usage.prompt_tokens + usage.completion_tokens);
    const sent = gw.upstreams.anthropic!.requests[0]!.body as MessagesRequest;
    expect(sent).toMatchObject({
      model: MODEL,
      max_tokens: 200,
      system: 'Be brief.',
      temperature: 0.2,
      stop_sequences: ['END'],
      metadata: { user_id: 'end-user-7' },
    });
    const cost = Number(calls[0]!.headers.get('x-gateway-cost-microdollars'));
    expect(cost).toBe(priced(usage));
    const ledger = await u.usage();
    expect(ledger.used.ai).toBe(cost);
    expect(ledger.reserved.ai).toBe(0);
    expect(Number(calls[0]!.headers.get('x-gateway-budget-remaining-microdollars'))).toBe(5_000_000 - cost);
  });

  it('a stream without include_usage: role first, content deltas, the finish chunk, [DONE] — no usage chunk, and still metered', async () => {
    const u = await user();
    const { openai } = client(u.token);
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'go [[words:6]]' }], stream: true });
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks[0]!.choices[0]!.delta.role).toBe('assistant');
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.model === MODEL && c.id === chunks[0]!.id)).toBe(true);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('word1 word2 word3 word4 word5 word6');
    expect(chunks.at(-1)!.choices[0]!.finish_reason).toBe('stop');
    expect(chunks.some((c) => c.usage)).toBe(false);
    const ledger = await u.usage();
    expect(ledger.used.ai).toBeGreaterThan(0);
    expect(ledger.reserved.ai).toBe(0);
  });

  it('a stream with include_usage: a last chunk with empty choices and the usage, which is exactly the charge', async () => {
    const u = await user();
    const { openai } = client(u.token);
    const stream = await openai.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'go [[words:4]] [[cache:read=40,write=60]]' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    const usage = last.usage!;
    expect(usage.prompt_tokens_details?.cached_tokens).toBe(40);
    expect(usage.prompt_tokens).toBeGreaterThanOrEqual(100);
    const ledger = await u.usage();
    // cache writes are priced as writes: the ledger is the Anthropic usage priced; prompt_tokens holds reads + writes
    const writes = 60;
    const expected = charge(pricing, {
      input_tokens: usage.prompt_tokens - 40 - writes,
      cache_read_input_tokens: 40,
      cache_creation_input_tokens: writes,
      output_tokens: usage.completion_tokens,
    }).microdollars;
    expect(ledger.used.ai).toBe(expected);
    expect(ledger.reserved.ai).toBe(0);
  });

  it('a client that leaves mid-stream: the upstream stops, what was produced is charged, no hold is left', async () => {
    const u = await user();
    const { openai } = client(u.token);
    const stream = await openai.chat.completions.create({
      model: MODEL,
      messages: [{ role: 'user', content: 'long [[words:400]] [[delay:20]]' }],
      stream: true,
    });
    let seen = 0;
    for await (const chunk of stream) {
      if (chunk.choices[0]?.delta.content && ++seen === 3) break; // leaving the loop aborts the request
    }
    await expect.poll(async () => (await u.usage()).reserved.ai, { timeout: 10_000 }).toBe(0);
    const ledger = await u.usage();
    expect(ledger.used.ai).toBeGreaterThan(0);
    // far below the 400 words' price: charged what was produced, not the whole answer
    expect(ledger.used.ai).toBeLessThan(charge(pricing, { input_tokens: 0, output_tokens: 400 }).microdollars);
  });

  it('a tool-call round trip (two requests, JSON then stream): tool_calls out, a tool message back, the tool result reaches Claude', async () => {
    const u = await user();
    const { openai } = client(u.token);
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ];
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [{ role: 'user', content: 'weather? [[1> tool:get_weather {"city":"Paris"}]]' }];
    gw.upstreams.anthropic!.requests.length = 0;
    const first = await openai.chat.completions.create({ model: MODEL, messages, tools, tool_choice: 'required', parallel_tool_calls: false });
    const call = first.choices[0]!.message.tool_calls![0]! as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(first.choices[0]!.finish_reason).toBe('tool_calls');
    expect(call.function).toEqual({ name: 'get_weather', arguments: '{"city":"Paris"}' });
    expect(gw.upstreams.anthropic!.requests[0]!.body).toMatchObject({
      tools: [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object' } }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
    });
    messages.push(first.choices[0]!.message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' });
    const stream = await openai.chat.completions.create({ model: MODEL, messages, tools, stream: true });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? '';
    expect(text).toBe('Tool results: sunny, 21 C');
    const second = gw.upstreams.anthropic!.requests[1]!.body as { messages: unknown[] };
    const preamble = first.choices[0]!.message.content;
    expect(second.messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: [...(preamble ? [{ type: 'text', text: preamble }] : []), { type: 'tool_use', id: call.id, name: 'get_weather', input: { city: 'Paris' } }],
      },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: call.id, content: 'sunny, 21 C' }] },
    ]);
  });

  it('a streamed tool call: tool_call deltas with index, id, name, then the arguments', async () => {
    const u = await user();
    const { openai } = client(u.token);
    const stream = openai.chat.completions.stream({
      model: MODEL,
      messages: [{ role: 'user', content: 'two tools [[tool:a {"x":1}]] [[tool:b {"y":2}]]' }],
      tools: ['a', 'b'].map((name) => ({ type: 'function' as const, function: { name, parameters: { type: 'object' } } })),
    });
    const final = await stream.finalChatCompletion();
    const calls = final.choices[0]!.message.tool_calls as OpenAI.Chat.ChatCompletionMessageFunctionToolCall[];
    expect(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['a', { x: 1 }],
      ['b', { y: 2 }],
    ]);
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
  });

  it('chat.completions.parse with a zod schema: response_format json_schema → Anthropic output_config.format, the answer parsed', async () => {
    const u = await user();
    const { openai } = client(u.token);
    const City = z.object({ name: z.string(), population: z.number() });
    gw.upstreams.anthropic!.requests.length = 0;
    const completion = await openai.chat.completions.parse({
      model: MODEL,
      messages: [{ role: 'user', content: 'a city [[json:{"name":"Lyon","population":522000}]]' }],
      response_format: zodResponseFormat(City, 'city'),
    });
    expect(completion.choices[0]!.message.parsed).toEqual({ name: 'Lyon', population: 522000 });
    const sent = gw.upstreams.anthropic!.requests[0]!.body as { output_config: { format: { type: string; schema: { properties: object } } } };
    expect(sent.output_config.format.type).toBe('json_schema');
    expect(Object.keys(sent.output_config.format.schema.properties)).toEqual(['name', 'population']);
  });
});

describe('the access log', () => {
  it('one line per request, as on /v1/messages: model, project/user, cost; a refusal names its code; never the token', async () => {
    const u = await user();
    const { openai, calls } = client(u.token);
    // An access line is written once its request's invocation has finished (after the settlement): the earlier tests'
    // lines are all in before this test's are counted.
    await gw.invocationsDone();
    lines.length = 0;
    await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi [[words:3]]' }] });
    const cost = calls[0]!.headers.get('x-gateway-cost-microdollars');
    const requestId = calls[0]!.headers.get('request-id');
    await expect.poll(() => lines.length).toBeGreaterThanOrEqual(1);
    expect(lines[0]).toMatch(
      new RegExp(`^POST /v1/chat/completions 200 ${MODEL} ${gw.projectId}/${u.id} ${cost}µ\\$ upstream \\d+ ms, total \\d+ ms ${requestId}$`),
    );
    const stream = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: '[[words:4]]' }], stream: true });
    for await (const _ of stream) void _;
    await expect.poll(() => lines.length).toBeGreaterThanOrEqual(2);
    expect(lines[1]).toMatch(new RegExp(`^POST /v1/chat/completions 200 ${MODEL} ${gw.projectId}/${u.id} [1-9]\\d*µ\\$ upstream`));
    await client('nope')
      .openai.chat.completions.create({ model: MODEL, messages: [] })
      .catch(() => undefined);
    await expect.poll(() => lines.length).toBeGreaterThanOrEqual(3);
    expect(lines[2]).toMatch(/^POST \/v1\/chat\/completions 401 invalid_api_key total \d+ ms req_gw_[0-9a-f]{24}$/);
    expect(lines.join('\n')).not.toContain(u.token);
  });
});

describe('the hard cap', () => {
  it('a request too big for a small budget is clamped: x-gateway-max-tokens, finish_reason length, charge within the budget and equal to the ledger', async () => {
    const budget = 100_000;
    const u = await user(budget);
    const { openai, calls } = client(u.token);
    const params = { model: MODEL, messages: [{ role: 'user' as const, content: 'write a lot [[words:50000]]' }], max_tokens: 64_000 };
    const w = worstCaseOf(pricing, anthropicRequest(params).body, 0);
    const clamp = Math.floor((budget * 1_000_000 - w.inputPico - w.feesPico) / w.outputRate);
    const completion = await openai.chat.completions.create(params);
    expect(calls[0]!.headers.get('x-gateway-max-tokens')).toBe(String(clamp));
    expect(completion.choices[0]!.finish_reason).toBe('length');
    expect(completion.usage!.completion_tokens).toBe(clamp);
    const cost = Number(calls[0]!.headers.get('x-gateway-cost-microdollars'));
    const ledger = await u.usage();
    expect(ledger.used.ai).toBe(cost);
    expect(cost).toBe(priced(completion.usage!));
    expect(cost).toBeLessThanOrEqual(budget);
  });
});

describe('refusals in OpenAI’s envelope', () => {
  it('a spent budget: 429 insufficient_quota, x-should-retry false and retry-after as on /v1/messages — the SDK (default retries) calls once', async () => {
    const u = await user(1, 'hour');
    const { openai, calls } = client(u.token, { maxRetries: 2 });
    const err = await openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.RateLimitError);
    expect(calls).toHaveLength(1);
    expect(calls[0]!.headers.get('x-should-retry')).toBe('false');
    const secondsToHour = 3600 - Math.floor((Date.now() / 1000) % 3600);
    expect(Math.abs(Number(calls[0]!.headers.get('retry-after')) - secondsToHour)).toBeLessThanOrEqual(2);
    const body = (await calls[0]!.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: 'insufficient_quota', code: 'insufficient_quota', param: null });
    expect(body.error.message).toMatch(/AI budget too low/);
    expect((await u.usage()).reserved.ai).toBe(0);
  });

  it('a bad token: 401 invalid_api_key (AuthenticationError); an expired one says so', async () => {
    const bad = await client('not-a-token')
      .openai.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] })
      .catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.AuthenticationError);
    expect((bad as InstanceType<typeof OpenAI.APIError>).code).toBe('invalid_api_key');
    const expired = await gw.token({ user: 'late', expiresInSeconds: -120 });
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${expired}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(401);
    const body = (await res.json()) as { error: { message: string; type: string; code: string } };
    expect(body.error).toMatchObject({ type: 'invalid_request_error', code: 'invalid_api_key', param: null });
    expect(body.error.message).toMatch(/expired/i);
  });

  it('x-api-key works as well as Bearer', async () => {
    const u = await user();
    const res = await fetch(`${gw.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'x-api-key': u.token, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi [[words:2]]' }] }),
    });
    expect(res.status).toBe(200);
    expect(((await res.json()) as OpenAI.Chat.ChatCompletion).choices[0]!.message.content).toBe('word1 word2');
  });

  it.each([
    ['logprobs', { logprobs: true }],
    ['logit_bias', { logit_bias: { 50256: -100 } }],
    ['audio', { audio: { voice: 'alloy', format: 'mp3' } }],
    ['modalities', { modalities: ['text', 'audio'] }],
    ['n', { n: 2 }],
  ])('%s cannot be carried: 400 invalid_request_error naming it, nothing charged', async (param, extra) => {
    const u = await user();
    const { openai } = client(u.token);
    const err = await openai.chat.completions
      .create({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], ...(extra as object) } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.APIError>).param).toBe(param);
    expect((err as InstanceType<typeof OpenAI.APIError>).type).toBe('invalid_request_error');
    expect((err as Error).message).toContain(param);
    expect((await u.usage()).used.ai).toBe(0);
  });

  it('an upstream overload (529) is 503 api_error; an upstream 500 is 502', async () => {
    const u = await user();
    const post = (content: string) =>
      fetch(`${gw.url}/v1/chat/completions`, {
        method: 'POST',
        headers: { authorization: `Bearer ${u.token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content }] }),
      });
    const overloaded = await post('hi [[error:529]]');
    expect(overloaded.status).toBe(503);
    expect(((await overloaded.json()) as { error: { type: string } }).error.type).toBe('api_error');
    const failed = await post('hi [[error:500]]');
    expect(failed.status).toBe(502);
    expect(((await failed.json()) as { error: { type: string } }).error.type).toBe('api_error');
    expect((await u.usage()).reserved.ai).toBe(0);
  });

  it('an unknown method on the route is 405 in OpenAI’s envelope', async () => {
    const res = await fetch(`${gw.url}/v1/chat/completions`);
    expect(res.status).toBe(405);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe('method_not_allowed');
  });
});
