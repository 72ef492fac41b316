import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/** GET /v1/models lists exactly what POST /v1/messages serves: every listed id is accepted, and nothing it refuses is listed. */
let gw: TestGateway;
beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

async function listAll(token: string): Promise<string[]> {
  const ids: string[] = [];
  for await (const m of gw.client(token).models.list({ limit: 1000 })) ids.push(m.id);
  return ids;
}

describe('GET /v1/models', () => {
  it('lists only Anthropic and custom models until the project has provider keys', async () => {
    await gw.setPricing('claude-house-1', { inputUsdPerMtok: 1, outputUsdPerMtok: 2 });
    const ids = await listAll(await gw.token({ user: 'lister' }));
    expect(ids[0]).toBe('claude-house-1');
    expect(ids).toContain('claude-sonnet-4-6');
    expect(ids.filter((id) => !id.startsWith('claude-') && id !== 'claude-house-1')).toEqual([]);
  });

  it('every listed id is accepted by POST /v1/messages (and the ids it used to list wrongly are gone)', async () => {
    await gw.setProviderKey('openai', 'sk-test-openai');
    await gw.setProviderKey('openrouter', 'sk-test-openrouter');
    const token = await gw.token({ user: 'prober', budget: { ai: 1_000_000_000 } });
    const ids = await listAll(token);
    expect(ids).toContain('gpt-4o');
    for (const refused of ['ada', 'davinci', 'babbage', 'curie']) expect(ids).not.toContain(refused);
    expect(ids.some((id) => id.startsWith('ft:'))).toBe(false);
    expect(ids.length).toBeGreaterThan(50);

    const refusedIds: string[] = [];
    const queue = [...ids];
    await Promise.all(
      Array.from({ length: 8 }, async () => {
        for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
          const res = await fetch(`${gw.url}/v1/messages`, {
            method: 'POST',
            headers: { 'x-api-key': token, 'content-type': 'application/json' },
            body: JSON.stringify({ model: id, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }] }),
          });
          if (res.status !== 200) refusedIds.push(`${id}: ${res.status} ${await res.text()}`);
          else await res.arrayBuffer();
        }
      }),
    );
    expect(refusedIds).toEqual([]);
    // Hundreds of listed models, each one request (reserved, answered, settled and counted in the activity).
  }, 90_000);

  it('answers both SDKs: each entry in both vocabularies; the OpenAI SDK gets every model in one page, the Anthropic SDK pages', async () => {
    const token = await gw.token({ user: 'both-sdks' });
    const anthropicIds = await listAll(token);
    const openai = new OpenAI({ baseURL: `${gw.url}/v1`, apiKey: token, maxRetries: 0 });
    const openaiIds: string[] = [];
    for await (const m of openai.models.list()) openaiIds.push(m.id);
    // The OpenAI SDK reads one page (OpenAI's list has no paging): it gets all of them, as the Anthropic SDK does in pages.
    expect(openaiIds).toEqual(anthropicIds);
    expect(openaiIds.length).toBeGreaterThan(20);

    const sonnet = await openai.models.retrieve('claude-sonnet-4-6');
    expect(sonnet).toEqual({
      type: 'model',
      object: 'model',
      id: 'claude-sonnet-4-6',
      display_name: expect.any(String),
      created_at: '1970-01-01T00:00:00Z',
      created: 0,
      owned_by: 'anthropic',
    });
    const viaAnthropic = await gw.client(token).models.retrieve('gpt-4o');
    expect(viaAnthropic).toMatchObject({ type: 'model', object: 'model', id: 'gpt-4o', owned_by: 'openai' });

    // The Anthropic SDK's default page (anthropic-version sent): 20, with its cursor fields and OpenAI's list marker.
    const res = await fetch(`${gw.url}/v1/models`, { headers: { 'x-api-key': token, 'anthropic-version': '2023-06-01' } });
    const page = (await res.json()) as { object: string; data: unknown[]; has_more: boolean; first_id: string; last_id: string };
    expect(page.object).toBe('list');
    expect(page.data).toHaveLength(20);
    expect(page).toMatchObject({ has_more: true, first_id: anthropicIds[0], last_id: anthropicIds[19] });
  });
});
