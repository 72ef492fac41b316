import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startOpenAIUpstream } from '../../../bin/local/upstreams/openai.ts';
import { THINKING_TEXT } from '../../../bin/local/upstreams/script.ts';
import type { SimulatedUpstream } from '../../../bin/local/upstreams/types.ts';
import { bodyFailure } from '../../../lambdas/providers/chat-completions/errors.ts';
import { reportedCostMicros } from '../../../lambdas/providers/openrouter/dialect.ts';
import { openrouterProvider } from '../../../lambdas/providers/openrouter/index.ts';
import type { MessagesRequest, ProviderRequest, ProviderResult } from '../../../lambdas/providers/types.ts';

let up: SimulatedUpstream;
beforeAll(async () => {
  up = await startOpenAIUpstream();
});
afterAll(() => up.close());
beforeEach(() => {
  up.requests.length = 0;
});

function say(text: string, fields: Record<string, unknown> = {}, over: Partial<ProviderRequest> = {}): ProviderRequest {
  const body = { model: 'or:meta-llama/llama-3.3-70b-instruct', max_tokens: 300, messages: [{ role: 'user', content: text }], ...fields } as MessagesRequest;
  return {
    body,
    rawBody: JSON.stringify(body),
    upstreamModel: body.model.replace(/^or:/, ''),
    baseUrl: `${up.url}/api/v1`,
    apiKey: 'sk-or-project',
    headers: {},
    signal: new AbortController().signal,
    timeoutMs: 5_000,
    ...over,
  };
}

function message(r: ProviderResult) {
  if (r.kind !== 'message') throw new Error(`expected a message, got ${JSON.stringify(r)}`);
  return r;
}

describe('reportedCostMicros', () => {
  it('turns usage.cost (USD) into microdollars, rounding up without float noise', () => {
    expect(reportedCostMicros({ cost: 0.0012 })).toBe(1200);
    expect(reportedCostMicros({ cost: 0.000001 * 3 })).toBe(3); // 3.0000000000000004 µ$, not 4
    expect(reportedCostMicros({ cost: 0.0000015 })).toBe(2);
    expect(reportedCostMicros({ cost: 0 })).toBe(0);
    expect(reportedCostMicros({ prompt_tokens: 1 })).toBeUndefined();
    expect(reportedCostMicros({ cost: -1 })).toBeUndefined();
    expect(reportedCostMicros(null)).toBeUndefined();
  });
});

describe('openrouterProvider', () => {
  it('sends the OpenAI translation to /api/v1 with the stripped model, usage accounting and reasoning.max_tokens', async () => {
    const r = message(
      await openrouterProvider.send(say('Hi [[words:3]]', { system: 'S', thinking: { type: 'enabled', budget_tokens: 2048 }, temperature: 0.7 })),
    );
    expect(r.message.model).toBe('or:meta-llama/llama-3.3-70b-instruct');
    const rec = up.requests[0]!;
    expect(rec.path).toBe('/api/v1/chat/completions');
    expect(rec.headers.authorization).toBe('Bearer sk-or-project');
    expect(rec.body).toEqual({
      model: 'meta-llama/llama-3.3-70b-instruct',
      messages: [
        { role: 'system', content: 'S' },
        { role: 'user', content: 'Hi [[words:3]]' },
      ],
      temperature: 0.7,
      max_tokens: 300,
      reasoning: { max_tokens: 2048 },
      usage: { include: true },
      stream: false,
    });
  });

  it('keeps max_tokens and sampling for OpenAI reasoning models too (OpenRouter normalises them)', async () => {
    await openrouterProvider.send(say('x', { model: 'or:openai/o3-mini', temperature: 0.1 }, { upstreamModel: 'openai/o3-mini' }));
    expect(up.requests[0]!.body).toMatchObject({ model: 'openai/o3-mini', max_tokens: 300, temperature: 0.1 });
    expect(up.requests[0]!.body).not.toHaveProperty('max_completion_tokens');
  });

  it('reports usage.cost as reportedCostMicros, and reads reasoning from `reasoning`', async () => {
    const r = message(await openrouterProvider.send(say('Hi [[thinking]] [[cost:0.004321]]')));
    expect(r.reportedCostMicros).toBe(4321);
    expect(r.message.content[0]).toEqual({ type: 'thinking', thinking: THINKING_TEXT, signature: '' });
    const none = message(await openrouterProvider.send(say('Hi')));
    expect(none).not.toHaveProperty('reportedCostMicros');
  });

  it('reports the streamed cost once the stream has ended', async () => {
    const r = await openrouterProvider.send(say('Hi [[words:4]] [[cost:0.0000025]]', { stream: true }));
    if (r.kind !== 'stream') throw new Error('expected a stream');
    expect(r.reportedCostMicros?.()).toBeUndefined();
    const text = await new Response(r.body).text();
    expect(text).toContain('"text":"word4"');
    expect(text.endsWith('event: message_stop\ndata: {"type":"message_stop"}\n\n')).toBe(true);
    expect(r.reportedCostMicros?.()).toBe(3);
    expect((up.requests[0]!.body as Record<string, unknown>).usage).toEqual({ include: true });
  });

  it('has no reported cost for a stream that broke before its usage chunk', async () => {
    const r = await openrouterProvider.send(say('Hi [[words:4]] [[cost:0.5]] [[stream-error-after:2]]', { stream: true }));
    if (r.kind !== 'stream') throw new Error('expected a stream');
    const text = await new Response(r.body).text();
    expect(
      text.endsWith(
        'event: error\ndata: {"type":"error","error":{"type":"api_error","message":"OpenRouter failed mid-stream: Upstream failure mid-stream"}}\n\n',
      ),
    ).toBe(true);
    expect(r.reportedCostMicros?.()).toBeUndefined();
  });

  it('maps OpenRouter errors with its own name', async () => {
    expect(await openrouterProvider.send(say('x [[error:429]]'))).toEqual({
      kind: 'error',
      status: 429,
      body: { type: 'error', error: { type: 'rate_limit_error', message: 'OpenRouter is rate limiting requests: Simulated upstream error (HTTP 429)' } },
    });
    expect(await openrouterProvider.send(say('x [[error:402]]'))).toEqual({
      kind: 'error',
      status: 500,
      body: { type: 'error', error: { type: 'api_error', message: 'OpenRouter failed with HTTP 402: Simulated upstream error (HTTP 402)' } },
    });
  });

  it('treats a 200 answer whose body is an error as that error', async () => {
    expect(bodyFailure('openrouter', { code: 502, message: 'Provider returned error' })).toEqual({
      kind: 'error',
      status: 500,
      body: { type: 'error', error: { type: 'api_error', message: 'OpenRouter failed with HTTP 502: Provider returned error' } },
    });
    const server = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: { code: 429, message: 'Upstream provider rate limited' }, user_id: 'u' }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const r = await openrouterProvider.send(say('x', {}, { baseUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/v1` }));
      expect(r).toEqual({
        kind: 'error',
        status: 429,
        body: { type: 'error', error: { type: 'rate_limit_error', message: 'OpenRouter is rate limiting requests: Upstream provider rate limited' } },
      });
    } finally {
      await new Promise((resolve) => server.close(resolve));
    }
  });
});
