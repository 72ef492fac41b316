import { anthropicRefusal } from '../../lambdas/refusals/anthropic.ts';
import { conjureRefusal } from '../../lambdas/refusals/conjure.ts';
import { Refused, statusOf } from '../../lambdas/refusals/refusal.ts';

/**
 * The core's typed refusals as plain data (status, kind, message), so the tests of the HTTP seams assert on what a
 * refusal says rather than on the class that carries it. The carrier class and the renderers are named in the
 * imports above and nowhere else in test/http: renaming them is a change here only.
 */
export interface RefusalShape {
  status: number;
  kind: string;
  message: string;
}

/** The refusal `err` carries; anything else (a TypeError, a crash) is rethrown so the test fails on the real error. */
export function asRefusal(err: unknown): RefusalShape {
  if (!(err instanceof Refused)) throw err;
  return { status: statusOf(err.refusal), kind: err.refusal.kind, message: err.message };
}

/** The refusal `fn` throws (synchronously); fails when it returns. */
export function refusalOf(fn: () => unknown): RefusalShape {
  let result: unknown;
  try {
    result = fn();
  } catch (err) {
    return asRefusal(err);
  }
  throw new Error(`expected a refusal, got a result: ${String(result)}`);
}

/** The refusal a promise (or an async function) rejects with; fails when it resolves. */
export async function refusalFrom(work: Promise<unknown> | (() => Promise<unknown>)): Promise<RefusalShape> {
  return asRefusal(await rejectionOf(work));
}

/** The raw rejection of a promise (or an async function); fails when it resolves. */
export async function rejectionOf(work: Promise<unknown> | (() => Promise<unknown>)): Promise<unknown> {
  let result: unknown;
  try {
    result = await (typeof work === 'function' ? work() : work);
  } catch (err) {
    return err;
  }
  throw new Error(`expected a refusal, got a result: ${String(result)}`);
}

/** The headers each app's envelope sends for the refusal `err` carries: what a client actually receives. */
export function renderedHeaders(err: unknown): { proxy: Headers; conjure: Headers } {
  if (!(err instanceof Refused)) throw err;
  return { proxy: anthropicRefusal(err.refusal).headers, conjure: conjureRefusal(err.refusal).headers };
}
