import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { SignJWT, exportSPKI, generateKeyPair } from 'jose';
import { MAX_TOKEN_BYTES, mintToken, parseDuration, verifyToken, TokenError } from '../../lambdas/auth/tokens.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

let gw: TestGateway;
const enc = new TextEncoder();
const b64url = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url');
const nowSeconds = () => Math.floor(Date.now() / 1000);
const BUDGET = { ai: 5_000, compute: 60, window: 'day' };

beforeAll(async () => {
  gw = await startTestGateway();
});
afterAll(async () => {
  await gw?.stop();
});

/** Signs any payload with the project's secret (or another key), HS256 unless told. */
function sign(payload: Record<string, unknown>, opts: { secret?: string; alg?: string } = {}): Promise<string> {
  return new SignJWT(payload).setProtectedHeader({ alg: opts.alg ?? 'HS256', typ: 'JWT' }).sign(enc.encode(opts.secret ?? gw.secret));
}

/** A complete, valid claim set, to be spoiled one field at a time. */
function claims(overrides: Record<string, unknown> = {}): Record<string, unknown> {
  const base: Record<string, unknown> = { iss: gw.projectId, sub: 'user-1', iat: nowSeconds(), exp: nowSeconds() + 3600, budget: BUDGET };
  for (const [k, v] of Object.entries(overrides)) {
    if (v === undefined) delete base[k];
    else base[k] = v;
  }
  return base;
}

