import { execFile, spawn } from 'node:child_process';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { decodeProtectedHeader } from 'jose';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deliveryHeaders } from '../../lambdas/webhooks/deliver.ts';
import { createGatewayClient, decodeUserToken } from '../../packages/client/src/index.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * DESIGN §10: "Examples for Python backends use PyJWT and hmac and are run in a test". docs/examples/python/
 * mint_and_verify.py mints a token the gateway accepts (its claims as the package mints them) and verifies a real
 * delivery of the gateway (both signatures), the Standard Webhooks vector, and refuses tampered, replayed and wrongly
 * signed ones. PyJWT comes from Debian's python3-jwt (.ci/run installs it) or pip; without it the tests are skipped
 * with a message — except under CI, where they fail.
 */

const run = promisify(execFile);
const SCRIPT = resolve(import.meta.dirname, '../../docs/examples/python/mint_and_verify.py');
const INSTALL = 'apt-get install python3-jwt (or pip install pyjwt)';

/** The first Python 3 that has PyJWT: the one on PATH, or Debian's (python3-jwt installs for /usr/bin/python3). */
async function findPython(): Promise<string | undefined> {
  for (const candidate of ['python3', '/usr/bin/python3']) {
    const ok = await run(candidate, ['-c', 'import jwt']).then(
      () => true,
      () => false,
    );
    if (ok) return candidate;
  }
  return undefined;
}

const python = await findPython();
const skip = !python && !process.env.CI;
if (skip) console.warn(`package-python.test.ts: skipped, no python3 with PyJWT here (${INSTALL}); under CI this fails`);

let gw: TestGateway;

beforeAll(async () => {
  if (!skip) gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1' } });
});
afterAll(async () => {
  await gw?.stop();
});

/** Runs the example; `stdin` is the raw body for `verify`. */
function py(args: string[], opts: { env?: Record<string, string>; stdin?: Buffer | string } = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  if (!python) throw new Error(`PyJWT is required under CI: ${INSTALL}`);
  return new Promise((done, fail) => {
    const child = spawn(python, [SCRIPT, ...args], { env: { PATH: process.env.PATH, PYTHONIOENCODING: 'utf-8', ...opts.env } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', fail);
    child.on('close', (code) => done({ code: code ?? -1, stdout, stderr }));
    child.stdin.end(opts.stdin ?? '');
  });
}

const verify = (body: Buffer | string, headers: Record<string, string>, secret: string, now?: number) =>
  py(['verify', '--secret', secret, '--headers', JSON.stringify(headers), ...(now ? ['--now', String(now)] : [])], { stdin: body });

describe.skipIf(skip)(`the Python example (PyJWT + hmac)${skip ? `: skipped, ${INSTALL}` : ''}`, () => {
  it('mints a token the gateway accepts, with the claims the package mints', async () => {
    const minted = await py(['mint', '--user', 'py-user-1', '--ai', '2000000', '--compute', '3600', '--window', 'day', '--expires-in', '600'], {
      env: { PROJECT_ID: gw.projectId, PROJECT_SECRET: gw.secret },
    });
    expect(minted.stderr).toBe('');
    const token = minted.stdout.trim();
    expect(decodeProtectedHeader(token)).toEqual({ alg: 'HS256', typ: 'JWT' });
    const claims = decodeUserToken(token);
    expect(claims).toEqual({
      iss: gw.projectId,
      sub: 'py-user-1',
      iat: expect.any(Number),
      exp: claims.iat! + 600,
      jti: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/),
      budget: { ai: 2_000_000, compute: 3600, window: 'day' },
    });
    expect(Object.keys(claims)).toEqual(['iss', 'sub', 'iat', 'exp', 'jti', 'budget']);
    const usage = await createGatewayClient({ baseUrl: gw.url, token }).usage();
    expect(usage).toMatchObject({ user_id: 'py-user-1', issuer_id: gw.projectId, window: 'day', ai: { budget: 2_000_000 }, compute: { budget: 3600 } });
  });

  it("verifies a real delivery of the gateway's, and refuses it tampered, replayed or with another secret", async () => {
    const received: { body: Buffer; headers: IncomingHttpHeaders }[] = [];
    const receiver = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({ body: Buffer.concat(chunks), headers: req.headers });
        res.writeHead(204).end();
      });
    });
    await new Promise<void>((ok) => receiver.listen(0, '127.0.0.1', ok));
    try {
      const secret = 'py-callback-secret-✓';
      const gateway = createGatewayClient({ baseUrl: gw.url, token: await gw.token({ user: 'py-user-2' }) });
      const queued = await gateway.incubate({
        message: 'Python [[words:3]]',
        idempotencyKey: `py-${Date.now()}`,
        callback: { url: `http://127.0.0.1:${(receiver.address() as AddressInfo).port}/hook`, secret },
      });
      await expect.poll(() => received.length, { timeout: 30_000 }).toBeGreaterThan(0);
      const { body, headers } = received[0]!;
      const asSent = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k, String(v)]));

      const ok = await verify(body, asSent, secret);
      expect(ok.stderr).toBe('');
      expect(JSON.parse(ok.stdout)).toMatchObject({ success: true, text: 'word1 word2 word3', vesselId: queued.vesselId, status: 'COMPLETED' });
      // X-Service-Signature alone.
      const { 'webhook-signature': _, ...hexOnly } = asSent;
      expect((await verify(body, hexOnly, secret)).code).toBe(0);

      const refused = async (b: Buffer | string, h: Record<string, string>, s: string, now?: number) => {
        const r = await verify(b, h, s, now);
        expect(r.code).toBe(1);
        return r.stderr.trim();
      };
      expect(await refused(Buffer.concat([body, Buffer.from(' ')]), asSent, secret)).toBe('invalid_signature: webhook-signature does not match');
      expect(await refused(body, asSent, 'another-secret')).toBe('invalid_signature: webhook-signature does not match');
      expect(await refused(body, { ...hexOnly, 'x-service-signature': '0'.repeat(64) }, secret)).toBe(
        'invalid_signature: X-Service-Signature does not match the body',
      );
      const sentAt = Number(asSent['webhook-timestamp']);
      expect(await refused(body, asSent, secret, sentAt + 301)).toBe('timestamp_out_of_tolerance: webhook-timestamp is more than 300 s from now');
      expect(await refused(body, { 'content-type': 'application/json' }, secret)).toMatch(/^no_signature: /);

      // The gateway's signer (lambdas/webhooks/deliver.ts) on a body of our own, and the Standard Webhooks vector
      // (standard-webhooks/standard-webhooks, libraries/javascript/src/webhook.test.ts, "sign function works").
      const own = '{"success":false,"text":"é 🙂","status":"FAILED"}';
      const signed = deliveryHeaders({ webhookId: 'msg_x', timestamp: 1_900_000_000, body: own, secret: 'whsec_not-base64!' });
      expect(JSON.parse((await verify(own, signed, 'whsec_not-base64!', 1_900_000_000)).stdout)).toEqual(JSON.parse(own));
      const vector = {
        'webhook-id': 'msg_p5jXN8AQM9LWM0D4loKWxJek',
        'webhook-timestamp': '1614265330',
        'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=',
      };
      expect(JSON.parse((await verify('{"test": 2432232314}', vector, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 1614265330)).stdout)).toEqual({
        test: 2432232314,
      });
    } finally {
      receiver.close();
    }
  });
});
