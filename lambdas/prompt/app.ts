import { randomUUID } from 'node:crypto';
import { authenticate } from '../auth/authenticate.ts';
import { settle } from '../budgets/ledger.ts';
import { MAX_INVOCATION_SECONDS } from '../config/env.ts';
import { runAgent, type RunEvent } from '../agent/run.ts';
import { isHttpTool, PromptBody } from '../agent/options.ts';
import { schemaProblem } from '../agent/structured-output.ts';
import { httpApp, type HttpApp } from '../http/app.ts';
import { parseJsonBody, readBodyText } from '../http/body.ts';
import { Router } from '../http/router.ts';
import { track } from '../metering/settlements.ts';
import { logger } from '../observability/logger.ts';
import { admitRun } from '../plans/admission.ts';
import { addDeveloperCompute } from '../plans/compute.ts';
import { keepLeaseAlive, releaseLease } from '../plans/leases.ts';
import { describeIssue } from '../proxy/schema.ts';
import { CONJURE_ENVELOPE } from '../refusals/conjure.ts';
import { Refused } from '../refusals/refusal.ts';
import { routeModel } from '../routing/route.ts';
import { encodeSse } from '../streaming/sse.ts';
import { env } from '../config/env.ts';

/**
 * POST /prompt (docs/prompt.md): a one-shot agent run, answered as JSON or — with `Accept: text/event-stream` — as
 * Server-Sent Events while it runs. This module only maps HTTP to the domain: the token, the body, the one admission
 * step (plan → lease → the user's budget), then the agent runtime; refusals in the conjure envelope.
 */

/** A run ends this long before Lambda's limit, so its charges are written before the invocation is cut. */
const RUN_SECONDS_MARGIN = 30;
export const MAX_RUN_SECONDS = MAX_INVOCATION_SECONDS - RUN_SECONDS_MARGIN;

export function promptApp(): HttpApp {
  const router = new Router().on('POST', '/prompt', handlePrompt);
  return httpApp({ router, ...CONJURE_ENVELOPE });
}

async function handlePrompt(req: Request): Promise<Response> {
  const json = parseJsonBody(await readBodyText(req));
  // The token first: a request without a valid one learns nothing about what else is wrong with it.
  const token = (json as { options?: { token?: unknown } } | null)?.options?.token;
  const caller = await authenticate(typeof token === 'string' ? token : undefined, { missingHint: ': send it in options.token' });
  const parsed = PromptBody.safeParse(json);
  if (!parsed.success) throw new Refused({ kind: 'invalid_request', message: describeIssue(parsed.error) });
  const { message, options: withToken } = parsed.data;
  const { token: _token, ...options } = withToken;
  const model = options.model ?? env().DEFAULT_MODEL;
  if (options.tools?.some((t) => !isHttpTool(t)) && routeModel(model).provider !== 'anthropic') {
    throw new Refused({ kind: 'invalid_request', message: `options.tools: Anthropic server tools (a tool with a "type") run only with Claude models, not ${model}` });
  }
  const problem = options.outputFormat ? schemaProblem(options.outputFormat.schema) : undefined;
  if (problem) throw new Refused({ kind: 'invalid_request', message: `options.outputFormat.schema is not a usable JSON Schema: ${problem}` });

  const sessionId = randomUUID();
  const started = Date.now();
  const admission = await admitRun(caller, { sessionId, kind: 'prompt', maxSeconds: MAX_RUN_SECONDS }, new Date(started));
  if (!admission.ok) throw new Refused(admission.refusal);
  const { lease, compute, developerId } = admission;

  const abort = new AbortController();
  const heartbeat = keepLeaseAlive(lease);
  const sse = (req.headers.get('accept') ?? '').includes('text/event-stream');
  let push: ((chunk: Uint8Array) => void) | undefined;

  // The run, and after it what it leaves behind — the lease, the compute — tracked so the invocation waits for both.
  const run = track(
    (async () => {
      try {
        return await runAgent({
          caller,
          message,
          options: { ...options, model },
          deadline: started + compute!.seconds * 1000,
          signal: abort.signal,
          onEvent: (event) => push?.(encodeSse('message', event)),
        });
      } finally {
        heartbeat.stop();
        await Promise.allSettled([releaseLease(heartbeat.current()), chargeCompute(compute!, developerId, started)]);
      }
    })(),
  );

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
      if (sse) push = send;
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

/**
 * The run's wall-clock seconds, rounded up, on the user's compute meter (settling the run's reservation, never above
 * what it held) and on the developer's month.
 */
async function chargeCompute(compute: { reservation: Parameters<typeof settle>[0]; seconds: number }, developerId: string, started: number): Promise<void> {
  const seconds = Math.min(Math.max(1, Math.ceil((Date.now() - started) / 1000)), compute.seconds);
  try {
    await Promise.all([settle(compute.reservation, { ai: 0, compute: seconds }), addDeveloperCompute(developerId, seconds)]);
  } catch (err) {
    // The hold stays and the sweep charges it at its full amount: never less than what was used.
    logger.error('charging compute failed', { error: err as Error, seconds });
  }
}
