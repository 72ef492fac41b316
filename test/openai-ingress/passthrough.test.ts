import OpenAI from 'openai';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { estimateInputTokens } from '../../bin/local/upstreams/script.ts';
import { REASONING_DEFAULT_MAX_TOKENS } from '../../lambdas/openai-ingress/passthrough.ts';
import { DEFAULT_MAX_TOKENS } from '../../lambdas/openai-ingress/request.ts';
import { SseDecoder } from '../../lambdas/streaming/sse.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * POST /v1/chat/completions for OpenAI and OpenRouter models (DESIGN §11, docs/openai.md "OpenAI and OpenRouter
 * models"): the client's body goes up with every field it sent — only the model name, the output limit the
 * reservation holds and the usage the gateway meters from are set — and the answer comes back as the upstream sent
 * it. Real `openai` SDK and raw `fetch`, a whole local gateway, its simulated OpenAI/OpenRouter upstream; every
 * charge exactly tokens × price (or OpenRouter's reported cost), and the ledger equal to the cost headers.
 */
const GPT = 'gpt-4o';
const O3 = 'o3-mini';
const LLAMA = 'or:meta-llama/llama-3.3-70b-instruct';
/** Custom prices (USD / Mtok = µ$ per token) so the expected charges are exact. */
const PRICE = { inputUsdPerMtok: 2, outputUsdPerMtok: 8, cacheReadUsdPerMtok: 0.5 };
const priced = (u: { prompt_tokens: number; completion_tokens: number; prompt_tokens_details?: { cached_tokens?: number } | null }) => {
  const cached = u.prompt_tokens_details?.cached_tokens ?? 0;
  return Math.ceil(((u.prompt_tokens - cached) * 2_000_000 + u.completion_tokens * 8_000_000 + cached * 500_000) / 1_000_000);
};

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
  await gw.setProviderKey('openrouter', 'sk-or-project');
  for (const model of [GPT, O3, LLAMA]) await gw.setPricing(model, PRICE);
});
afterAll(() => gw?.stop());

const upstream = () => gw.upstreams.openai!;
const sent = () => upstream().requests.at(-1)!.body as Record<string, unknown>;
beforeEach(() => {
  upstream().requests.length = 0;
});

async function user(ai = 10_000_000) {
  const u = await gw.user('pt', { ai });
  return { ...u, openai: new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: u.token, maxRetries: 0 }) };
}

