import { Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { pathToFileURL } from 'node:url';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { lambdaContext, scheduledEvent } from '../../bin/local/events.ts';
import { FUNCTIONS, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { deferUntilReturn, finishBeforeReturn, ownUnfinishedWork, unfinishedWork } from '../../lambdas/instance/unfinished.ts';
import { PROJECT_ROOT } from '../../lib/bundling.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * Every function of the manifest drains the work after the response before its invocation ends (docs/architecture.md,
 * "No charge left behind"): work waiting when an invocation starts — one task deferred, one already running that
 * only the deferred task lets end — has ended by the time the handler's promise settles. Only a drain starts the
 * deferred task: the gateway here serves no function, so no other invocation can.
 */

let gw: TestGateway;
beforeAll(async () => {
  // The environment and tables of a local gateway, with none of its functions running beside the test.
  gw = await startTestGateway({ functions: [] });
});
afterAll(() => gw?.stop());

/** A response stream for a RESPONSE_STREAM handler: takes the prelude and the bytes, and keeps nothing. */
class DiscardingResponseStream extends Writable {
  setPrelude(): void {}
  override _write(_chunk: Buffer, _encoding: BufferEncoding, callback: () => void): void {
    callback();
  }
}

/** The smallest event of each trigger that the function answers without a caller or any stored data. */
function minimalEvent(spec: FunctionSpec): unknown {
  const requestContext = { requestId: 'drain-test', stage: '$default', domainName: 'gateway.invalid' };
  switch (spec.trigger.kind) {
    case 'streaming-url': {
      const rawPath = `${spec.trigger.paths[0]}/no-such-route`;
      return {
        version: '2.0',
        rawPath,
        rawQueryString: '',
        headers: {},
        requestContext: { ...requestContext, http: { method: 'GET', path: rawPath } },
        isBase64Encoded: false,
      };
    }
    case 'rest':
      return {
        httpMethod: 'GET',
        path: '/no-such-route',
        headers: {},
        queryStringParameters: null,
        multiValueQueryStringParameters: null,
        body: null,
        isBase64Encoded: false,
        requestContext,
      };
    case 'sqs':
      return { Records: [] };
    case 'websocket':
      // $connect without a token: refused before anything is stored.
      return { headers: {}, requestContext: { ...requestContext, connectionId: 'drain-test', eventType: 'CONNECT', routeKey: '$connect' } };
    case 'schedule':
      return scheduledEvent(spec.id);
  }
}

function invoke(spec: FunctionSpec, handler: (...args: unknown[]) => Promise<unknown>): Promise<unknown> {
  const context = lambdaContext(spec.id);
  const event = minimalEvent(spec);
  return spec.trigger.kind === 'streaming-url' ? handler(event, new DiscardingResponseStream(), context) : handler(event, context);
}

describe('every function drains the unfinished work before its invocation ends', () => {
  it.each(FUNCTIONS.map((spec) => [spec.id, spec] as const))('%s', async (_id, spec) => {
    const { handler } = (await import(pathToFileURL(join(PROJECT_ROOT, spec.entry)).href)) as { handler: (...args: unknown[]) => Promise<unknown> };
    let letRunningEnd!: () => void;
    const gate = new Promise<void>((resolve) => (letRunningEnd = resolve));
    const ended = { deferred: false, running: false };
    deferUntilReturn(async () => {
      await sleep(30);
      ended.deferred = true;
      letRunningEnd();
    });
    void finishBeforeReturn(gate.then(() => sleep(30)).then(() => (ended.running = true)));

    // Answered or failed alike: the drain runs either way.
    await invoke(spec, handler).catch(() => undefined);
    expect(ended).toEqual({ deferred: true, running: true });
  });
});

describe('an invocation drains its own work, not another one’s', () => {
  it("waits for what it registered, and not for a concurrent invocation's work", async () => {
    let releaseOther!: () => void;
    const other = ownUnfinishedWork(async () => {
      void finishBeforeReturn(new Promise<void>((resolve) => (releaseOther = resolve)));
      await unfinishedWork();
    });
    let own = false;
    await ownUnfinishedWork(async () => {
      void finishBeforeReturn(sleep(30).then(() => (own = true)));
      await unfinishedWork();
    });
    expect(own).toBe(true);
    // The other invocation still waits for its own work, which nothing has let end yet.
    const settled = await Promise.race([other.then(() => 'drained'), sleep(50).then(() => 'waiting')]);
    expect(settled).toBe('waiting');
    releaseOther();
    await other;
  });
});
