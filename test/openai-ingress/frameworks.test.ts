import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The frameworks apps use on top of OpenAI's format, pointed at POST /v1/chat/completions (issue 29, done-when 1): the
 * Vercel AI SDK's OpenAI-compatible provider (generateText, streamText, a tool loop) and LangChain's ChatOpenAI
 * (invoke, stream, bindTools), each for the three kinds of model the route serves — a Claude model (translated to
 * Anthropic and back), an OpenAI model and an OpenRouter model (passed through). Every answer reaches the framework
 * whole, and the ledger holds exactly Σ of the answers' charges, with nothing left held: a Claude answer's tokens ×
 * the catalog price, an OpenAI answer's tokens × the project's custom price (cached tokens at its cache-read rate), an
 * OpenRouter answer the cost OpenRouter reported, in µ$ rounded up.
 */

/** The usage a framework read from an answer, in OpenAI's terms: `input` includes the `cached` tokens. */
interface SeenUsage {
  input: number;
  output: number;
  cached: number;
}

interface ModelCase {
  label: string;
  model: string;
  /** Directives added to every prompt (bin/local/upstreams/script.ts): cached tokens, or the cost OpenRouter reports. */
  tag: string;
  /** The cached tokens each answer reports. */
  cached: number;
  /** What the ledger must hold for one answer. */
  charged: (usage: SeenUsage) => number;
  /** OpenRouter's `usage.cost` (USD), as the answer carries it. */
  reportedCost?: number;
}

const CLAUDE_PRICE = priceFor('claude-sonnet-4-6', 'anthropic')!;
/** The OpenAI model's custom price (USD / Mtok = µ$ per token), so that its charges are exact. */
const GPT_PRICE = { inputUsdPerMtok: 2, outputUsdPerMtok: 8, cacheReadUsdPerMtok: 0.5 };
const GPT_CACHED = 6;
/** The cost the simulated OpenRouter reports for each answer: 41.5 µ$, charged 42 (rounded up once). */
const OR_COST = 0.0000415;
const OR_COST_MICROS = 42;

const CASES: ModelCase[] = [
  {
    label: 'a Claude model (claude-sonnet-4-6)',
    model: 'claude-sonnet-4-6',
    tag: '',
    cached: 0,
    charged: (u) => charge(CLAUDE_PRICE, { input_tokens: u.input, output_tokens: u.output }).microdollars,
  },
  {
    label: 'an OpenAI model (gpt-4o)',
    model: 'gpt-4o',
    tag: ` [[cache:read=${GPT_CACHED}]]`,
    cached: GPT_CACHED,
    charged: (u) => Math.ceil(((u.input - u.cached) * 2_000_000 + u.output * 8_000_000 + u.cached * 500_000) / 1_000_000),
  },
  {
    label: 'an OpenRouter model (or:meta-llama/llama-3.3-70b-instruct)',
    model: 'or:meta-llama/llama-3.3-70b-instruct',
    tag: ` [[cost:${OR_COST}]]`,
    cached: 0,
    charged: () => OR_COST_MICROS,
    reportedCost: OR_COST,
  },
];

let gw: TestGateway;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
  await gw.setProviderKey('openrouter', 'sk-or-project');
  await gw.setPricing('gpt-4o', GPT_PRICE);
});
afterAll(async () => {
  await gw?.stop();
});

const user = () => gw.user('fw', { ai: 5_000_000 });

