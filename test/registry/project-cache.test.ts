import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { createProject, rotateProjectSecret } from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { countRegistryReads } from '../support/registry-reads.ts';

/**
 * Project records are cached for a minute (as a deployed stack does), yet a change the owner just made is never
 * refused: a signature failure, an unknown issuer or a missing key/price reads the record again before refusing —
 * at most once a second per project, so a flood of bad tokens stays a trickle of reads.
 */
let gw: TestGateway;
let registryReads: { count: number };
beforeAll(async () => {
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '60' } });
  registryReads = countRegistryReads(gw);
});
afterAll(async () => {
  await gw?.stop();
});

const budget = { ai: 1_000_000, compute: 10, window: 'day' as const };
const ask = (token: string, model = 'claude-sonnet-4-6') =>
  fetch(`${gw.url}/v1/messages`, {
    method: 'POST',
    headers: { 'x-api-key': token, 'content-type': 'application/json' },
    body: JSON.stringify({ model, max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }),
  });
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('project cache: changes take effect at once', () => {
  it('a project probed before it existed serves its tokens as soon as it is created', async () => {
    const projectId = `late-${Date.now()}`;
    const early = await mintToken({ projectId, userId: 'u', secret: 'x'.repeat(40), budget, expiresInSeconds: 600 });
    const probe = await ask(early);
    expect(probe.status).toBe(401);
    expect(((await probe.json()) as { error: { message: string } }).error.message).toBe('Token issuer is not a known project');
    await sleep(1_100);
    const project = await createProject({ developerId: gw.developerId, projectId });
    const token = await mintToken({ projectId, userId: 'u', secret: project.secret, budget, expiresInSeconds: 600 });
    expect((await ask(token)).status).toBe(200);
  });

  it('a provider key set a moment ago is used instead of refusing', async () => {
    const token = await gw.token({ user: 'keyless' });
    expect((await ask(token, 'gpt-4o')).status).toBe(400); // caches the project without an OpenAI key
    await sleep(1_100);
    await gw.setProviderKey('openai', 'sk-test');
    expect((await ask(token, 'gpt-4o')).status).toBe(200);
  });

  it('a flood of 200 bad-signature tokens costs at most a couple of registry reads', async () => {
    const good = await gw.token({ user: 'flood' });
    expect((await ask(good)).status).toBe(200);
    const forged = await mintToken({ projectId: gw.projectId, userId: 'flood', secret: 'f'.repeat(40), budget, expiresInSeconds: 600 });
    registryReads.count = 0;
    const statuses = await Promise.all(Array.from({ length: 200 }, () => ask(forged).then((r) => r.status)));
    expect(new Set(statuses)).toEqual(new Set([401]));
    expect(registryReads.count).toBeLessThanOrEqual(2);
  });

  // Last: gw.token() keeps signing with the original secret.
  it('a token signed with a just-rotated secret is accepted, and the old one refused', async () => {
    const old = await gw.token({ user: 'rotator' });
    expect((await ask(old)).status).toBe(200); // caches the old secret
    await sleep(1_100); // past the refresh rate limit
    const rotated = await rotateProjectSecret(gw.projectId);
    const fresh = await mintToken({ projectId: gw.projectId, userId: 'rotator', secret: rotated.secret, budget, expiresInSeconds: 600 });
    expect((await ask(fresh)).status).toBe(200);
    expect((await ask(old)).status).toBe(401);
  });
});
