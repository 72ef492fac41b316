import { createHash } from 'node:crypto';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  buildReplyPlan,
  estimateInputTokens,
  lastUserTextAnthropic,
  lastUserTextOpenAI,
  parseDirectives,
  type RecordedRequest,
} from '../../bin/local/upstreams/script.ts';
import { COMMANDS } from '../../bin/cli/commands.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { charge, priceFor, type PriceProvider } from '../../lambdas/pricing/prices.ts';
import { createProject, removeDeploymentPrice } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import {
  CLAUDE_CODE_VERSION,
  runClaude,
  scrubCapture,
  startEgressTrap,
  startRecordingFront,
  type CapturedRequest,
  type EgressTrap,
  type RecordingFront,
} from './claude-code-harness.ts';

/**
 * The real Claude Code CLI, headless (`claude -p hi --output-format json`), through the gateway to the simulated
 * upstreams: its default model, the `sonnet` alias and a GPT model, then a tool round trip (ToolSearch) on a Claude
 * and a GPT model. Each run must succeed with no other network traffic, every request it made must be accounted for,
 * and the gateway's charge must be exactly the tokens Claude Code reports × the gateway's own price table (not
 * Claude Code's `total_cost_usd`, which uses its built-in prices).
 *
 * The requests it sends are also checked against test/clients/fixtures/claude-code-requests.json, the capture the
 * replay test (test/proxy/claude-code-shape.test.ts) sends with the SDK; UPDATE_CLAUDE_CODE_FIXTURE=1 rewrites it
 * from this run (after a Claude Code upgrade).
 */

const FIXTURE = new URL('./fixtures/claude-code-requests.json', import.meta.url);
const UPDATE = process.env.UPDATE_CLAUDE_CODE_FIXTURE === '1';
const PINNED_VERSION = '2.1.330';

interface Fixture {
  claudeCodeVersion: string;
  note: string;
  requests: CapturedRequest[];
}

interface Run {
  name: string;
  prompt: string;
  args: string[];
  /** The model Claude Code resolves the choice to (the default and the alias are Claude Code's own, per version). */
  model: string;
  provider: PriceProvider;
  /** Model calls Claude Code makes: one, or two when the simulated model first calls a tool. */
  calls: number;
  /** Whether the first request is kept in the fixture the replay test sends. */
  fixture: boolean;
}

/** Makes the simulated model call Claude Code's ToolSearch for the deferred WebFetch tool, then answer. */
const TOOL_SEARCH_PROMPT = 'find the web fetch tool [[tool:ToolSearch {"query":"select:WebFetch","max_results":5}]]';

const RUNS: Run[] = [
  { name: 'claude -p hi', prompt: 'hi', args: [], model: 'claude-opus-5-5', provider: 'anthropic', calls: 1, fixture: true },
  {
    name: 'claude -p hi --model sonnet',
    prompt: 'hi',
    args: ['--model', 'sonnet'],
    model: 'claude-sonnet-5-5',
    provider: 'anthropic',
    calls: 1,
    fixture: true,
  },
  { name: 'claude -p hi --model gpt-4.1', prompt: 'hi', args: ['--model', 'gpt-4.1'], model: 'gpt-4.1', provider: 'openai', calls: 1, fixture: true },
  // A tool round trip: the system message is then in the middle of the conversation, and the tool search's answer
  // (a tool_reference block) must reach GPT as something it can read (it was a 400 before the translation mapped it).
  {
    name: 'claude -p <ToolSearch> (default model)',
    prompt: TOOL_SEARCH_PROMPT,
    args: [],
    model: 'claude-opus-5-5',
    provider: 'anthropic',
    calls: 2,
    fixture: false,
  },
  {
    name: 'claude -p <ToolSearch> --model gpt-4.1',
    prompt: TOOL_SEARCH_PROMPT,
    args: ['--model', 'gpt-4.1'],
    model: 'gpt-4.1',
    provider: 'openai',
    calls: 2,
    fixture: false,
  },
];

let gw: TestGateway;
let trap: EgressTrap;
let front: RecordingFront;
const captured: CapturedRequest[] = [];
const fixture: Fixture | undefined = existsSync(FIXTURE) ? (JSON.parse(readFileSync(FIXTURE, 'utf8')) as Fixture) : undefined;

beforeAll(async () => {
  gw = await startTestGateway();
  await gw.setProviderKey('openai', 'sk-openai-project');
  trap = await startEgressTrap();
  front = await startRecordingFront(gw.url);
});

