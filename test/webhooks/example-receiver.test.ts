import { spawn, type ChildProcess } from 'node:child_process';
import { resolve } from 'node:path';
import { afterAll, beforeAll, expect, it, vi } from 'vitest';
import { callbackBodyText } from '../../lambdas/webhooks/body.ts';
import { deliveryHeaders } from '../../lambdas/webhooks/deliver.ts';
import { freePort, groupMembers } from '../support/gateway-process.ts';

/**
 * examples/webhook-receiver.ts, run as documented (`npx tsx examples/webhook-receiver.ts`) in its own process group:
 * it accepts a signed delivery once, answers a repeat of the same webhook-id with 200 "duplicate", and refuses a
 * tampered body and a stale timestamp with 401 and the reason.
 */

const repoRoot = resolve(import.meta.dirname, '../..');
const SECRET = 'example-secret-✓';

let child: ChildProcess;
let output = '';
let url = '';

beforeAll(async () => {
  const port = await freePort();
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !/^VITEST/.test(k)) env[k] = v;
  Object.assign(env, { WEBHOOK_SECRET: SECRET, PORT: String(port) });
  child = spawn('npx', ['tsx', 'examples/webhook-receiver.ts'], { cwd: repoRoot, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.on('data', (d: Buffer) => (output += d.toString()));
  child.stderr!.on('data', (d: Buffer) => (output += d.toString()));
  url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`the receiver did not start within 90 s:\n${output}`)), 90_000);
    child.stdout!.on('data', () => {
      const m = /listening on (http:\/\/127\.0\.0\.1:(\d+))/.exec(output);
      if (m) {
        clearTimeout(timer);
        expect(m[2]).toBe(String(port));
        res(`${m[1]}/hook`);
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      rej(new Error(`the receiver exited (code ${code}, signal ${signal}) before listening:\n${output}`));
    });
  });
});

afterAll(async () => {
  if (!child?.pid) return;
  const pgid = child.pid;
  const kill = (signal: NodeJS.Signals) => {
    try {
      process.kill(-pgid, signal);
    } catch {
      // already gone
    }
  };
  kill('SIGTERM');
  for (let i = 0; i < 40 && groupMembers(pgid).length > 0; i++) await new Promise((r) => setTimeout(r, 250));
  if (groupMembers(pgid).length > 0) kill('SIGKILL');
  for (let i = 0; i < 20 && groupMembers(pgid).length > 0; i++) await new Promise((r) => setTimeout(r, 250));
  expect(groupMembers(pgid)).toEqual([]);
});

const body = (vesselId: string, status: 'COMPLETED' | 'FAILED' = 'COMPLETED') =>
  callbackBodyText({
    vesselId,
    idempotencyKey: `key-${vesselId}`,
    status,
    output: {
      success: status === 'COMPLETED',
      text: status === 'COMPLETED' ? 'the answer: 42 ✓' : 'upstream failed',
      result: {
        type: 'result',
        subtype: status === 'COMPLETED' ? 'success' : 'error_during_execution',
        total_cost_usd: 0.0123,
        total_cost_microdollars: 12_300,
        usage: { input_tokens: 10, output_tokens: 20 },
        num_turns: 1,
        duration_secs: 2,
      },
    },
  });

const now = () => Math.floor(Date.now() / 1000);

async function post(rawBody: string, headers: Record<string, string>): Promise<{ status: number; text: string }> {
  const res = await fetch(url, { method: 'POST', headers, body: rawBody });
  return { status: res.status, text: await res.text() };
}

it('accepts a signed delivery (204) and logs the vessel id and status', async () => {
  const text = body('ves-example-1');
  expect(await post(text, deliveryHeaders({ webhookId: 'msg_ves-example-1', timestamp: now(), body: text, secret: SECRET }))).toEqual({
    status: 204,
    text: '',
  });
  // The child's stdout arrives through a pipe, a moment after the answer.
  await vi.waitFor(() => expect(output).toMatch(/ves-example-1.*COMPLETED/), { timeout: 5_000, interval: 50 });
});

it('answers a repeat of the same webhook-id with 200 "duplicate", without handling it twice', async () => {
  const text = body('ves-example-1');
  // A retry: same id and body, a later timestamp and so a new signature.
  const again = deliveryHeaders({ webhookId: 'msg_ves-example-1', timestamp: now() + 1, body: text, secret: SECRET });
  expect(await post(text, again)).toEqual({ status: 200, text: 'duplicate' });
  expect(output.match(/^vessel ves-example-1 /gm)).toHaveLength(1); // one log line: handled once
});

it('refuses a tampered body with 401 and the reason', async () => {
  const text = body('ves-example-2', 'FAILED');
  const headers = deliveryHeaders({ webhookId: 'msg_ves-example-2', timestamp: now(), body: text, secret: SECRET });
  expect(await post(text.replace('upstream failed', 'all good'), headers)).toEqual({ status: 401, text: 'webhook-signature does not match' });
  expect(output).not.toMatch(/ves-example-2/);
});

it('refuses a stale timestamp with 401 and the reason, even though signed with the secret', async () => {
  const text = body('ves-example-3');
  const headers = deliveryHeaders({ webhookId: 'msg_ves-example-3', timestamp: now() - 600, body: text, secret: SECRET });
  expect(await post(text, headers)).toEqual({ status: 401, text: 'webhook-timestamp is more than 300 s from now' });
  expect(output).not.toMatch(/ves-example-3/);
});

it('refuses another secret and an unsigned delivery', async () => {
  const text = body('ves-example-4');
  const wrong = deliveryHeaders({ webhookId: 'msg_ves-example-4', timestamp: now(), body: text, secret: 'not-the-secret' });
  expect(await post(text, wrong)).toEqual({ status: 401, text: 'webhook-signature does not match' });
  const unsigned = deliveryHeaders({ webhookId: 'msg_ves-example-4', timestamp: now(), body: text });
  expect(await post(text, unsigned)).toEqual({ status: 401, text: 'no signature: neither webhook-signature nor X-Service-Signature is present' });
});

it('a refused delivery does not mark its webhook-id as handled', async () => {
  const text = body('ves-example-4', 'FAILED');
  expect(await post(text, deliveryHeaders({ webhookId: 'msg_ves-example-4', timestamp: now(), body: text, secret: SECRET }))).toEqual({
    status: 204,
    text: '',
  });
  await vi.waitFor(() => expect(output).toMatch(/ves-example-4.*FAILED/), { timeout: 5_000, interval: 50 });
});
