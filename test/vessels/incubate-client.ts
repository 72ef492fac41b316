import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { ScanCommand } from '@aws-sdk/lib-dynamodb';
import { expect } from 'vitest';
import { sqsClient } from '../../bin/local/queues.ts';
import { documentClient } from '../../lambdas/store/dynamo.ts';
import type { QueueResponse, VesselView } from '../../lambdas/vessels/record.ts';
import type { TestGateway } from '../support/gateway.ts';

/**
 * The /incubate endpoints over real HTTP, for the vessel tests (test/vessels/*.test.ts): each call answers the
 * status, the headers that matter and the parsed body, so a test asserts exact values. Plus direct reads of the
 * vessels table (the source of truth) and of the run queue, to check what the answers do not show.
 */

export const MODEL = 'claude-sonnet-4-6';

export interface Answer<T = Record<string, unknown>> {
  status: number;
  body: T;
  headers: Headers;
}

/** The record and the queue response as the wire carries them (JSON: `cancelRequested` only ever true). */
export type VesselRecord = VesselView;
export type { QueueResponse };

async function answer<T>(res: Response): Promise<Answer<T>> {
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = text;
  }
  return { status: res.status, body: body as T, headers: res.headers };
}

export function vesselApi(gw: TestGateway) {
  const post = async <T>(path: string, body: unknown, headers: Record<string, string> = {}) =>
    answer<T>(
      await fetch(`${gw.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...headers },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      }),
    );
  const bearer = (token: string | undefined): Record<string, string> => (token === undefined ? {} : { authorization: `Bearer ${token}` });

  const api = {
    incubate: <T = QueueResponse>(body: unknown) => post<T>('/incubate', body),
    batch: <T = Record<string, unknown>>(body: unknown) => post<T>('/incubate/batch', body),
    status: async <T = VesselRecord>(vesselId: string, token: string | undefined) =>
      answer<T>(await fetch(`${gw.url}/incubate/vessel/${encodeURIComponent(vesselId)}`, { headers: bearer(token) })),
    cancel: <T = VesselRecord>(vesselId: string, token: string | undefined) =>
      post<T>(`/incubate/vessel/${encodeURIComponent(vesselId)}/cancel`, '', bearer(token)),
    /** GET /usage for the token's user. */
    usage: async (token: string) => {
      const res = await answer<{ ai: { used: number; reserved: number }; compute: { used: number; reserved: number } }>(
        await fetch(`${gw.url}/usage`, { headers: bearer(token) }),
      );
      expect(res.status, JSON.stringify(res.body)).toBe(200);
      return res.body;
    },
    /** The record, once `done` holds for it (polled every `intervalMs`); every status seen on the way, in order. */
    async until(
      vesselId: string,
      token: string,
      done: (r: VesselRecord) => boolean,
      opts: { timeout?: number; intervalMs?: number; seen?: string[] } = {},
    ): Promise<VesselRecord> {
      const deadline = Date.now() + (opts.timeout ?? 20_000);
      for (;;) {
        const res = await api.status(vesselId, token);
        expect(res.status, JSON.stringify(res.body)).toBe(200);
        if (opts.seen && opts.seen.at(-1) !== res.body.status) opts.seen.push(res.body.status);
        if (done(res.body)) return res.body;
        if (Date.now() > deadline)
          throw new Error(`vessel ${vesselId} still ${res.body.status} after ${opts.timeout ?? 20_000} ms: ${JSON.stringify(res.body)}`);
        await new Promise((r) => setTimeout(r, opts.intervalMs ?? 50));
      }
    },
    ended: (vesselId: string, token: string, timeout = 20_000) => api.until(vesselId, token, (r) => r.isCompleted, { timeout }),
  };
  return api;
}

/** Every item of the vessels table (the source of truth) whose pk starts with `prefix`, read consistently. */
export async function tableItems(prefix: string, filter?: { projectId: string }): Promise<Record<string, unknown>[]> {
  const items: Record<string, unknown>[] = [];
  let start: Record<string, unknown> | undefined;
  do {
    const page = await documentClient().send(
      new ScanCommand({
        TableName: process.env.VESSELS_TABLE,
        ConsistentRead: true,
        ExclusiveStartKey: start,
        FilterExpression: filter ? 'begins_with(pk, :prefix) AND projectId = :p' : 'begins_with(pk, :prefix)',
        ExpressionAttributeValues: { ':prefix': prefix, ...(filter ? { ':p': filter.projectId } : {}) },
      }),
    );
    items.push(...(page.Items ?? []));
    start = page.LastEvaluatedKey;
  } while (start);
  return items;
}

/** The vessel items of a project, as stored. */
export const vesselItems = (projectId: string) => tableItems('vessel#', { projectId });
/** The idempotency-key items of a project (`idem#<projectId>#<sha256(key)>`). */
export const idempotencyItems = (projectId: string) => tableItems(`idem#${projectId}#`);

/** The run queue's message counts, as SQS reports them (visible, in flight, delayed). */
export async function runQueueCounts(gw: TestGateway): Promise<{ visible: number; inFlight: number; delayed: number }> {
  const client = sqsClient(gw.queues.endpoint);
  try {
    const out = await client.send(
      new GetQueueAttributesCommand({
        QueueUrl: gw.queues.urls.RUN_QUEUE_URL,
        AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible', 'ApproximateNumberOfMessagesDelayed'],
      }),
    );
    const a = out.Attributes ?? {};
    return {
      visible: Number(a.ApproximateNumberOfMessages),
      inFlight: Number(a.ApproximateNumberOfMessagesNotVisible),
      delayed: Number(a.ApproximateNumberOfMessagesDelayed),
    };
  } finally {
    client.destroy();
  }
}

/** Milliseconds between two ISO instants of a record. */
export const msBetween = (from: string, to: string) => new Date(to).getTime() - new Date(from).getTime();
