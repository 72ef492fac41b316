import type Anthropic from '@anthropic-ai/sdk';
import fc from 'fast-check';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import type { BudgetClaim, Caller } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { worstCaseMicros, worstCaseOf } from '../../lambdas/metering/reservation.ts';
import type { StreamEvent } from '../../lambdas/metering/accumulator.ts';
import { countTokens, meteredCall, type ModelCall } from '../../lambdas/metering/call.ts';
import { charge, priceFor } from '../../lambdas/pricing/prices.ts';
import { PROVIDERS } from '../../lambdas/providers/index.ts';
import type { MessagesRequest, ProviderRequest } from '../../lambdas/providers/types.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * The metered model call, called directly (no HTTP): for Claude and for a GPT model, a JSON and a streamed answer are
 * reserved at their worst case while in flight, settled at tokens × price, and — for streams — accumulated into the
 * full message, tool_use blocks and their parsed input included.
 */
const CLAUDE = 'claude-sonnet-4-6';
const GPT = 'gpt-4.1';
let gw: TestGateway;
let seq = 0;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-test-openai');
});
afterAll(async () => {
  await gw?.stop();
});

function caller(ai = 10_000_000): Caller {
  const budget: BudgetClaim = { ai, compute: 0, window: 'day' };
  return { projectId: gw.projectId, userId: `call-${++seq}`, budget, expiresAt: Math.floor(Date.now() / 1000) + 3600 };
}

const usageOf = (c: Caller) => readUsage(c);

function ask(model: string, text: string, extra: Partial<MessagesRequest> = {}): MessagesRequest {
  return {
    model,
    max_tokens: 300,
    messages: [{ role: 'user', content: text }],
    tools: [{ name: 'get_weather', description: 'Weather of a city', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }],
    ...extra,
  } as MessagesRequest;
}

async function drain(body: ReadableStream<Uint8Array>): Promise<string> {
  return new Response(body).text();
}

function okCall(call: ModelCall): Extract<ModelCall, { ok: true }> {
  if (!call.ok) throw new Error(`refused: ${JSON.stringify(call.refusal)}`);
  return call;
}