describe.each(CASES)('the Vercel AI SDK (OpenAI-compatible provider), $label', (c) => {
  const provider = (token: string) => createOpenAICompatible({ name: 'gateway', baseURL: `${gw.url}/v1`, apiKey: token, includeUsage: true });
  /** The AI SDK's usage of an answer (or a step), as the case prices it. */
  const seen = (usage: { inputTokens?: number; outputTokens?: number; inputTokenDetails: { cacheReadTokens?: number } }): SeenUsage => ({
    input: usage.inputTokens!,
    output: usage.outputTokens!,
    cached: usage.inputTokenDetails.cacheReadTokens ?? 0,
  });

  it('generateText and streamText: the answers, and the ledger equals their charges', async () => {
    const u = await user();
    const generated = await generateText({ model: provider(u.token)(c.model), prompt: `hi [[words:3]]${c.tag}`, maxRetries: 0 });
    expect(generated.text).toBe('word1 word2 word3');
    expect(generated.finishReason).toBe('stop');
    expect(generated.usage.outputTokens).toBe(3);
    const streamed = streamText({ model: provider(u.token)(c.model), prompt: `stream [[words:5]]${c.tag}`, maxRetries: 0 });
    expect(await streamed.text).toBe('word1 word2 word3 word4 word5');
    const streamedUsage = await streamed.usage;
    expect(streamedUsage.outputTokens).toBe(5);
    const usages = [seen(generated.usage), seen(streamedUsage)];
    expect(usages.map((s) => s.cached)).toEqual([c.cached, c.cached]);
    if (c.reportedCost !== undefined) {
      expect(generated.usage.raw).toMatchObject({ cost: c.reportedCost });
      expect(streamedUsage.raw).toMatchObject({ cost: c.reportedCost });
    }
    const spent = usages.reduce((sum, s) => sum + c.charged(s), 0);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });

  it('a tool loop: the model calls the tool, the SDK runs it and sends its result, the model answers from it', async () => {
    const u = await user();
    const cities: unknown[] = [];
    const result = await generateText({
      model: provider(u.token)(c.model),
      prompt: `Weather in Paris? [[1> tool:get_weather {"city":"Paris"}]]${c.tag}`,
      tools: {
        get_weather: tool({
          description: 'Weather of a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => {
            cities.push(city);
            return `sunny in ${city}`;
          },
        }),
      },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    expect(cities).toEqual(['Paris']);
    expect(result.steps).toHaveLength(2);
    expect(result.steps[0]!.finishReason).toBe('tool-calls');
    expect(result.steps[0]!.toolCalls).toEqual([expect.objectContaining({ toolName: 'get_weather', input: { city: 'Paris' } })]);
    expect(result.steps[1]!.finishReason).toBe('stop');
    // The simulated model echoes the tool result it was sent (bin/local/upstreams/script.ts).
    expect(result.text).toBe('Tool results: sunny in Paris');
    const usages = result.steps.map((s) => seen(s.usage));
    expect(usages.map((s) => s.cached)).toEqual([c.cached, c.cached]);
    const spent = usages.reduce((sum, s) => sum + c.charged(s), 0);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });
});

describe.each(CASES)("LangChain's ChatOpenAI, $label", (c) => {
  const chat = (token: string) => new ChatOpenAI({ model: c.model, apiKey: token, configuration: { baseURL: `${gw.url}/v1` }, maxRetries: 0 });
  type UsageMetadata = { input_tokens: number; output_tokens: number; input_token_details?: { cache_read?: number } };
  const seen = (m: UsageMetadata): SeenUsage => ({ input: m.input_tokens, output: m.output_tokens, cached: m.input_token_details?.cache_read ?? 0 });

  it('invoke, stream and bindTools: the answers and the tool call, and the ledger equals their charges', async () => {
    const u = await user();
    const invoked = await chat(u.token).invoke(`hi [[words:4]]${c.tag}`);
    expect(invoked.content).toBe('word1 word2 word3 word4');
    let streamedText = '';
    let streamedUsage: UsageMetadata | undefined;
    for await (const chunk of await chat(u.token).stream(`stream [[words:3]]${c.tag}`)) {
      streamedText += typeof chunk.content === 'string' ? chunk.content : '';
      if (chunk.usage_metadata) streamedUsage = chunk.usage_metadata;
    }
    expect(streamedText).toBe('word1 word2 word3');
    const withTools = chat(u.token).bindTools([
      {
        type: 'function',
        function: { name: 'get_weather', description: 'Weather of a city', parameters: { type: 'object', properties: { city: { type: 'string' } } } },
      },
    ]);
    const called = await withTools.invoke(`Weather? [[tool:get_weather {"city":"Lyon"}]]${c.tag}`);
    expect(called.tool_calls).toEqual([expect.objectContaining({ name: 'get_weather', args: { city: 'Lyon' } })]);

    const metadata = [invoked.usage_metadata, streamedUsage, called.usage_metadata];
    for (const m of metadata) expect(m).toBeDefined();
    const usages = metadata.map((m) => seen(m!));
    expect(usages.map((s) => s.cached)).toEqual([c.cached, c.cached, c.cached]);
    expect([usages[0]!.output, usages[1]!.output]).toEqual([4, 3]);
    const spent = usages.reduce((sum, s) => sum + c.charged(s), 0);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });
});