async function usage(authorization?: string): Promise<{ status: number; body: Record<string, unknown> }> {
  const res = await fetch(`${gw.url}/usage`, { headers: authorization === undefined ? {} : { authorization } });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

async function expect401(authorization: string | undefined, message: string | RegExp) {
  const { status, body } = await usage(authorization);
  expect(status).toBe(401);
  expect(Object.keys(body)).toEqual(['error', 'message']);
  // One vocabulary on the conjure routes: the code, and the message saying what is wrong.
  expect(body.error).toBe(body.message === 'Token expired' ? 'token_expired' : 'invalid_token');
  if (typeof message === 'string') expect(body.message).toBe(message);
  else expect(body.message).toMatch(message);
}

describe('GET /usage refuses bad tokens with 401 {error, message}', () => {
  it('missing Authorization header', async () => {
    await expect401(undefined, 'Missing token');
  });

  it('Authorization that is not a Bearer token', async () => {
    await expect401('Basic dXNlcjpwYXNz', 'Missing token');
    await expect401('Bearer', 'Missing token');
  });

  it('malformed tokens', async () => {
    await expect401('Bearer not-a-jwt', 'Malformed token');
    await expect401('Bearer a.b', 'Malformed token');
    await expect401('Bearer a.b.c.d', 'Malformed token');
    await expect401('Bearer a+b.c/d.e=', 'Malformed token');
    // three base64url parts that are not JSON
    await expect401(`Bearer ${Buffer.from('nope').toString('base64url')}.${Buffer.from('nope').toString('base64url')}.sig`, 'Malformed token');
  });

  it('alg none (hand-crafted, empty and non-empty signature)', async () => {
    const unsigned = `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url(claims())}`;
    await expect401(`Bearer ${unsigned}.`, 'Token algorithm none is not accepted; use HS256, HS384 or HS512');
    await expect401(`Bearer ${unsigned}.${Buffer.from('x').toString('base64url')}`, 'Token algorithm none is not accepted; use HS256, HS384 or HS512');
    // no alg at all
    await expect401(`Bearer ${b64url({ typ: 'JWT' })}.${b64url(claims())}.`, 'Token algorithm (none) is not accepted; use HS256, HS384 or HS512');
  });

  it('wrong secret', async () => {
    await expect401(`Bearer ${await sign(claims(), { secret: 'a-completely-different-secret-of-32-bytes!' })}`, 'Token signature is invalid');
  });

  it('a tampered payload under a valid signature', async () => {
    const good = await sign(claims());
    const [h, , s] = good.split('.');
    const richer = b64url(claims({ budget: { ...BUDGET, ai: 999_999_999 } }));
    await expect401(`Bearer ${h}.${richer}.${s}`, 'Token signature is invalid');
  });

  it('RS256 token signed with a generated key pair is refused before any key is tried', async () => {
    const { privateKey } = await generateKeyPair('RS256');
    const rs = await new SignJWT(claims()).setProtectedHeader({ alg: 'RS256', typ: 'JWT' }).sign(privateKey);
    await expect401(`Bearer ${rs}`, 'Token algorithm RS256 is not accepted; use HS256, HS384 or HS512');
    const { privateKey: ecKey } = await generateKeyPair('ES256');
    const es = await new SignJWT(claims()).setProtectedHeader({ alg: 'ES256', typ: 'JWT' }).sign(ecKey);
    await expect401(`Bearer ${es}`, 'Token algorithm ES256 is not accepted; use HS256, HS384 or HS512');
  });

  it('HS256 token whose HMAC secret is a public key PEM (key-confusion attack)', async () => {
    const { publicKey } = await generateKeyPair('RS256', { extractable: true });
    const pem = await exportSPKI(publicKey);
    expect(pem).toMatch(/^-----BEGIN PUBLIC KEY-----/);
    await expect401(`Bearer ${await sign(claims(), { secret: pem })}`, 'Token signature is invalid');
  });

  it('expired beyond the 60 s leeway', async () => {
    await expect401(`Bearer ${await sign(claims({ iat: nowSeconds() - 3600, exp: nowSeconds() - 90 }))}`, 'Token expired');
    await expect401(`Bearer ${await gw.token({ expiresInSeconds: -3600 })}`, 'Token expired');
  });

  it('nbf in the future beyond the leeway', async () => {
    await expect401(`Bearer ${await sign(claims({ nbf: nowSeconds() + 300 }))}`, 'Token claim invalid: nbf (check_failed)');
  });

  it('iat in the future beyond the leeway', async () => {
    await expect401(`Bearer ${await sign(claims({ iat: nowSeconds() + 300 }))}`, 'Token issued in the future');
  });

  it('missing sub, iss, exp or budget', async () => {
    await expect401(`Bearer ${await sign(claims({ sub: undefined }))}`, 'Token claim invalid: sub (missing)');
    await expect401(`Bearer ${await sign(claims({ iss: undefined }))}`, 'Token has no iss claim');
    await expect401(`Bearer ${await sign(claims({ exp: undefined }))}`, 'Token claim invalid: exp (missing)');
    await expect401(`Bearer ${await sign(claims({ budget: undefined }))}`, /^Token claims invalid: budget \S/);
  });

  it('bad budget claims', async () => {
    await expect401(`Bearer ${await sign(claims({ budget: { ...BUDGET, ai: 1.5 } }))}`, /^Token claims invalid: budget\.ai .*int/i);
    await expect401(`Bearer ${await sign(claims({ budget: { ...BUDGET, ai: '5000' } }))}`, /^Token claims invalid: budget\.ai .*number/i);
    await expect401(`Bearer ${await sign(claims({ budget: { ...BUDGET, ai: -1 } }))}`, /^Token claims invalid: budget\.ai \S/);
    await expect401(`Bearer ${await sign(claims({ budget: { ...BUDGET, compute: undefined } }))}`, /^Token claims invalid: budget\.compute \S/);
    await expect401(
      `Bearer ${await sign(claims({ budget: { ...BUDGET, window: 'fortnight' } }))}`,
      /^Token claims invalid: budget\.window .*"hour"\|"day"\|"week"\|"month"\|"lifetime"/,
    );
    await expect401(`Bearer ${await sign(claims({ budget: 5000 }))}`, /^Token claims invalid: budget .*object/);
  });

  it('sub that cannot be used in a key', async () => {
    await expect401(`Bearer ${await sign(claims({ sub: 'user#2' }))}`, /^Token claims invalid: sub must be 1–128 characters without "#"/);
  });

  it('unknown project (iss names no project)', async () => {
    await expect401(`Bearer ${await sign(claims({ iss: 'prj_does_not_exist' }))}`, 'Token issuer is not a known project');
  });

  it('oversized token (> 4096 characters) is refused before parsing', async () => {
    const big = await sign(claims({ pad: 'x'.repeat(MAX_TOKEN_BYTES) }));
    expect(big.length).toBeGreaterThan(MAX_TOKEN_BYTES);
    await expect401(`Bearer ${big}`, 'Token too large');
  });
});

describe('GET /usage accepts valid tokens', () => {
  it.each(['HS256', 'HS384', 'HS512'] as const)('%s → 200', async (algorithm) => {
    const token = await mintToken({
      projectId: gw.projectId,
      userId: `user-${algorithm}`,
      secret: gw.secret,
      budget: { ai: 1234, compute: 56, window: 'week' },
      expiresInSeconds: 600,
      algorithm,
    });
    expect(JSON.parse(Buffer.from(token.split('.')[0]!, 'base64url').toString()).alg).toBe(algorithm);
    const { status, body } = await usage(`Bearer ${token}`);
    expect(status).toBe(200);
    expect(body).toMatchObject({ user_id: `user-${algorithm}`, issuer_id: gw.projectId, window: 'week', ai: { budget: 1234 }, compute: { budget: 56 } });
  });

  it('the Bearer scheme is case-insensitive', async () => {
    expect((await usage(`bearer ${await gw.token()}`)).status).toBe(200);
  });

  it('expired, but within the 60 s leeway', async () => {
    expect((await usage(`Bearer ${await sign(claims({ iat: nowSeconds() - 600, exp: nowSeconds() - 30 }))}`)).status).toBe(200);
  });

  it('nbf and iat slightly in the future, within the leeway', async () => {
    expect((await usage(`Bearer ${await sign(claims({ nbf: nowSeconds() + 30 }))}`)).status).toBe(200);
    expect((await usage(`Bearer ${await sign(claims({ iat: nowSeconds() + 30 }))}`)).status).toBe(200);
  });

  it('no iat and no nbf', async () => {
    expect((await usage(`Bearer ${await sign(claims({ iat: undefined }))}`)).status).toBe(200);
  });
});

describe('verifyToken (direct)', () => {
  const lookup = async (id: string) => (id === 'prj_a' ? 'secret-a-secret-a-secret-a-secret-a' : undefined);

  it('returns the caller', async () => {
    const now = Date.UTC(2030, 0, 1);
    const token = await mintToken({
      projectId: 'prj_a',
      userId: 'u',
      secret: 'secret-a-secret-a-secret-a-secret-a',
      budget: { ai: 7, compute: 8, window: 'lifetime' },
      expiresInSeconds: 60,
      now,
    });
    expect(await verifyToken(token, lookup, now)).toEqual({
      projectId: 'prj_a',
      userId: 'u',
      budget: { ai: 7, compute: 8, window: 'lifetime' },
      expiresAt: now / 1000 + 60,
      tokenId: expect.stringMatching(/^[0-9a-f-]{36}$/),
      issuedAt: now / 1000,
    });
    // exp is exclusive ("on or after"), extended by the 60 s leeway
    await expect(verifyToken(token, lookup, now + 119_000)).resolves.toMatchObject({ userId: 'u' });
    await expect(verifyToken(token, lookup, now + 120_000)).rejects.toMatchObject({ name: 'TokenError', code: 'token_expired', message: 'Token expired' });
  });

  it('error codes', async () => {
    await expect(verifyToken(undefined, lookup)).rejects.toMatchObject({ code: 'token_missing' });
    await expect(verifyToken('', lookup)).rejects.toMatchObject({ code: 'token_missing' });
    await expect(verifyToken('x'.repeat(MAX_TOKEN_BYTES + 1), lookup)).rejects.toMatchObject({ code: 'token_malformed', message: 'Token too large' });
    await expect(verifyToken('a.b', lookup)).rejects.toBeInstanceOf(TokenError);
  });

  it('a verified token is remembered: the same caller again, but the clock and the secret are checked on every use', async () => {
    let secret = 'secret-b-secret-b-secret-b-secret-b';
    const rotating = async (id: string) => (id === 'prj_b' ? secret : undefined);
    const now = Date.UTC(2030, 0, 2);
    const token = await mintToken({ projectId: 'prj_b', userId: 'u', secret, budget: { ai: 7, compute: 8, window: 'day' }, expiresInSeconds: 60, now });
    const first = await verifyToken(token, rotating, now);
    expect(Object.isFrozen(first) && Object.isFrozen(first.budget)).toBe(true);
    expect(await verifyToken(token, rotating, now + 1_000)).toBe(first); // the remembered caller itself
    // Past exp and its leeway, or before iat's leeway, the full verification answers, with its exact refusal.
    await expect(verifyToken(token, rotating, now + 120_000)).rejects.toMatchObject({ code: 'token_expired', message: 'Token expired' });
    await expect(verifyToken(token, rotating, now - 61_000)).rejects.toThrow('Token issued in the future');
    expect(await verifyToken(token, rotating, now + 2_000)).toBe(first);
    // The secret rotated: what the old one verified no longer counts.
    secret = 'secret-c-secret-c-secret-c-secret-c';
    await expect(verifyToken(token, rotating, now + 1_000)).rejects.toMatchObject({ message: 'Token signature is invalid' });
  });

  it('does not look the secret up for refused algorithms', async () => {
    let lookups = 0;
    const counting = async (id: string) => {
      lookups++;
      return lookup(id);
    };
    const none = `${b64url({ alg: 'none' })}.${b64url({ iss: 'prj_a', sub: 'u', exp: nowSeconds() + 60, budget: BUDGET })}.`;
    await expect(verifyToken(none, counting)).rejects.toThrow('Token algorithm none is not accepted');
    expect(lookups).toBe(0);
  });
});

describe('parseDuration', () => {
  it.each([
    ['1h', 3600],
    ['30m', 1800],
    ['45s', 45],
    ['7d', 604_800],
    ['2w', 1_209_600],
    ['3600', 3600],
    [' 5 m ', 300],
    ['90m', 5400],
  ])('%j → %i s', (text, seconds) => {
    expect(parseDuration(text)).toBe(seconds);
  });

  it.each(['', 'h', '1x', '1.5h', '-1h', '1hh', 'one hour', '1 h 30m'])('%j is refused', (text) => {
    expect(() => parseDuration(text)).toThrow(`Invalid duration "${text}": use a number followed by s, m, h, d or w (e.g. 1h)`);
  });

  it.each(['0', '0h', '0s'])('%j is refused as not positive', (text) => {
    expect(() => parseDuration(text)).toThrow(`Invalid duration "${text}": must be positive`);
  });
});