function post(token: string, body: unknown): Promise<Response> {
  return fetch(`${gw.url}/v1/chat/completions`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/** The `data:` payloads of an SSE body. */
async function dataOf(res: Response): Promise<string[]> {
  const decoder = new SseDecoder();
  const text = await res.text();
  return [...decoder.push(new TextEncoder().encode(text)), ...decoder.end()].map((e) => e.data);
}

describe('OpenAI models, passed through', () => {
  it('JSON: every field the client sent goes up (unknown ones too), the answer is the upstream bytes, charged usage × price exactly', async () => {
    const u = await user();
    const body = {
      model: GPT,
      messages: [{ role: 'user', content: 'hi [[words:5]] [[cache:read=10,write=0]]' }],
      seed: 7,
      logprobs: true,
      top_logprobs: 2,
      frequency_penalty: 0.5,
      metadata: { app: 'demo' },
      store: false,
      some_future_field: { nested: [1, 2] },
    };
    const res = await post(u.token, body);
    expect(res.status).toBe(200);
    const text = await res.text();
    const completion = JSON.parse(text) as OpenAI.Chat.ChatCompletion;
    // Forwarded: the client's body, the project's key, and the limit the reservation holds (none was set).
    expect(sent()).toEqual({ ...body, max_completion_tokens: DEFAULT_MAX_TOKENS });
    expect(upstream().requests.at(-1)!.headers.authorization).toBe('Bearer sk-openai-project');
    expect(completion).toMatchObject({
      object: 'chat.completion',
      model: GPT,
      choices: [{ index: 0, message: { role: 'assistant', content: 'word1 word2 word3 word4 word5' } }],
    });
    const prompt = estimateInputTokens(sent());
    expect(completion.usage).toMatchObject({ prompt_tokens: prompt, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 10 } });
    const cost = priced(completion.usage!);
    expect(cost).toBe(Math.ceil(((prompt - 10) * 2_000_000 + 5 * 8_000_000 + 10 * 500_000) / 1_000_000));
    expect(res.headers.get('x-gateway-cost-microdollars')).toBe(String(cost));
    expect(res.headers.get('x-gateway-budget-remaining-microdollars')).toBe(String(10_000_000 - cost));
    const usage = await u.ledger();
    expect(usage.used).toBe(cost);
    expect(usage.reserved).toBe(0);
  });

  it('the openai SDK: chat.completions.create JSON and streamed, charged the same usage', async () => {
    const u = await user();
    const json = await u.openai.chat.completions.create({ model: GPT, messages: [{ role: 'user', content: 'hello [[words:4]]' }], max_completion_tokens: 50 });
    expect(json.choices[0]!.message.content).toBe('word1 word2 word3 word4');
    expect(sent().max_completion_tokens).toBe(50);
    const first = priced(json.usage!);
    const stream = await u.openai.chat.completions.create({
      model: GPT,
      messages: [{ role: 'user', content: 'hello [[words:4]]' }],
      max_completion_tokens: 50,
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = '';
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(content).toBe('word1 word2 word3 word4');
    expect(usage).toMatchObject({ completion_tokens: 4, prompt_tokens: estimateInputTokens(sent()) });
    expect((await u.ledger()).used).toBe(first + priced(usage!));
  });

  it('a stream without include_usage is metered all the same: the gateway asks for the usage chunk and removes it', async () => {
    const u = await user();
    const res = await post(u.token, { model: GPT, stream: true, messages: [{ role: 'user', content: 'hi [[words:3]]' }], max_tokens: 30 });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const data = await dataOf(res);
    expect(sent().stream_options).toEqual({ include_usage: true });
    expect(sent().max_tokens).toBe(30);
    expect(sent().max_completion_tokens).toBeUndefined();
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as Record<string, unknown>);
    // No usage chunk, and no usage field on the others: what OpenAI sends a client that did not ask.
    expect(chunks.every((c) => !('usage' in c))).toBe(true);
    expect(chunks.every((c) => Array.isArray(c.choices) && (c.choices as unknown[]).length === 1)).toBe(true);
    const text = chunks.map((c) => (c.choices as { delta: { content?: string } }[])[0]!.delta.content ?? '').join('');
    expect(text).toBe('word1 word2 word3');
    const prompt = estimateInputTokens(sent());
    const usage = await u.ledger();
    expect(usage.used).toBe(priced({ prompt_tokens: prompt, completion_tokens: 3 }));
    expect(usage.reserved).toBe(0);
  });

  it('n = 3: three choices, the prompt billed once and each choice’s tokens, reserved for three answers', async () => {
    const u = await user();
    const res = await u.openai.chat.completions
      .create({ model: GPT, n: 3, messages: [{ role: 'user', content: 'x [[words:2]]' }], max_completion_tokens: 40 })
      .withResponse();
    expect(res.data.choices.map((c) => [c.index, c.message.content])).toEqual([
      [0, 'word1 word2'],
      [1, 'word1 word2'],
      [2, 'word1 word2'],
    ]);
    expect(sent().n).toBe(3);
    expect(res.data.usage!.completion_tokens).toBe(6);
    const cost = priced(res.data.usage!);
    expect(res.response.headers.get('x-gateway-cost-microdollars')).toBe(String(cost));
    expect((await u.ledger()).used).toBe(cost);

    // A budget worth one 40-token choice but not three: the limit is lowered so that three fit.
    const prompt = estimateInputTokens({ messages: [{ role: 'user', content: 'x [[words:2]]' }] });
    const tight = await user(2 * (prompt + 200) + 3 * 8 * 20);
    const clamped = await post(tight.token, { model: GPT, n: 3, messages: [{ role: 'user', content: 'x [[words:2]]' }], max_completion_tokens: 40 });
    expect(clamped.status).toBe(200);
    const limit = Number(clamped.headers.get('x-gateway-max-tokens'));
    expect(limit).toBeLessThan(40);
    expect(sent().max_completion_tokens).toBe(limit);
    expect((await tight.ledger()).used).toBeLessThanOrEqual(2 * (prompt + 200) + 3 * 8 * 20);
  });

  it('a reasoning model without a limit gets the reasoning default; a client limit is lowered only to fit the budget', async () => {
    const u = await user();
    await u.openai.chat.completions.create({ model: O3, messages: [{ role: 'user', content: 'think [[words:2]]' }], reasoning_effort: 'high' });
    expect(sent()).toMatchObject({ model: O3, max_completion_tokens: REASONING_DEFAULT_MAX_TOKENS, reasoning_effort: 'high' });
    expect(sent().max_tokens).toBeUndefined();
  });

  it('the upstream’s own errors keep their status, param and code; nothing is charged', async () => {
    const u = await user();
    const bad = await u.openai.chat.completions.create({ model: GPT, messages: [{ role: 'user', content: 'x [[error:400]]' }] }).catch((e: unknown) => e);
    expect(bad).toBeInstanceOf(OpenAI.BadRequestError);
    expect((bad as InstanceType<typeof OpenAI.APIError>).code).toBe('invalid_request');
    expect((bad as Error).message).toContain('OpenAI rejected the request: Simulated upstream error (HTTP 400)');
    const limited = await u.openai.chat.completions.create({ model: GPT, messages: [{ role: 'user', content: 'x [[error:429]]' }] }).catch((e: unknown) => e);
    expect(limited).toBeInstanceOf(OpenAI.RateLimitError);
    const usage = await u.ledger();
    expect(usage.used).toBe(0);
    expect(usage.reserved).toBe(0);
  });

  it.each([
    ['n', { n: 0 }, /n must be an integer from 1 to 128/],
    ['max_completion_tokens', { max_completion_tokens: 1.5 }, /must be a positive integer/],
    ['audio', { audio: { voice: 'alloy', format: 'wav' }, modalities: ['text', 'audio'] }, /audio-token rates/],
    [
      'messages[0].content[1].type',
      {
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'hi' },
              { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } },
            ],
          },
        ],
      },
      /audio-token rates/,
    ],
    ['service_tier', { service_tier: 'priority' }, /billed above the standard rates/],
    ['stream', { stream: 'yes' }, /stream must be a boolean/],
  ])('%s: 400 naming it, nothing sent upstream, nothing charged', async (param, extra, message) => {
    const u = await user();
    const err = await u.openai.chat.completions
      .create({ model: GPT, messages: [{ role: 'user', content: 'hi' }], ...(extra as object) } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.APIError>).param).toBe(param);
    expect((err as Error).message).toMatch(message);
    expect(upstream().requests).toHaveLength(0);
    expect((await u.ledger()).used).toBe(0);
  });
});