afterAll(async () => {
  if (UPDATE && captured.length === RUNS.filter((r) => r.fixture).length) {
    const out: Fixture = {
      claudeCodeVersion: CLAUDE_CODE_VERSION,
      note: 'Requests Claude Code sent to the gateway in test/clients/claude-code.test.ts (UPDATE_CLAUDE_CODE_FIXTURE=1); temporary paths, kernel release, date, device and session ids replaced by fixed stand-ins.',
      requests: captured,
    };
    writeFileSync(FIXTURE, `${JSON.stringify(out, null, 2)}\n`);
  }
  await front?.close();
  await trap?.close();
  await gw?.stop();
});

async function aiUsed(token: string): Promise<{ used: number; reserved: number }> {
  await gw.invocationsDone(); // an answer is delivered before its settlement is written
  const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status).toBe(200);
  const { ai } = (await res.json()) as { ai: { used: number; reserved: number } };
  return { used: ai.used, reserved: ai.reserved };
}

/**
 * The tokens the simulated upstream reports for a request it received: its input estimate over the body, and the
 * output of the reply it plans from the last user text (bin/local/upstreams/script.ts). No cache tokens: nothing
 * asks for them.
 */
function simulated(record: RecordedRequest, provider: PriceProvider): { input: number; output: number; lastUserText: string; reply: string } {
  const body = record.body as { max_tokens?: number; max_completion_tokens?: number };
  const lastUserText = provider === 'anthropic' ? lastUserTextAnthropic(body) : lastUserTextOpenAI(body);
  const plan = buildReplyPlan(parseDirectives(lastUserText), body.max_completion_tokens ?? body.max_tokens);
  return { input: estimateInputTokens(body), output: plan.outputTokens, lastUserText, reply: plan.text };
}

type ChatMessage = { role: string; content: unknown; tool_call_id?: string };
type CcMessage = { role: string; content: string | { type: string; text?: string }[] };

/** The text parts a translated Claude Code user turn carries (its text blocks, in order). */
const textParts = (m: CcMessage) => (m.content as { type: string; text?: string }[]).map((b) => ({ type: 'text', text: b.text }));
const joinedText = (m: CcMessage) => (typeof m.content === 'string' ? m.content : m.content.map((b) => b.text).join('\n\n'));

/**
 * What must stay the same between the fixture and a fresh capture on any machine: everything but the text of the
 * system prompt and messages (which names the working directory, the kernel and the date) and the user id.
 */
function shapeOf(c: CapturedRequest): unknown {
  const body = structuredClone(c.body) as Record<string, unknown>;
  const blankTexts = (content: unknown) =>
    typeof content === 'string' ? '<text>' : (content as Record<string, unknown>[]).map((b) => (typeof b.text === 'string' ? { ...b, text: '<text>' } : b));
  body.system = blankTexts(body.system);
  body.messages = (body.messages as Record<string, unknown>[]).map((m) => ({ ...m, content: blankTexts(m.content) }));
  body.metadata = '<metadata>';
  return { run: c.run, method: c.method, url: c.url, headers: c.headers, body };
}

