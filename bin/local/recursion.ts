import { createHash, randomBytes } from 'node:crypto';

/**
 * Lambda's recursive-loop detection, emulated (docs/local.md, "As strict as AWS"). In AWS, the trace header of an
 * invocation (`_X_AMZN_TRACE_ID`) travels with every message the function sends through a supported SDK — the AWS
 * SDK's recursion-detection middleware puts it on the request, SQS keeps it as the message's `AWSTraceHeader` — and
 * Lambda counts, in its `Lineage`, how many times the chain has invoked each function. Past 16 invocations of the
 * same function in one chain, Lambda stops the next one unless the function's RecursiveLoop is `Allow`.
 *
 * Locally the same header is read from the SDK's requests by the local IAM (bin/local/iam.ts) and handed to the
 * consumer with the message, and the `Lineage` field carries `<function hash>:<count>` per function, `|`-separated:
 * AWS documents the count, not its spelling, so this spelling is the local runtime's own.
 */

/** Invocations of one function in one chain that Lambda lets through; the next is stopped. */
export const MAX_CHAIN_INVOCATIONS = 16;

/** A new chain's header: what an invocation that no message of a chain triggered (HTTP, a schedule) carries. */
export function newTraceHeader(): string {
  const epoch = Math.floor(Date.now() / 1000).toString(16);
  return `Root=1-${epoch}-${randomBytes(12).toString('hex')};Sampled=0`;
}

function functionHash(functionId: string): string {
  return createHash('sha256').update(functionId).digest('hex').slice(0, 8);
}

function lineage(header: string | undefined): Map<string, number> {
  const counts = new Map<string, number>();
  const field = header?.split(';').find((part) => part.startsWith('Lineage='));
  for (const entry of field?.slice('Lineage='.length).split('|') ?? []) {
    const [hash, count] = entry.split(':');
    if (hash && count && /^\d+$/.test(count)) counts.set(hash, Number(count));
  }
  return counts;
}

/** How many times the chain of `header` has invoked `functionId` so far. */
export function chainInvocations(header: string | undefined, functionId: string): number {
  return lineage(header).get(functionHash(functionId)) ?? 0;
}

/**
 * The header of an invocation of `functionId` triggered by messages carrying `headers` (a batch): the first one's
 * root (or a new one), and each function's count the highest of the batch, this function's one more.
 */
export function invocationTraceHeader(headers: ReadonlyArray<string | undefined>, functionId: string): string {
  const counts = new Map<string, number>();
  for (const header of headers) for (const [hash, count] of lineage(header)) counts.set(hash, Math.max(counts.get(hash) ?? 0, count));
  const own = functionHash(functionId);
  counts.set(own, (counts.get(own) ?? 0) + 1);
  const root = headers
    .find(Boolean)
    ?.split(';')
    .find((part) => part.startsWith('Root='));
  const base = root ?? newTraceHeader().split(';')[0]!;
  return `${base};Sampled=0;Lineage=${[...counts].map(([hash, count]) => `${hash}:${count}`).join('|')}`;
}
