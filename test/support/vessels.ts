import { expect } from 'vitest';
import type { VesselView } from '../../lambdas/vessels/record.ts';

/** Small HTTP helpers for /incubate (docs/incubate.md) against a running gateway at `base`. */

export type QueueResponse = { vesselId: string; idempotencyKey: string; status: 'queued'; scheduledFor: string };
export type BatchItemAnswer =
  | { index: number; idempotencyKey: string; status: 'queued'; vesselId: string; scheduledFor: string; replayed?: true }
  | { index: number; idempotencyKey: string; status: 'failed'; error: { code: string; message: string } };
export type BatchAnswer = { total: number; queued: number; failed: number; items: BatchItemAnswer[] };

async function post(url: string, body: unknown, headers: Record<string, string> = {}): Promise<{ status: number; body: unknown }> {
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify(body) });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : undefined };
}

/** POST /incubate; expects 202 and returns the queue response. */
export async function incubate(base: string, body: Record<string, unknown>): Promise<QueueResponse> {
  const out = await post(`${base}/incubate`, body);
  expect(out.status, JSON.stringify(out.body)).toBe(202);
  return out.body as QueueResponse;
}

/** POST /incubate/batch; expects 202 with every item queued. */
export async function incubateBatch(base: string, body: Record<string, unknown>): Promise<BatchAnswer> {
  const out = await post(`${base}/incubate/batch`, body);
  expect(out.status, JSON.stringify(out.body).slice(0, 2000)).toBe(202);
  const answer = out.body as BatchAnswer;
  expect(answer.failed, JSON.stringify(answer.items.filter((i) => i.status === 'failed')).slice(0, 2000)).toBe(0);
  return answer;
}

/** GET /incubate/vessel/{id}; expects 200. */
export async function vesselRecord(base: string, token: string, vesselId: string): Promise<VesselView> {
  const res = await fetch(`${base}/incubate/vessel/${vesselId}`, { headers: { authorization: `Bearer ${token}` } });
  const text = await res.text();
  expect(res.status, text).toBe(200);
  return JSON.parse(text) as VesselView;
}

/** Polls `read` every `everyMs` until `done` holds of its value; fails with the last value after `timeoutMs`. */
export async function pollUntil<T>(read: () => Promise<T>, done: (v: T) => boolean, opts: { timeoutMs: number; everyMs?: number; what?: string }): Promise<T> {
  const deadline = Date.now() + opts.timeoutMs;
  let last: T = await read();
  while (!done(last)) {
    if (Date.now() > deadline) {
      throw new Error(`${opts.what ?? 'condition'} not reached within ${opts.timeoutMs} ms; last: ${JSON.stringify(last).slice(0, 3000)}`);
    }
    await new Promise((r) => setTimeout(r, opts.everyMs ?? 250));
    last = await read();
  }
  return last;
}

/** Runs `fn` over `items`, at most `limit` at once, keeping the order of the results. */
export async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.min(limit, items.length) }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i]!, i);
      }
    }),
  );
  return out;
}