describe.each([
  { label: 'Claude (pass-through)', model: CLAUDE, provider: 'anthropic' as const },
  { label: 'GPT (translated)', model: GPT, provider: 'openai' as const },
])('$label', ({ model, provider }) => {
  const pricing = () => priceFor(model, provider)!;

  it('JSON: the worst case is held while the provider works, then exactly tokens × price is settled', async () => {
    const c = caller();
    const body = ask(model, 'Weather? [[tool:get_weather {"city":"Paris"}]] [[latency:300]]');
    const pending = meteredCall({ caller: c, body });
    // Mid-call, the ledger holds the request's worst case.
    const worst = worstCaseMicros(worstCaseOf(pricing(), body, 0), body.max_tokens);
    await expect.poll(async () => (await usageOf(c)).reserved.ai, { timeout: 2_000, interval: 20 }).toBe(worst);

    const call = okCall(await pending);
    if (call.kind !== 'message') throw new Error('expected a message');
    const tool = call.message.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    expect(tool?.name).toBe('get_weather');
    expect(tool?.input).toEqual({ city: 'Paris' });
    expect(call.message.model).toBe(model);
    const expected = charge(pricing(), call.message.usage).microdollars;
    expect(call.charge.microdollars).toBe(expected);
    expect(call.charge.remaining).toBe(c.budget.ai - expected);
    // Known before it is written: the settlement waits for its caller (the proxy: once the answer is delivered).
    expect((await usageOf(c)).reserved.ai).toBe(worst);
    await call.settle();
    await call.settle(); // once, however often it is asked for
    const usage = await usageOf(c);
    expect(usage.used.ai).toBe(expected);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it('stream: bytes pass through, the message is accumulated once (text + tool_use input), and the charge is settled', async () => {
    const c = caller();
    const body = ask(model, 'Weather? [[words:3]] [[tool:get_weather {"city":"Oslo","days":2}]]', { stream: true });
    const call = okCall(await meteredCall({ caller: c, body }));
    if (call.kind !== 'stream') throw new Error('expected a stream');
    const seen: StreamEvent['type'][] = [];
    call.stream.accumulator.onEvent((e) => seen.push(e.type));
    const sse = await drain(call.stream.body);
    expect(sse).toContain('event: message_start');
    const settled = await call.stream.settled;

    const message = call.stream.accumulator.message()!;
    expect(message.model).toBe(model);
    expect(message.stop_reason).toBe('tool_use');
    const text = message.content.find((b): b is Anthropic.TextBlock => b.type === 'text');
    expect(text?.text).toBe('word1 word2 word3');
    const tool = message.content.find((b): b is Anthropic.ToolUseBlock => b.type === 'tool_use');
    expect(tool?.input).toEqual({ city: 'Oslo', days: 2 });
    expect(seen[0]).toBe('message_start');
    expect(seen.at(-1)).toBe('message_stop');

    const tokens = call.stream.accumulator.tokens(0, body.max_tokens);
    expect(tokens.output_tokens).toBe(3 + Math.ceil(JSON.stringify({ city: 'Oslo', days: 2 }).length / 4));
    const expected = charge(pricing(), tokens).microdollars;
    expect(settled.microdollars).toBe(expected);
    expect(settled.tokens).toEqual(tokens);
    const usage = await usageOf(c);
    expect(usage.used.ai).toBe(expected);
    expect(usage.reserved.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it("stream: the caller's abort stops the provider mid-answer and charges what was produced", async () => {
    const c = caller();
    const body = ask(model, '[[words:200]] [[delay:20]]', { stream: true, max_tokens: 1000 });
    const abort = new AbortController();
    const call = okCall(await meteredCall({ caller: c, body, signal: abort.signal }));
    if (call.kind !== 'stream') throw new Error('expected a stream');
    let deltas = 0;
    call.stream.accumulator.onEvent((e) => {
      if (e.type === 'content_block_delta' && ++deltas === 5) abort.abort();
    });
    await drain(call.stream.body);
    const settled = await call.stream.settled;
    const text = call.stream.accumulator.message()!.content.find((b): b is Anthropic.TextBlock => b.type === 'text')!.text;
    expect(text.split(' ').length).toBeLessThan(200);
    expect(settled.tokens!.output_tokens).toBeLessThan(200);
    expect(settled.tokens!.output_tokens).toBeGreaterThanOrEqual(5);
    const usage = await usageOf(c);
    expect(usage.used.ai).toBe(settled.microdollars);
    expect(usage.reserved.ai).toBe(0);
  });
});

describe('refusals, typed and before any money', () => {
  it('an unpriced model', async () => {
    const call = await meteredCall({ caller: caller(), body: ask('claude-unknown-model-x', 'hi') });
    expect(call.ok).toBe(false);
    if (!call.ok) expect(call.refusal).toMatchObject({ kind: 'unpriced_model', model: 'claude-unknown-model-x' });
  });

  it('a provider whose key the project has not set', async () => {
    const c = caller();
    const call = await meteredCall({ caller: c, body: ask('mistralai/mistral-large', 'hi') });
    expect(call.ok).toBe(false);
    if (!call.ok) expect(call.refusal).toMatchObject({ kind: 'missing_provider_key', provider: 'openrouter', projectId: gw.projectId });
    expect((await usageOf(c)).openHolds).toBe(0);
  });

  it('a budget that is spent: budget_exhausted with both meters’ figures', async () => {
    const c = caller(1);
    const call = await meteredCall({ caller: c, body: ask(CLAUDE, 'hi') });
    expect(call.ok).toBe(false);
    if (!call.ok) {
      expect(call.refusal.kind).toBe('budget_exhausted');
      if (call.refusal.kind === 'budget_exhausted') {
        expect(call.refusal.budget.ai).toEqual({ used: 0, remaining: 1, budget: 1 });
        expect(call.refusal.retryAfterSeconds).toBeGreaterThan(0);
      }
    }
  });

  it('an upstream failure is an `upstream` refusal and releases the hold at no charge', async () => {
    const c = caller();
    const call = await meteredCall({ caller: c, body: ask(CLAUDE, '[[error:529]]') });
    expect(call.ok).toBe(false);
    if (!call.ok) expect(call.refusal).toMatchObject({ kind: 'upstream', status: 529, body: { type: 'error', error: { type: 'overloaded_error' } } });
    const usage = await usageOf(c);
    expect(usage.used.ai).toBe(0);
    expect(usage.openHolds).toBe(0);
  });

  it('count_tokens shares the routing and credential, and needs no price', async () => {
    const counted = await countTokens({ caller: caller(), body: ask('claude-unknown-model-x', 'hello') });
    expect(counted.ok).toBe(true);
  });
});

/**
 * A model call that is never sent is never charged: whatever throws between the reservation and the provider's answer
 * releases the hold at once (settled at 0), not left for the sweep to charge at its worst case. Failures are injected
 * at each step — the body's serialisation (a real one: a tool schema 5,000 levels deep, which JSON.stringify cannot
 * write), building the provider's request (its base URL), the provider's translation before anything is written to the
 * socket (OpenAI: reading the Anthropic body throws), the send itself (synchronously, or as a rejection) — for each
 * provider, JSON and streamed.
 */
describe('a failure between the reservation and the send', () => {
  afterEach(() => {
    vi.restoreAllMocks();
  });

  /** An input_schema nesting `levels` objects: `properties.a` inside `properties.a` … */
  function deepSchema(levels: number): Record<string, unknown> {
    let schema: Record<string, unknown> = { type: 'string' };
    for (let i = 0; i < levels; i++) schema = { type: 'object', properties: { a: schema } };
    return schema;
  }

  const STEPS = ['stringify', 'provider request', 'translation', 'send throws', 'send rejects'] as const;
  type Step = (typeof STEPS)[number];

  /** Arms the failure at `step` for a call to `model`; returns the body to send. */
  function inject(step: Step, provider: 'anthropic' | 'openai', body: MessagesRequest): MessagesRequest {
    const target = PROVIDERS[provider];
    const failure = new Error(`injected failure at ${step}`);
    switch (step) {
      case 'stringify':
        return { ...body, tools: [{ name: 'deep', description: 'A schema too deep to serialise', input_schema: deepSchema(5_000) }] } as MessagesRequest;
      case 'provider request':
        vi.spyOn(target, 'baseUrl').mockImplementation(() => {
          throw failure;
        });
        return body;
      case 'translation': {
        const send = target.send.bind(target);
        vi.spyOn(target, 'send').mockImplementation((req: ProviderRequest) => {
          // The translation reads the request's messages first: the throw happens inside it, before any socket write.
          const poisoned = new Proxy(req.body, {
            get(t, key, receiver) {
              if (key === 'messages') throw failure;
              return Reflect.get(t, key, receiver);
            },
          });
          return send({ ...req, body: poisoned, rawBody: 'not sent' });
        });
        return body;
      }
      case 'send throws':
        vi.spyOn(target, 'send').mockImplementation(() => {
          throw failure;
        });
        return body;
      case 'send rejects':
        vi.spyOn(target, 'send').mockImplementation(async () => {
          throw failure;
        });
        return body;
    }
  }

  it('releases the hold at once and charges nothing, at every step, for every provider, JSON and streamed', async () => {
    // The simulated upstreams must receive nothing: the failure is always before the socket write.
    const before = gw.upstreams.anthropic!.requests.length + gw.upstreams.openai!.requests.length;
    await fc.assert(
      fc.asyncProperty(
        // Anthropic is passed through: it has no translation step.
        fc.constantFrom(
          ...STEPS.flatMap((step) =>
            (step === 'translation' ? [GPT] : [CLAUDE, GPT]).map((model) => ({
              step,
              model,
              provider: model === GPT ? ('openai' as const) : ('anthropic' as const),
            })),
          ),
        ),
        fc.boolean(),
        async ({ step, model, provider }, stream) => {
          vi.restoreAllMocks();
          const c = caller();
          const body = inject(step, provider, ask(model, 'hi', stream ? { stream: true } : {}));
          await expect(meteredCall({ caller: c, body })).rejects.toThrow();
          vi.restoreAllMocks();
          // At once: the call's own settlement has been written when it throws.
          const usage = await usageOf(c);
          expect({ used: usage.used.ai, reserved: usage.reserved.ai, openHolds: usage.openHolds }).toEqual({ used: 0, reserved: 0, openHolds: 0 });
        },
      ),
      { numRuns: 30 },
    );
    expect(gw.upstreams.anthropic!.requests.length + gw.upstreams.openai!.requests.length).toBe(before);
  });
});
