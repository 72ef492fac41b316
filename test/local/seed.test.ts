import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureDevelopmentProject, placeholderKey } from '../../bin/local/seed.ts';
import { getProject, providerKeyFor, setProviderKey } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/** Simulated mode is complete: the development project can use GPT and OpenRouter names without setting keys. */
let gw: TestGateway;
const dataDir = mkdtempSync(join(tmpdir(), 'seed-'));
beforeAll(async () => {
  process.env.DATA_DIR = dataDir;
  gw = await startTestGateway();
});
afterAll(async () => {
  delete process.env.DATA_DIR;
  await gw?.stop();
  rmSync(dataDir, { recursive: true, force: true });
});

const ask = (token: string, model: string) =>
  fetch(`${gw.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': token, 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 16, messages: [{ role: 'user', content: 'hi' }] }),
  });

describe('development project', () => {
  it('with simulated upstreams, every route works out of the box (placeholder OpenAI and OpenRouter keys)', async () => {
    const dev = await ensureDevelopmentProject({ simulated: true });
    for (const model of ['claude-sonnet-4-6', 'gpt-4o', 'or:openai/gpt-4o']) {
      const res = await ask(dev.token, model);
      expect(res.status, model).toBe(200);
      expect(((await res.json()) as { model: string }).model).toBe(model);
    }
  });

  it('against real upstreams the placeholders are removed, and a key the developer set is kept', async () => {
    await setProviderKey('dev-project', 'openrouter', 'sk-or-real');
    await ensureDevelopmentProject({ simulated: false });
    const project = (await getProject('dev-project'))!;
    expect(await providerKeyFor(project, 'openai')).toBeUndefined();
    expect(await providerKeyFor(project, 'openrouter')).toBe('sk-or-real');
    // and back in simulated mode only the missing one is filled in
    await ensureDevelopmentProject({ simulated: true });
    const again = (await getProject('dev-project'))!;
    expect(await providerKeyFor(again, 'openai')).toBe(placeholderKey('openai'));
    expect(await providerKeyFor(again, 'openrouter')).toBe('sk-or-real');
  });
});
