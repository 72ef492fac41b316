import { onInstanceReset } from './state.ts';

/**
 * Work an invocation must finish before it returns: Lambda may freeze the instance as soon as the handler resolves,
 * and a charge or access line still being written would then wait — for the next invocation, or for ever
 * (docs/architecture.md, "No charge left behind"). Two kinds:
 *
 *   finishBeforeReturn(promise)   already running; the handler's end waits for it
 *   deferUntilReturn(start)       not started yet (a settlement that waits until the answer has been delivered);
 *                                 whoever needs it first calls `start`, and the handler's end starts what nobody did
 *
 * Every handler that calls models ends with `await unfinishedWork()` (the streaming functions in middy's requestEnd).
 */
const running = new Set<Promise<unknown>>();
const deferred = new Set<() => unknown>();
onInstanceReset(() => {
  running.clear();
  deferred.clear();
});

export function finishBeforeReturn<T>(work: Promise<T>): Promise<T> {
  const tracked = work.finally(() => running.delete(tracked));
  running.add(tracked);
  return tracked;
}

/**
 * Registers work that starts later, and returns its starter: calling it the first time starts the work (tracked
 * like `finishBeforeReturn`), every call returns the same promise.
 */
export function deferUntilReturn<T>(work: () => Promise<T>): () => Promise<T> {
  let started: Promise<T> | undefined;
  const start = (): Promise<T> => {
    if (!started) {
      deferred.delete(start);
      started = finishBeforeReturn(work());
    }
    return started;
  };
  deferred.add(start);
  return start;
}

/**
 * Starts whatever was deferred and waits for all work running now. Only for what is running now: in the local
 * runtime other requests keep adding work, and waiting for the set to empty would wait for a quiet moment. An
 * invocation's own work is all registered by the time its handler ends (its access line, chained on its
 * settlements, included).
 */
export async function unfinishedWork(): Promise<void> {
  for (const start of [...deferred]) start();
  await Promise.allSettled([...running]);
}

/** How much work is still unfinished (running or deferred). */
export function unfinishedCount(): number {
  return running.size + deferred.size;
}
