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
 * through `accessRecord()`. Every function of the manifest ends with `await unfinishedWork()`, through the one middy
 * set-up of lambdas/handlers/middleware.ts (requestEnd: for a streaming function, after its response has been piped).
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

/** What waits for one response's delivery: tasks not started yet, and work that must end before it counts as done. */
interface ResponseWork {
  tasks: (() => Promise<unknown>)[];
  holds: Promise<unknown>[];
}
const responses = new WeakMap<object, ResponseWork>();

function workOf(response: object): ResponseWork {
  let work = responses.get(response);
  if (!work) responses.set(response, (work = { tasks: [], holds: [] }));
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

/** How much work is still unfinished (running or deferred). */
export function unfinishedCount(): number {
  return running.size + deferred.size;
}
