import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import * as z from 'zod';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The frameworks apps use on top of OpenAI's format, pointed at POST /v1/chat/completions for a Claude model (issue 29,
 * done-when 1, its Claude part): the Vercel AI SDK's OpenAI-compatible provider (generateText, streamText, a tool
 * loop) and LangChain's ChatOpenAI (invoke, stream, bindTools). Every answer reaches the framework whole, and the
 * ledger holds exactly Σ of the answers' tokens × price, with nothing left held.
 */
const MODEL = 'claude-sonnet-4-6';
const pricing = priceFor(MODEL, 'anthropic')!;
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

async function user() {
  const id = `fw-${++seq}`;
  const budget: BudgetClaim = { ai: 5_000_000, compute: 0, window: 'day' };
  const token = await gw.token({ user: id, budget });
  const ledger = async () => {
    await gw.invocationsDone();
    const usage = await readUsage({ projectId: gw.projectId, userId: id, budget });
    return { used: usage.used.ai, reserved: usage.reserved.ai, openHolds: usage.openHolds };
  };
  return { token, ledger };
}

/** An answer's price from the usage OpenAI's format reports (no cache tokens here: prompt_tokens is input). */
const priced = (input: number, output: number) => charge(pricing, { input_tokens: input, output_tokens: output }).microdollars;

describe('the Vercel AI SDK (OpenAI-compatible provider)', () => {
  const provider = (token: string) => createOpenAICompatible({ name: 'gateway', baseURL: `${gw.url}/v1`, apiKey: token, includeUsage: true });

  it('generateText and streamText: the answers, and the ledger equals their usage × price', async () => {
    const u = await user();
    const generated = await generateText({ model: provider(u.token)(MODEL), prompt: 'hi [[words:3]]', maxRetries: 0 });
    expect(generated.text).toBe('word1 word2 word3');
    expect(generated.finishReason).toBe('stop');
    const streamed = streamText({ model: provider(u.token)(MODEL), prompt: 'stream [[words:5]]', maxRetries: 0 });
    expect(await streamed.text).toBe('word1 word2 word3 word4 word5');
    const streamedUsage = await streamed.usage;
    expect(streamedUsage.outputTokens).toBe(5);
    const spent = priced(generated.usage.inputTokens!, generated.usage.outputTokens!) + priced(streamedUsage.inputTokens!, streamedUsage.outputTokens!);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });

  it('a tool loop: the model calls the tool, the SDK runs it and sends its result, the model answers from it', async () => {
    const u = await user();
    const seen: unknown[] = [];
    const result = await generateText({
      model: provider(u.token)(MODEL),
      prompt: 'Weather in Paris? [[1> tool:get_weather {"city":"Paris"}]]',
      tools: {
        get_weather: tool({
          description: 'Weather of a city',
          inputSchema: z.object({ city: z.string() }),
          execute: async ({ city }) => {
            seen.push(city);
            return `sunny in ${city}`;
          },
        }),
      },
      stopWhen: stepCountIs(3),
      maxRetries: 0,
    });
    expect(seen).toEqual(['Paris']);
    expect(result.steps).toHaveLength(2);
    expect(result.steps[0]!.finishReason).toBe('tool-calls');
    // The simulated model echoes the tool result it was sent (bin/local/upstreams/script.ts).
    expect(result.text).toContain('sunny in Paris');
    const spent = result.steps.reduce((sum, s) => sum + priced(s.usage.inputTokens!, s.usage.outputTokens!), 0);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });
});

describe("LangChain's ChatOpenAI", () => {
  const chat = (token: string) => new ChatOpenAI({ model: MODEL, apiKey: token, configuration: { baseURL: `${gw.url}/v1` }, maxRetries: 0 });

  it('invoke, stream and bindTools: the answers and the tool call, and the ledger equals their usage × price', async () => {
    const u = await user();
    const invoked = await chat(u.token).invoke('hi [[words:4]]');
    expect(invoked.content).toBe('word1 word2 word3 word4');
    let streamedText = '';
    let streamedUsage: { input_tokens: number; output_tokens: number } | undefined;
    for await (const chunk of await chat(u.token).stream('stream [[words:3]]')) {
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
    const called = await withTools.invoke('Weather? [[tool:get_weather {"city":"Lyon"}]]');
    expect(called.tool_calls).toEqual([expect.objectContaining({ name: 'get_weather', args: { city: 'Lyon' } })]);

    const usages = [invoked.usage_metadata!, streamedUsage!, called.usage_metadata!];
    for (const usage of usages) expect(usage).toBeDefined();
    const spent = usages.reduce((sum, m) => sum + priced(m.input_tokens, m.output_tokens), 0);
    expect(await u.ledger()).toEqual({ used: spent, reserved: 0, openHolds: 0 });
  });
});
