import OpenAI from 'openai';
import { zodFunction, zodResponseFormat } from 'openai/helpers/zod';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { createProject, setModelPricing } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The `openai` SDK's calls an app makes, for the models POST /v1/chat/completions passes through (issue 29,
 * done-when 1, its OpenAI and OpenRouter part; the Claude part is chat-completions.test.ts): `chat.completions.create`
 * as JSON and as a stream, a tool round trip the SDK runs itself (`runTools`, the tool's result sent back), `parse`
 * with a zod schema, and `models.list`. Each answer exactly as the upstream gave it, and the ledger exactly Σ of the
 * answers' charges — an OpenAI answer's usage × the project's custom price (cached tokens at the cache-read rate), an
 * OpenRouter answer the `usage.cost` OpenRouter reported, in µ$ rounded up — with nothing left held.
 */
const GPT = 'gpt-4o';
const LLAMA = 'or:meta-llama/llama-3.3-70b-instruct';
/** Custom prices (USD / Mtok = µ$ per token), so that token charges are exact. */
const PRICE = { inputUsdPerMtok: 2, outputUsdPerMtok: 8, cacheReadUsdPerMtok: 0.5 };
const GPT_CACHED = 6;
/** The cost the simulated OpenRouter reports for each answer: 41.5 µ$, charged 42 (rounded up once). */
const OR_COST = 0.0000415;
const OR_COST_MICROS = 42;

type Usage = OpenAI.CompletionUsage & { cost?: number };

interface ModelCase {
  label: string;
  model: string;
  /** The model name the upstream is asked for, and answers with. */
  upstreamModel: string;
  /** The path the upstream is called on. */
  path: string;
  /** Directives added to every prompt (bin/local/upstreams/script.ts): cached tokens, or the cost OpenRouter reports. */
  tag: string;
  /** What an answer with this usage is charged. */
  charged: (usage: Usage) => number;
}

const CASES: ModelCase[] = [
  {
    label: 'an OpenAI model (gpt-4o)',
    model: GPT,
    upstreamModel: GPT,
    path: '/v1/chat/completions',
    tag: ` [[cache:read=${GPT_CACHED}]]`,
    charged: (u) => {
      expect(u.prompt_tokens_details?.cached_tokens).toBe(GPT_CACHED);
      const cached = GPT_CACHED;
      return Math.ceil(((u.prompt_tokens - cached) * 2_000_000 + u.completion_tokens * 8_000_000 + cached * 500_000) / 1_000_000);
    },
  },
  {
    label: 'an OpenRouter model (or:meta-llama/llama-3.3-70b-instruct)',
    model: LLAMA,
    upstreamModel: 'meta-llama/llama-3.3-70b-instruct',
    path: '/api/v1/chat/completions',
    tag: ` [[cost:${OR_COST}]]`,
    charged: (u) => {
      expect(u.cost).toBe(OR_COST);
      return OR_COST_MICROS;
    },
  },
];

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
  await gw.setProviderKey('openrouter', 'sk-or-project');
  for (const model of [GPT, LLAMA]) await gw.setPricing(model, PRICE);
});
afterAll(() => gw?.stop());

const upstream = () => gw.upstreams.openai!;
beforeEach(() => {
  upstream().requests.length = 0;
});

async function user() {
  const u = await gw.user('ptc');
  return { ...u, openai: new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: u.token, maxRetries: 0 }) };
}

