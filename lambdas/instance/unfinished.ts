import { AsyncLocalStorage } from 'node:async_hooks';
import { onInstanceReset } from './state.ts';

/**
 * The one registry of work after the response (docs/architecture.md, "No charge left behind"): what an invocation
 * must finish before it returns, since Lambda may freeze the instance as soon as the handler resolves, and a charge or
 * access line still being written would then wait — for the next invocation, or for ever. Three ways in:
 *
 *   finishBeforeReturn(promise)       already running; the handler's end waits for it
 *   deferUntilReturn(start)           not started yet; whoever needs it first calls `start`, and the handler's end
 *                                     starts what nobody did
 *   afterResponse(response, task)     deferred until `response` has been delivered (a JSON answer's settlement):
 *                                     `responseDelivered(response)` starts it, and ends once it and whatever
 *                                     `holdResponse` tied to the response (a stream's settlement) have ended
 *
 * A response is named by an object that stands for it: `httpApp`'s access record, which code below a route reaches
 * through `accessRecord()`. Every function of the manifest runs each invocation in a scope of its own
 * (`ownUnfinishedWork`) and ends it with `await unfinishedWork()`, through the one middy set-up of
 * lambdas/handlers/middleware.ts (in requestEnd: for a streaming function, after its response has been piped).
 */

/** Work registered in one scope: an invocation's own (`ownUnfinishedWork`), or the instance's, outside any. */
interface Scope {
  running: Set<Promise<unknown>>;
  deferred: Set<() => unknown>;
}
const instanceScope: Scope = { running: new Set(), deferred: new Set() };
const invocation = new AsyncLocalStorage<Scope>();
/** Everything registered and not yet ended, in every scope: what `unfinishedCount` reports. */
const all = { running: new Set<Promise<unknown>>(), deferred: new Set<() => unknown>() };
onInstanceReset(() => {
  for (const set of [instanceScope.running, instanceScope.deferred, all.running, all.deferred]) set.clear();
});

const currentScope = (): Scope => invocation.getStore() ?? instanceScope;

/**
 * Runs one invocation with a scope of its own, so that its `unfinishedWork()` waits for what it registered rather
 * than for other requests' work: in the local runtime one process serves every function at once, and an answer
 * must not wait for another client's /prompt run. Work registered where the invocation's context is lost (a
 * response stream's callbacks) goes to the instance's scope, which every invocation drains as well.
 */
export function ownUnfinishedWork<T>(invoke: () => Promise<T>): Promise<T> {
  return invocation.run({ running: new Set(), deferred: new Set() }, invoke);
}

function track<T>(scope: Scope, work: Promise<T>): Promise<T> {
  const tracked = work.finally(() => {
    scope.running.delete(tracked);
    all.running.delete(tracked);
  });
  scope.running.add(tracked);
  all.running.add(tracked);
  return tracked;
}

export function finishBeforeReturn<T>(work: Promise<T>): Promise<T> {
  return track(currentScope(), work);
}

/**
 * Registers work that starts later, and returns its starter: calling it the first time starts the work (tracked
 * like `finishBeforeReturn`, in the scope that registered it), every call returns the same promise.
 */
export function deferUntilReturn<T>(work: () => Promise<T>): () => Promise<T> {
  const scope = currentScope();
  let started: Promise<T> | undefined;
  const start = (): Promise<T> => {
    if (!started) {
      scope.deferred.delete(start);
      all.deferred.delete(start);
      started = track(scope, work());
    }
    return started;
  };
  scope.deferred.add(start);
  all.deferred.add(start);
  return start;
}

/**
 * Starts whatever the invocation (and the instance) deferred and waits for all of it that is running now. Only for
 * what is running now: in the local runtime other requests keep adding work to the instance's scope, and waiting
 * for it to empty would wait for a quiet moment. An invocation's own work is all registered by the time its handler
 * ends (its access line, chained on its settlements, included).
 */
export async function unfinishedWork(): Promise<void> {
  const scopes = [...new Set([currentScope(), instanceScope])];
  for (const scope of scopes) for (const start of [...scope.deferred]) start();
  await Promise.allSettled(scopes.flatMap((scope) => [...scope.running]));
}

/** What waits for one response's delivery: tasks not started yet, and work that must end before it counts as done. */
interface ResponseWork {
  tasks: (() => Promise<unknown>)[];
  holds: Promise<unknown>[];
}
const responses = new WeakMap<object, ResponseWork>();

function workOf(response: object): ResponseWork {
  const known = responses.get(response);
  if (known) return known;
  const work: ResponseWork = { tasks: [], holds: [] };
  responses.set(response, work);
  return work;
}

/**
 * Runs `task` once `response` has been delivered (or abandoned by its client): the client does not wait for it, the
 * invocation does. Until then it is deferred work, so an invocation that ends sooner still starts it.
 */
export function afterResponse(response: object, task: () => Promise<unknown>): void {
  workOf(response).tasks.push(deferUntilReturn(task));
}

/** Keeps `response`'s work after delivery from counting as ended before `work` has (a stream's settlement). */
export function holdResponse(response: object, work: Promise<unknown>): void {
  workOf(response).holds.push(work);
}

/**
 * `response` has been delivered or abandoned: starts its `afterResponse` tasks and, once they and everything holding
 * it have ended, runs `then` (the access line, which carries their outcome). Tracked like `finishBeforeReturn`.
 */
export function responseDelivered(response: object, then: () => void = () => undefined): Promise<void> {
  const work = workOf(response);
  const tasks = work.tasks.splice(0);
  // The last bytes are on their way to the socket; the tasks begin on the next turn of the event loop so that writing
  // them comes first.
  if (tasks.length > 0) work.holds.push(new Promise<void>((r) => setImmediate(r)).then(() => Promise.allSettled(tasks.map((start) => start()))));
  return finishBeforeReturn(released(response, work).then(then));
}

/** Waits for the response's holds, including those added while waiting. */
async function released(response: object, work: ResponseWork): Promise<void> {
  for (let held = work.holds.splice(0); held.length > 0; held = work.holds.splice(0)) await Promise.allSettled(held);
  responses.delete(response);
}

/** How much work is still unfinished (running or deferred), in every scope. */
export function unfinishedCount(): number {
  return all.running.size + all.deferred.size;
}
