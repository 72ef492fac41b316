import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeJwt } from 'jose';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { MAX_REVOCATIONS } from '../../lambdas/registry/model.ts';
import { clock } from '../../lambdas/config/clock.ts';
import { getProject, RegistryError, revokeToken, revokeUserTokens, setUserBlocked } from '../../lambdas/registry/registry.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import { UpdateCommand } from '@aws-sdk/lib-dynamodb';
import { getVessel } from '../../lambdas/vessels/store.ts';
import { setClock } from '../support/clock.ts';
import { connectWs } from '../support/ws.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { countRegistryReads } from '../support/registry-reads.ts';

/**
 * Revocation without rotating the secret (DESIGN §10; lambdas/auth/revocations.ts): one token, a user blocked and
 * unblocked, a user's tokens revoked up to a moment. Each takes effect within SECRET_CACHE_SECONDS — measured here on
 * a gateway that keeps projects 60 s, with the clock moved — and costs no registry read per request.
 */
const BUDGET = { ai: 5_000_000, compute: 600, window: 'day' as const };
const MESSAGE = { model: 'claude-sonnet-4-6', max_tokens: 16, messages: [{ role: 'user', content: 'Hello' }] };

let gw: TestGateway;
let registryReads: { count: number };
beforeAll(async () => {
  gw = await startTestGateway({ env: { SECRET_CACHE_SECONDS: '60' } });
  registryReads = countRegistryReads(gw);
});
afterAll(async () => {
  await gw?.stop();
});

const tokenOf = (user: string, opts: { now?: number; tokenId?: string } = {}) =>
  mintToken({ projectId: gw.projectId, userId: user, secret: gw.secret, budget: BUDGET, expiresInSeconds: 3600, ...opts });

/** Each route's answer to a token: status and the body's error code (or the proxy's error message). */
async function everyRoute(token: string) {
  const json = { 'content-type': 'application/json' };
  const bearer = { authorization: `Bearer ${token}` };
  const code = async (r: Response) => {
    const body = (await r.json()) as { error?: string | { message: string }; message?: string };
    return {
      status: r.status,
      error: typeof body.error === 'object' ? body.error.message : body.error,
      ...(r.status === 401 ? { message: body.message } : {}),
    };
  };
  return {
    messages: await code(await fetch(`${gw.url}/v1/messages`, { method: 'POST', headers: { ...json, 'x-api-key': token }, body: JSON.stringify(MESSAGE) })),
    usage: await code(await fetch(`${gw.url}/usage`, { headers: bearer })),
    prompt: await code(await fetch(`${gw.url}/prompt`, { method: 'POST', headers: json, body: JSON.stringify({ message: 'Hello', options: { token } }) })),
    incubate: await code(
      await fetch(`${gw.url}/incubate`, {
        method: 'POST',
        headers: json,
        body: JSON.stringify({ message: 'Hello', idempotencyKey: `r-${Math.random()}`, options: { token }, ttl: 3600 }),
      }),
    ),
  };
}

const served = { status: 200, error: undefined };
const allServed = { messages: served, usage: served, prompt: served, incubate: { status: 202, error: undefined } };
const revoked = (message: string) => ({
  messages: { status: 401, error: message },
  usage: { status: 401, error: 'token_revoked', message },
  prompt: { status: 401, error: 'token_revoked', message },
  incubate: { status: 401, error: 'token_revoked', message },
});

/**
 * Past SECRET_CACHE_SECONDS: every instance has read the project again. The clock only moves forward across the
 * file's tests (each starts with `resume()`): a cached record read at a later time would otherwise look fresh.
 */
let shift = 0;
/** Real time, whatever the clock says (Date itself is moved by setClock). */
const realNow = () => Math.round(performance.timeOrigin + performance.now());
const resume = () => setClock(realNow() + shift);
const pastTheCache = () => {
  shift += 61_000;
  return setClock(realNow() + shift);
};