describe.each(CASES)('the openai SDK, $label', (c) => {
  it('chat.completions.create, JSON then streamed: the answers as the upstream gave them, the ledger their charges', async () => {
    const u = await user();
    const { data: json, response } = await u.openai.chat.completions
      .create({ model: c.model, messages: [{ role: 'user', content: `hello [[words:4]]${c.tag}` }], max_completion_tokens: 50 })
      .withResponse();
    expect(upstream().requests.map((r) => [r.path, (r.body as { model: string }).model])).toEqual([[c.path, c.upstreamModel]]);
    expect(json).toMatchObject({
      object: 'chat.completion',
      model: c.upstreamModel,
      choices: [{ index: 0, message: { role: 'assistant', content: 'word1 word2 word3 word4' }, finish_reason: 'stop' }],
      usage: { completion_tokens: 4 },
    });
    const first = c.charged(json.usage!);
    expect(response.headers.get('x-gateway-cost-microdollars')).toBe(String(first));

    const stream = await u.openai.chat.completions.create({
      model: c.model,
      messages: [{ role: 'user', content: `hello [[words:6]]${c.tag}` }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const chunk of stream) chunks.push(chunk);
    expect(chunks.map((k) => k.choices[0]?.delta.content ?? '').join('')).toBe('word1 word2 word3 word4 word5 word6');
    expect(chunks.every((k) => k.object === 'chat.completion.chunk' && k.model === c.upstreamModel)).toBe(true);
    expect(chunks.at(-2)!.choices[0]!.finish_reason).toBe('stop');
    // The usage chunk the client asked for: the last one, with no choices.
    const last = chunks.at(-1)!;
    expect(last.choices).toEqual([]);
    expect(last.usage).toMatchObject({ completion_tokens: 6 });
    expect(await u.ledger()).toEqual({ used: first + c.charged(last.usage!), reserved: 0, openHolds: 0 });
  });

  it.each([false, true])('a tool round trip the SDK runs (runTools, stream %s): the call, the result sent back, the answer from it', async (streamed) => {
    const u = await user();
    const cities: string[] = [];
    const getWeather = zodFunction({
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: z.object({ city: z.string() }),
      function: async ({ city }) => {
        cities.push(city);
        return `sunny in ${city}`;
      },
    });
    const params = {
      model: c.model,
      messages: [{ role: 'user' as const, content: `Weather in Paris? [[1> tool:get_weather {"city":"Paris"}]]${c.tag}` }],
      tools: [getWeather],
    };
    // Each answer's usage, as the SDK read it: on the completion (JSON), or the usage chunk the SDK asked for (stream).
    const usages: Usage[] = [];
    let runner: { finalContent(): Promise<string | null>; allChatCompletions(): OpenAI.Chat.ChatCompletion[] };
    if (streamed) {
      const streaming = u.openai.chat.completions.runTools({ ...params, stream: true, stream_options: { include_usage: true } });
      streaming.on('chunk', (chunk) => {
        if (chunk.usage) usages.push(chunk.usage);
      });
      runner = streaming;
    } else {
      const direct = u.openai.chat.completions.runTools(params);
      direct.on('chatCompletion', (completion) => {
        if (completion.usage) usages.push(completion.usage);
      });
      runner = direct;
    }
    expect(await runner.finalContent()).toBe('Tool results: sunny in Paris');
    expect(cities).toEqual(['Paris']);

    const completions = runner.allChatCompletions();
    expect(completions).toHaveLength(2);
    const call = completions[0]!.choices[0]!.message.tool_calls![0] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
    expect(completions[0]!.choices[0]!.finish_reason).toBe('tool_calls');
    expect(call.function).toEqual({ name: 'get_weather', arguments: '{"city":"Paris"}', parsed_arguments: { city: 'Paris' } });
    expect(upstream().requests.map((r) => (r.body as { stream?: boolean }).stream === true)).toEqual([streamed, streamed]);
    // The second request carries the SDK's tool message for that call, passed through as sent.
    const second = upstream().requests[1]!.body as { messages: Record<string, unknown>[]; tools: unknown[] };
    expect(second.messages.at(-1)).toEqual({ role: 'tool', tool_call_id: call.id, content: 'sunny in Paris' });
    expect(second.tools).toEqual([expect.objectContaining({ type: 'function', function: expect.objectContaining({ name: 'get_weather', strict: true }) })]);

    expect(usages).toHaveLength(2);
    const spent = usages.reduce((sum, usage) => sum + c.charged(usage), 0);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });

  it('chat.completions.parse with a zod schema: response_format passed through, the answer parsed, and a parsed tool call', async () => {
    const u = await user();
    const Weather = z.object({ city: z.string(), celsius: z.number(), sunny: z.boolean() });
    const parsed = await u.openai.chat.completions.parse({
      model: c.model,
      messages: [{ role: 'user', content: `Weather in Nice? [[json:{"city":"Nice","celsius":24,"sunny":true}]]${c.tag}` }],
      response_format: zodResponseFormat(Weather, 'weather'),
    });
    expect(parsed.choices[0]!.message.parsed).toEqual({ city: 'Nice', celsius: 24, sunny: true });
    expect((upstream().requests[0]!.body as { response_format: unknown }).response_format).toEqual({
      type: 'json_schema',
      json_schema: {
        name: 'weather',
        strict: true,
        schema: expect.objectContaining({ type: 'object', properties: expect.objectContaining({ celsius: { type: 'number' } }), additionalProperties: false }),
      },
    });

    const withTool = await u.openai.chat.completions.parse({
      model: c.model,
      messages: [{ role: 'user', content: `Weather in Lyon? [[tool:get_weather {"city":"Lyon"}]]${c.tag}` }],
      tools: [zodFunction({ name: 'get_weather', parameters: z.object({ city: z.string() }) })],
    });
    const call = withTool.choices[0]!.message.tool_calls![0] as OpenAI.Chat.ParsedFunctionToolCall;
    expect(call.function).toMatchObject({ name: 'get_weather', arguments: '{"city":"Lyon"}', parsed_arguments: { city: 'Lyon' } });

    const spent = c.charged(parsed.usage!) + c.charged(withTool.usage!);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });
});

describe('models.list', () => {
  const PASSED_THROUGH = [
    { id: GPT, object: 'model', owned_by: 'openai' },
    { id: LLAMA, object: 'model', owned_by: 'openrouter' },
    // The catalog's OpenRouter models are listed under the name that routes to OpenRouter, here without `or:`.
    { id: 'meta-llama/llama-3.3-70b-instruct', object: 'model', owned_by: 'openrouter' },
  ];

  it('lists the OpenAI and OpenRouter models the project holds a key for and a price of', async () => {
    const u = await user();
    const ids = new Map<string, OpenAI.Models.Model>();
    for await (const model of u.openai.models.list()) ids.set(model.id, model);
    for (const expected of PASSED_THROUGH) expect(ids.get(expected.id)).toMatchObject(expected);
    expect(ids.get('claude-sonnet-4-6')).toMatchObject({ owned_by: 'anthropic' });
    // Each listed model is one the route serves.
    for (const { id } of PASSED_THROUGH) {
      const answer = await u.openai.chat.completions.create({ model: id, messages: [{ role: 'user', content: 'hi [[words:1]]' }] });
      expect(answer.choices[0]!.message.content).toBe('word1');
    }
    expect(await u.ledger()).toMatchObject({ reserved: 0, openHolds: 0 });
  });

  it('a project without the providers’ keys lists none of them, priced or not, and is refused them', async () => {
    const project = await createProject({ developerId: gw.developerId });
    for (const model of [GPT, LLAMA]) await setModelPricing(project.projectId, model, PRICE);
    const token = await mintToken({
      projectId: project.projectId,
      userId: 'keyless',
      secret: project.secret,
      budget: { ai: 1_000_000, compute: 0, window: 'day' },
      expiresInSeconds: 3600,
    });
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: token, maxRetries: 0 });
    const listed: OpenAI.Models.Model[] = [];
    for await (const model of openai.models.list()) listed.push(model);
    expect(listed.map((m) => m.id)).toContain('claude-sonnet-4-6');
    expect(listed.filter((m) => m.owned_by !== 'anthropic')).toEqual([]);
    for (const model of [GPT, LLAMA]) {
      const err = await openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'hi' }] }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(OpenAI.APIError);
      expect((err as InstanceType<typeof OpenAI.APIError>).status).toBe(400);
      expect((err as Error).message).toMatch(/has no (OpenAI|OpenRouter) API key/);
    }
    expect(upstream().requests).toHaveLength(0);
  });
});
