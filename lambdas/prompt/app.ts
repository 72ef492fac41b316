import { randomUUID } from 'node:crypto';
import { clock } from '../config/clock.ts';
import { runAdmitted } from '../agent/admitted-run.ts';
import { MAX_RUN_SECONDS } from '../config/timing.ts';
import { checkedRunOptions } from '../agent/checked-options.ts';
import { PromptBody } from '../agent/options.ts';
import type { RunEvent } from '../agent/result.ts';
import { authenticate } from '../auth/authenticate.ts';
import { httpApp, type HttpApp } from '../http/app.ts';
import { parseJsonBody, readBodyText, requireJsonContentType } from '../http/body.ts';
import { Router } from '../http/router.ts';
import { finishBeforeReturn, holdResponse } from '../instance/unfinished.ts';
import { accessRecord } from '../observability/access-log.ts';
import { logger } from '../observability/logger.ts';
import { admitRun } from '../plans/admission.ts';
import { CONJURE_ENVELOPE } from '../refusals/conjure.ts';
import { describeIssue } from '../refusals/describe.ts';
import { Refused, type Refusal } from '../refusals/refusal.ts';
import { encodeSse } from '../streaming/sse.ts';

/**
 * POST /prompt (docs/prompt.md): a one-shot agent run, answered as JSON or — with `Accept: text/event-stream` — as
 * Server-Sent Events while it runs. This module only maps HTTP to the domain: the token, the body, the one admission
 * step (plan → lease → the user's budget), then the agent runtime; refusals in the conjure envelope.
 */

export function promptApp(): HttpApp {
  const router = new Router().on('POST', '/prompt', handlePrompt);
  return httpApp({ router, ...CONJURE_ENVELOPE });
}

async function handlePrompt(req: Request): Promise<Response> {
  requireJsonContentType(req);
  const json = parseJsonBody(await readBodyText(req));
  // The token first: a request without a valid one learns nothing about what else is wrong with it.
  const token = (json as { options?: { token?: unknown } } | null)?.options?.token;
  const caller = await authenticate(typeof token === 'string' ? token : undefined, {
    origin: req.headers.get('origin'),
    missingHint: ': send it in options.token',
  });
  const parsed = PromptBody.safeParse(json);
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  const { message, options: withToken } = parsed.data;
  const { token: _token, ...given } = withToken;
  const options = await checkedRunOptions(given);

  const sessionId = randomUUID();
  const started = clock.now();
  const admission = await admitRun(caller, { sessionId, kind: 'prompt', maxSeconds: MAX_RUN_SECONDS }, new Date(started));
  if (!admission.ok) throw new Refused(admission.refusal);

  const abort = new AbortController();
  const sse = (req.headers.get('accept') ?? '').includes('text/event-stream');
  let push: ((chunk: Uint8Array) => void) | undefined;
  // Events of the first model call that come before the answer's body exists (it waits for that call's admission).
  const early: Uint8Array[] = [];

  // The answer's status waits for the first model call: refused for the user's budget, the run is the interface's
  // 429 user_budget_exhausted with nothing charged, not a 200 carrying an error (the run ends at once, its compute
  // hold released). Admitted, the answer starts: its headers then, its events as they come.
  let firstCall: (refused?: Refusal) => void = () => undefined;
  const firstCallDone = new Promise<Refusal | undefined>((resolve) => {
    firstCall = resolve;
  });
  const log = accessRecord();
  log.model = options.model;
  // The run, and after it what it leaves behind — the lease, the compute — tracked so the invocation waits for both.
  const run = finishBeforeReturn(
    runAdmitted({
      caller,
      admission,
      message,
      options,
      started,
      signal: abort.signal,
      onEvent: (event) => {
        if (!sse) return;
        const chunk = encodeSse('message', event);
        if (push) push(chunk);
        else early.push(chunk);
      },
      onFirstCall: (refused) => firstCall(refused),
    }),
  );
  // The request's access line waits for the run's end, even when the client leaves mid-run: it carries every model
  // call of the run and its compute, as charged (each adds to the request's record: observability/access-log.ts).
  holdResponse(log, run);
  const refused = await Promise.race([firstCallDone, run.then(noRefusal, noRefusal)]);
  if (refused) {
    // Once the run has given back its holds: the refusal's figures as the user's meters are then (admitted-run.ts).
    const ended = await run.catch(noRefusal);
    throw new Refused(ended?.refusedForBudget ?? refused);
  }

  const body = new ReadableStream<Uint8Array>({
    async start(controller) {
      // After the client has gone (cancel), enqueue and close throw: there is no one left to tell.
      const send = (chunk: Uint8Array) => {
        try {
          controller.enqueue(chunk);
        } catch {
          // the client has gone
        }
      };
      const close = () => {
        try {
          controller.close();
        } catch {
          // the client has gone
        }
      };
      if (sse) {
        for (const chunk of early.splice(0)) send(chunk);
        push = send;
      }
      try {
        const { result, events } = await run;
        if (sse) {
          send(encodeSse('message', result));
          send(encodeSse('done', { sessionId }));
        } else send(encodeJson({ result, messages: [...jsonMessages(events), result], sessionId }));
        close();
      } catch (err) {
        logger.error('prompt run failed', { error: err as Error, sessionId });
        const failure = { type: 'error', error: 'internal_error', message: 'The gateway failed during the run' };
        send(sse ? encodeSse('message', failure) : encodeJson({ error: failure.error, message: failure.message }));
        close();
      }
    },
    // The client went away: the run stops (the model call in flight is charged for what was produced).
    cancel() {
      abort.abort();
    },
  });
  const headers: Record<string, string> = sse
    ? { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-session-id': sessionId }
    : { 'content-type': 'application/json', 'x-session-id': sessionId };
  return new Response(body, { headers });
}

const noRefusal = (): undefined => undefined;

const encodeJson = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** The run's events for the JSON answer: the text chunks of one turn joined into one assistant message. */
function jsonMessages(events: RunEvent[]): RunEvent[] {
  const out: RunEvent[] = [];
  for (const event of events) {
    const last = out.at(-1);
    if (event.type === 'assistant' && last?.type === 'assistant') out[out.length - 1] = { ...last, text: last.text + event.text };
    else out.push(event);
  }
  return out;
}