describe('OpenRouter models, passed through', () => {
  it('charged OpenRouter’s reported cost; `or:` stripped, max_tokens and usage.include set', async () => {
    const u = await user();
    const res = await post(u.token, { model: LLAMA, messages: [{ role: 'user', content: 'hi [[words:3]] [[cost:0.000123]]' }], provider: { sort: 'price' } });
    expect(res.status).toBe(200);
    const completion = (await res.json()) as OpenAI.Chat.ChatCompletion & { usage: { cost: number } };
    expect(completion.usage.cost).toBe(0.000123);
    expect(sent()).toEqual({
      model: 'meta-llama/llama-3.3-70b-instruct',
      messages: [{ role: 'user', content: 'hi [[words:3]] [[cost:0.000123]]' }],
      provider: { sort: 'price' },
      max_tokens: DEFAULT_MAX_TOKENS,
      usage: { include: true },
    });
    expect(res.headers.get('x-gateway-cost-microdollars')).toBe('123');
    expect((await u.ledger()).used).toBe(123);
  });

  it('streamed: the reported cost of the usage chunk is charged, and the chunk removed when not asked for', async () => {
    const u = await user();
    const res = await post(u.token, { model: LLAMA, stream: true, messages: [{ role: 'user', content: 'hi [[words:3]] [[cost:0.0000415]]' }] });
    const data = await dataOf(res);
    expect(data.at(-1)).toBe('[DONE]');
    expect(data.some((d) => d.includes('"cost"'))).toBe(false);
    expect(sent()).toMatchObject({ stream: true, stream_options: { include_usage: true }, usage: { include: true } });
    // 41.5 µ$ reported: charged 42 (rounded up once).
    expect((await u.ledger()).used).toBe(42);
  });

  it('n above 1 is refused for a model that is not OpenAI’s', async () => {
    const u = await user();
    const err = await u.openai.chat.completions.create({ model: LLAMA, n: 2, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.APIError>).param).toBe('n');
    expect((err as Error).message).toContain('n above 1 is served only for OpenAI models');
    expect(upstream().requests).toHaveLength(0);
  });
});
