import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { resetInstanceState } from '../../lambdas/instance/state.ts';
import { PROJECT_KEY_PROVIDERS, PROVIDER_IDS, PROVIDER_LABELS, type ProviderId } from '../../lambdas/routing/provider-ids.ts';
import { PROVIDERS, providerFor } from '../../lambdas/providers/index.ts';
import { keyCipher } from '../../lambdas/registry/key-cipher.ts';
import { Project, PROVIDERS_WITH_PROJECT_KEYS } from '../../lambdas/registry/model.ts';
import { routeModel } from '../../lambdas/routing/route.ts';

describe('routeModel', () => {
  it.each(['claude-sonnet-4-6', 'claude-opus-4-1-20250805', 'claude-3-5-haiku-latest', 'claude-x'])('%s → Anthropic, name unchanged', (model) => {
    expect(routeModel(model)).toEqual({ provider: 'anthropic', upstreamModel: model });
  });

  it.each(['gpt-4o', 'gpt-5-mini', 'chatgpt-4o-latest', 'o1', 'o1-mini', 'o3', 'o3-mini', 'o4-mini'])('%s → OpenAI, name unchanged', (model) => {
    expect(routeModel(model)).toEqual({ provider: 'openai', upstreamModel: model });
  });

  it.each([
    ['or:meta-llama/llama-3.3-70b-instruct', 'meta-llama/llama-3.3-70b-instruct'],
    ['or:openai/gpt-4o', 'openai/gpt-4o'],
    // The prefix wins over the family: these go to OpenRouter, not to Anthropic or OpenAI.
    ['or:claude-x', 'claude-x'],
    ['or:gpt-4o', 'gpt-4o'],
    // Only the first `or:` is the gateway's; the rest is the upstream's name.
    ['or:or:x', 'or:x'],
  ])('%s → OpenRouter, asked for %s', (model, upstreamModel) => {
    expect(routeModel(model)).toEqual({ provider: 'openrouter', upstreamModel });
  });

  it.each([
    'meta-llama/llama-3.3-70b-instruct',
    'mistralai/mistral-large',
    // Not a family prefix: the dash (claude-, gpt-, chatgpt-) or the exact o-series digit is required.
    'claude',
    'claude3-opus',
    'gpt4',
    'o2-mini',
    'o5',
    // Prefixes are case-sensitive, the `or:` prefix included.
    'Claude-sonnet-4-6',
    'GPT-4o',
    'OR:x',
  ])('%s → OpenRouter, name unchanged', (model) => {
    expect(routeModel(model)).toEqual({ provider: 'openrouter', upstreamModel: model });
  });
});

describe('providers: one per id', () => {
  it('PROVIDERS has exactly the ids of PROVIDER_IDS, each provider under its own id, each with a label', () => {
    expect(Object.keys(PROVIDERS).sort()).toEqual([...PROVIDER_IDS].sort());
    for (const id of PROVIDER_IDS) {
      expect(providerFor(id)).toBe(PROVIDERS[id]);
      expect(providerFor(id).id).toBe(id);
      expect(PROVIDER_LABELS[id]).toMatch(/\S/);
    }
  });

  it('the providers that use a project key are exactly PROJECT_KEY_PROVIDERS, the list the project record stores keys for', () => {
    const projectKeyed = PROVIDER_IDS.filter((id) => providerFor(id).usesProjectKey);
    expect(projectKeyed).toEqual([...PROJECT_KEY_PROVIDERS]);
    expect([...PROVIDERS_WITH_PROJECT_KEYS]).toEqual([...PROJECT_KEY_PROVIDERS]);
  });

  it('every route names a provider that exists', () => {
    for (const model of ['claude-sonnet-4-6', 'gpt-4o', 'or:x', 'anything']) expect(PROVIDERS[routeModel(model).provider]).toBeDefined();
  });
});

/** Sets (or, with undefined, removes) environment variables and makes env() read them again; returns the undo. */
function withEnv(vars: Record<string, string | undefined>): () => void {
  const saved = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  const apply = (values: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries(values)) {
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
    }
    resetInstanceState();
  };
  apply(vars);
  return () => apply(saved);
}

describe('providers: wiring from the environment', () => {
  let undo: (() => void) | undefined;
  afterEach(() => {
    undo?.();
    undo = undefined;
  });

  const BASE_URL_VARIABLE: Record<ProviderId, string> = {
    anthropic: 'ANTHROPIC_BASE_URL',
    openai: 'OPENAI_BASE_URL',
    openrouter: 'OPENROUTER_BASE_URL',
  };

  it('baseUrl() is the provider’s *_BASE_URL setting, read again after a reset', () => {
    undo = withEnv({
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:1/anthropic',
      OPENAI_BASE_URL: 'http://127.0.0.1:1/openai/v1',
      OPENROUTER_BASE_URL: 'http://127.0.0.1:1/openrouter/api/v1',
    });
    expect(providerFor('anthropic').baseUrl()).toBe('http://127.0.0.1:1/anthropic');
    expect(providerFor('openai').baseUrl()).toBe('http://127.0.0.1:1/openai/v1');
    expect(providerFor('openrouter').baseUrl()).toBe('http://127.0.0.1:1/openrouter/api/v1');

    process.env[BASE_URL_VARIABLE.openai] = 'http://127.0.0.1:2/v1';
    resetInstanceState();
    expect(providerFor('openai').baseUrl()).toBe('http://127.0.0.1:2/v1');
  });

  it('baseUrl() defaults to the public APIs', () => {
    undo = withEnv(Object.fromEntries(Object.values(BASE_URL_VARIABLE).map((name) => [name, undefined])));
    expect(providerFor('anthropic').baseUrl()).toBe('https://api.anthropic.com');
    expect(providerFor('openai').baseUrl()).toBe('https://api.openai.com/v1');
    expect(providerFor('openrouter').baseUrl()).toBe('https://openrouter.ai/api/v1');
  });

  describe('credential()', () => {
    const dir = mkdtempSync(join(tmpdir(), 'route-test-'));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));

    const project = (providerKeys: Record<string, string> = {}): Project =>
      Project.parse({
        projectId: 'proj-route-test',
        developerId: 'dev-route-test',
        secret: 's'.repeat(32),
        providerKeys,
        createdAt: '2025-01-01T00:00:00.000Z',
      });

    it('Anthropic: the service key, whatever the project', async () => {
      undo = withEnv({ ANTHROPIC_API_KEY: 'sk-ant-service', ANTHROPIC_API_KEY_SECRET_ARN: undefined });
      expect(await providerFor('anthropic').credential(project())).toBe('sk-ant-service');
      expect(await providerFor('anthropic').credential(project({ openai: 'ignored' }))).toBe('sk-ant-service');
    });

    it('OpenAI and OpenRouter: the project’s own key, decrypted; undefined when the project has none', async () => {
      undo = withEnv({ PROVIDER_KEYS_KMS_KEY_ID: undefined, PROVIDER_KEYS_LOCAL_KEY_FILE: join(dir, 'provider-keys.key') });
      const context = { projectId: 'proj-route-test' };
      const withKeys = project({
        openai: await keyCipher().encrypt('sk-openai-project', context),
        openrouter: await keyCipher().encrypt('sk-or-project', context),
      });
      expect(await providerFor('openai').credential(withKeys)).toBe('sk-openai-project');
      expect(await providerFor('openrouter').credential(withKeys)).toBe('sk-or-project');
      expect(await providerFor('openai').credential(project())).toBeUndefined();
      expect(await providerFor('openrouter').credential(project({ openai: withKeys.providerKeys.openai! }))).toBeUndefined();
    });
  });
});