describe('revocation', () => {
  it("one token: refused on every route once the cache turns over, the user's other token served, no registry read per request", async () => {
    const [first, second] = [await tokenOf('rev-one'), await tokenOf('rev-one')];
    expect(await everyRoute(first)).toEqual(allServed);
    registryReads.count = 0;
    for (let i = 0; i < 10; i++) expect((await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${second}` } })).status).toBe(200);
    expect(registryReads.count).toBe(0);

    const { jti, exp } = decodeJwt(first);
    await revokeToken(gw.projectId, jti!, exp!);
    // Within the cache time an instance may still serve it (the promise is SECRET_CACHE_SECONDS, as for a rotation).
    expect((await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${first}` } })).status).toBe(200);
    pastTheCache();
    expect(await everyRoute(first)).toEqual(revoked('Token revoked'));
    expect(await everyRoute(second)).toEqual(allServed);
    registryReads.count = 0;
    for (let i = 0; i < 10; i++) expect((await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${second}` } })).status).toBe(200);
    expect(registryReads.count).toBe(0);
  });

  it('a user blocked: every route refused, a vessel queued before ends FAILED error_token_revoked; unblocked: served at once', async () => {
    resume();
    const token = await tokenOf('rev-blocked');
    const queued = await fetch(`${gw.url}/incubate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        message: 'Hello',
        idempotencyKey: `blocked-later-${Math.random()}`,
        options: { token },
        executeAt: new Date(clock.now() + 3_000).toISOString(),
      }),
    });
    expect(queued.status).toBe(202);
    const { vesselId } = (await queued.json()) as { vesselId: string };

    await setUserBlocked(gw.projectId, 'rev-blocked', true);
    pastTheCache();
    const message = 'Token revoked: user rev-blocked is blocked by the project owner';
    expect(await everyRoute(token)).toEqual(revoked(message));
    expect(await everyRoute(await tokenOf('rev-blocked'))).toEqual(revoked(message));
    expect((await everyRoute(await tokenOf('rev-other'))).usage).toEqual(served);

    await expect.poll(async () => (await getVessel(vesselId))?.status, { timeout: 20_000, interval: 250 }).toBe('FAILED');
    const ended = await getVessel(vesselId);
    expect(ended?.attempts).toBe(0);
    expect(ended?.output).toMatchObject({ success: false, text: `The vessel could not run: ${message}`, result: { subtype: 'error_token_revoked' } });

    // An unblock needs no wait: a request the cached record refuses reads it again first.
    await setUserBlocked(gw.projectId, 'rev-blocked', false);
    await new Promise((r) => setTimeout(r, 1_100)); // past the refresh rate limit (one re-read a second per project)
    expect(await everyRoute(token)).toEqual(allServed);
  }, 60_000);

  it('an open /ws session of a blocked user is closed at its next frame, with a token_revoked error frame first', async () => {
    resume();
    const token = await tokenOf('rev-ws');
    const ws = await connectWs(gw.websocket!.url, token);
    ws.send({ type: 'session.start', options: {} });
    expect((await ws.next((f) => f.type === 'session')).resumed).toBe(false);
    await setUserBlocked(gw.projectId, 'rev-ws', true);
    pastTheCache();
    ws.send({ type: 'user', message: 'Hello' });
    const frame = await ws.next();
    expect({ type: frame.type, error: frame.error, message: frame.message }).toEqual({
      type: 'error',
      error: 'token_revoked',
      message: 'Token revoked: user rev-ws is blocked by the project owner',
    });
    expect((await ws.closed).code).toBe(1000);
  });

  it("a user's tokens revoked up to now: older ones refused, one issued after served", async () => {
    resume();
    const old = await tokenOf('rev-before');
    const before = Math.floor(clock.now() / 1000);
    await revokeUserTokens(gw.projectId, 'rev-before', before);
    const fresh = await tokenOf('rev-before', { now: (before + 1) * 1000 });
    pastTheCache();
    expect(await everyRoute(old)).toEqual(
      revoked(`Token revoked: tokens of user rev-before issued before ${new Date((before + 1) * 1000).toISOString()} are revoked`),
    );
    expect(await everyRoute(fresh)).toEqual(allServed);
  });

  it(`the record holds at most ${MAX_REVOCATIONS} revocations; expired token ids leave by themselves`, async () => {
    resume();
    const nowSeconds = Math.floor(clock.now() / 1000);
    // Revoked tokens that expired an hour ago, then one more: the write drops the expired ones first.
    for (let i = 0; i < 5; i++) await revokeToken(gw.projectId, `gone-${i}`, nowSeconds - 3600);
    await revokeToken(gw.projectId, 'live', nowSeconds + 3600);
    const project = await getProject(gw.projectId);
    expect(Object.keys(project?.revokedTokens ?? {}).filter((jti) => jti.startsWith('gone-'))).toEqual([]);
    expect(project?.revokedTokens?.live).toBe(nowSeconds + 3600);

    const held =
      Object.keys(project?.revokedTokens ?? {}).length + Object.keys(project?.blockedUsers ?? {}).length + Object.keys(project?.revokedBefore ?? {}).length;
    // Filled in one write (1,000 CLI calls would take a minute), then the limit met through the registry.
    const blocked = { ...project?.blockedUsers, ...Object.fromEntries(Array.from({ length: MAX_REVOCATIONS - held }, (_, i) => [`filler-${held + i}`, true])) };
    await documentClient().send(
      new UpdateCommand({
        TableName: gw.tables.REGISTRY_TABLE,
        Key: { pk: `project#${gw.projectId}` },
        UpdateExpression: 'SET blockedUsers = :b',
        ExpressionAttributeValues: { ':b': blocked },
      }),
    );
    await expect(setUserBlocked(gw.projectId, 'one-too-many', true)).rejects.toThrow(RegistryError);
    await expect(setUserBlocked(gw.projectId, 'one-too-many', true)).rejects.toThrow(`holds ${MAX_REVOCATIONS} revocations`);
    // Changing an entry already there is not one more.
    await setUserBlocked(gw.projectId, 'filler-999', true);
    await setUserBlocked(gw.projectId, 'filler-999', false);
    await setUserBlocked(gw.projectId, 'one-too-many', true);
  });
});