describe(`Claude Code ${PINNED_VERSION} through the gateway`, () => {
  it('is the pinned version, the one the fixture was captured with', () => {
    expect(CLAUDE_CODE_VERSION).toBe(PINNED_VERSION);
    if (!UPDATE) expect(fixture?.claudeCodeVersion).toBe(PINNED_VERSION);
  });

  it.each(RUNS)(
    '$name: succeeds, every request accounted for, charged its reported tokens × the gateway price',
    async (run) => {
      const token = await gw.token({ user: `claude-code-${RUNS.indexOf(run)}` });
      expect(await aiUsed(token)).toEqual({ used: 0, reserved: 0 });
      const upstream = gw.upstreams[run.provider === 'anthropic' ? 'anthropic' : 'openai']!;
      const other = gw.upstreams[run.provider === 'anthropic' ? 'openai' : 'anthropic']!;
      upstream.requests.length = 0;
      other.requests.length = 0;
      front.records.length = 0;

      const started = Date.now();
      const result = await runClaude({ baseUrl: front.url, token, trapUrl: trap.url, prompt: run.prompt, args: run.args });
      const elapsed = Date.now() - started;

      // Every request Claude Code made to the gateway, with what the gateway answered (a refusal's body is shown):
      // no title or count_tokens calls, no retries.
      const calls = front.records.map((r) => `${r.method} ${r.url} → ${r.status}${r.errorBody ? ` ${r.errorBody}` : ''}`);
      expect(calls).toEqual(Array(run.calls).fill('POST /v1/messages?beta=true → 200'));
      expect(result.exitCode, result.stderr).toBe(0);
      expect(trap.attempts).toEqual([]);
      const out = result.json!;
      expect([out.type, out.subtype, out.is_error, out.api_error_status, out.num_turns]).toEqual(['result', 'success', false, null, run.calls]);
      expect(other.requests).toHaveLength(0);
      expect(upstream.requests).toHaveLength(run.calls);

      const sent = front.records.map((r) => JSON.parse(r.body) as { model: string; stream: boolean; messages: CcMessage[]; metadata: { user_id: string } });
      for (const [i, body] of sent.entries()) {
        const record = upstream.requests[i]!;
        expect(body.model).toBe(run.model);
        expect(body.stream).toBe(true);
        expect(front.records[i]!.headers.authorization).toBe(`Bearer ${token}`);
        // Claude Code puts a system message after the user's first turn: its mid-conversation system prompt.
        expect(body.messages.map((m) => m.role)).toEqual(i === 0 ? ['user', 'system'] : ['user', 'system', 'assistant', 'user']);
        if (run.provider === 'anthropic') {
          // Passed through: the same body (same byte count) and the same beta flags; the user's token stays behind.
          expect(record.path).toBe('/v1/messages');
          expect(record.body).toEqual(body);
          expect(Number(record.headers['content-length'])).toBe(Buffer.byteLength(front.records[i]!.body));
          expect(record.headers['anthropic-beta']).toBe(front.records[i]!.headers['anthropic-beta']);
          expect(record.headers['x-api-key']).toBe('sk-ant-simulated');
          expect(record.headers.authorization).toBeUndefined();
        } else {
          // Translated: the system prompt first, the user's turn, the mid-conversation system message where Claude
          // Code put it, and the ~150-character user id as its SHA-256.
          expect(record.path).toBe('/v1/chat/completions');
          const chat = record.body as { model: string; messages: ChatMessage[]; user: string; tools: { function: { name: string } }[] };
          expect(chat.model).toBe('gpt-4.1');
          const [ccUser, ccSystem] = body.messages;
          expect(chat.messages.slice(1, 3)).toEqual([
            { role: 'user', content: textParts(ccUser!) },
            { role: 'system', content: joinedText(ccSystem!) },
          ]);
          expect(chat.user).toBe(createHash('sha256').update(body.metadata.user_id).digest('hex'));
          expect(body.metadata.user_id.length).toBeGreaterThan(64);
          const toolNames = chat.tools.map((t) => t.function.name);
          if (i === 0) {
            expect(chat.messages.map((m) => m.role)).toEqual(['system', 'user', 'system']);
            // Deferred tools stay out until a tool search loads them.
            expect(toolNames).not.toContain('WebFetch');
          } else {
            // ToolSearch's tool_reference answer reaches GPT as a line, and WebFetch is now offered.
            expect(chat.messages.map((m) => m.role)).toEqual(['system', 'user', 'system', 'assistant', 'tool']);
            expect(chat.messages[4]).toEqual({ role: 'tool', tool_call_id: 'call_sim_1', content: 'Tool loaded: WebFetch' });
            expect(toolNames).toContain('WebFetch');
          }
          expect(toolNames).not.toContain('DeferredToolPlaceholder');
        }
      }

      // The tokens Claude Code reports are the upstream's, summed over its calls to the one model it used…
      const perCall = upstream.requests.map((r) => simulated(r, run.provider));
      const input = perCall.reduce((n, c) => n + c.input, 0);
      const output = perCall.reduce((n, c) => n + c.output, 0);
      expect(out.result).toBe(perCall.at(-1)!.reply);
      expect(perCall[0]!.lastUserText.endsWith(run.prompt)).toBe(true);
      expect(out.usage).toMatchObject({ input_tokens: input, output_tokens: output, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
      expect(out.modelUsage).toEqual({
        [run.model]: expect.objectContaining({ inputTokens: input, outputTokens: output, cacheReadInputTokens: 0, cacheCreationInputTokens: 0 }),
      });
      // …and the charge is exactly those tokens × the gateway's price for that model, each call rounded up once.
      const pricing = priceFor(run.model, run.provider);
      expect(pricing?.source).toBe('catalog');
      const expected = perCall.reduce((n, c) => n + charge(pricing!, { input_tokens: c.input, output_tokens: c.output }).microdollars, 0);
      expect(await aiUsed(token)).toEqual({ used: expected, reserved: 0 });

      if (run.fixture) {
        const capture = scrubCapture(run.name, front.records[0]!, result.home);
        captured.push(capture);
        if (!UPDATE) {
          const stored = fixture?.requests.find((r) => r.run === run.name);
          expect(stored && shapeOf(stored)).toEqual(shapeOf(capture));
        }
      }
      // Figures for the report (tokens, charge, time), printed once per run.
      console.log(
        JSON.stringify({
          run: run.name,
          model: run.model,
          calls: run.calls,
          input,
          output,
          gatewayMicros: expected,
          claudeCodeUsd: out.total_cost_usd,
          ms: elapsed,
        }),
      );
    },
    90_000,
  );
});

/**
 * Claude Code's `haiku` alias resolves to a model newer than the bundled price catalog: every project refused it
 * (`400 Model "claude-haiku-5-5" has no known price`, which Claude Code retried) until each was priced on its own.
 * One `gateway pricing set` now prices it for every project of the deployment (DESIGN §14, "Deployment-wide prices").
 */
describe(`Claude Code ${PINNED_VERSION} --model haiku, priced for the whole deployment`, () => {
  const HAIKU = 'claude-haiku-5-5';

  it('refused while unpriced; after gateway pricing set, served on two projects and charged the tokens × the set price', async () => {
    expect(priceFor(HAIKU, 'anthropic')).toBeUndefined(); // the premise: the bundled catalog lacks it
    const refused = await fetch(`${gw.url}/v1/messages`, {
      method: 'POST',
      headers: { 'x-api-key': await gw.token({ user: 'haiku-before' }), 'content-type': 'application/json' },
      body: JSON.stringify({ model: HAIKU, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toContain(`"gateway pricing set --model ${HAIKU}"`);

    // The operator's command, as the CLI runs it against this gateway's store.
    const set = await COMMANDS['pricing set']!.run(
      { model: HAIKU, 'input-usd-per-mtok': '1', 'output-usd-per-mtok': '5' },
      { connect: async () => ({ kind: 'local', secretCacheSeconds: 0 }) },
    );
    expect(set.data).toMatchObject({ model: HAIKU, price: { inputUsdPerMtok: 1, outputUsdPerMtok: 5 } });

    try {
      const other = await createProject({ developerId: gw.developerId });
      const tokens = [
        await gw.token({ user: 'haiku-1' }),
        await mintToken({
          projectId: other.projectId,
          userId: 'haiku-2',
          secret: other.secret,
          budget: { ai: 10_000_000, compute: 3600, window: 'day' },
          expiresInSeconds: 3600,
        }),
      ];
      const upstream = gw.upstreams.anthropic!;
      for (const token of tokens) {
        upstream.requests.length = 0;
        front.records.length = 0;
        const result = await runClaude({ baseUrl: front.url, token, trapUrl: trap.url, prompt: 'hi', args: ['--model', 'haiku'] });
        const calls = front.records.map((r) => `${r.method} ${r.url} → ${r.status}${r.errorBody ? ` ${r.errorBody}` : ''}`);
        expect(calls).toEqual(['POST /v1/messages?beta=true → 200']);
        expect(result.exitCode, result.stderr).toBe(0);
        expect(trap.attempts).toEqual([]);
        const out = result.json!;
        expect([out.type, out.subtype, out.is_error, out.api_error_status]).toEqual(['result', 'success', false, null]);

        // The captured request: Claude Code asked for claude-haiku-5-5, and that is what reached Anthropic, verbatim.
        const sent = JSON.parse(front.records[0]!.body) as { model: string };
        expect(sent.model).toBe(HAIKU);
        expect(upstream.requests).toHaveLength(1);
        expect(upstream.requests[0]!.body).toEqual(sent);

        // Charged exactly the tokens × the deployment price: $1/Mtok in, $5/Mtok out = 1 µ$ and 5 µ$ a token.
        const { input, output } = simulated(upstream.requests[0]!, 'anthropic');
        expect(out.modelUsage).toEqual({ [HAIKU]: expect.objectContaining({ inputTokens: input, outputTokens: output }) });
        expect(input).toBeGreaterThan(0);
        expect(await aiUsed(token)).toEqual({ used: input * 1 + output * 5, reserved: 0 });
      }
    } finally {
      await removeDeploymentPrice(HAIKU);
    }
  }, 120_000);
});
