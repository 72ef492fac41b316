import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SQS_CONCURRENCY, functionForPath, localFunctions, matchesResourcePath, rateIntervalMs } from '../../bin/local/runtime.ts';
import { CONJURE_ROUTES } from '../../lambdas/conjure/routes.ts';
import { FUNCTIONS, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { queueSpec } from '../../lambdas/store/queues.ts';
import { buildGatewayApp } from '../../lib/app.ts';
import { bundledHandlers, PROJECT_ROOT } from '../../lib/bundling.ts';
import { removeTestApps, testApp } from '../lib/helpers.ts';

type Resources = Record<string, { Type: string; Properties?: Record<string, unknown> }>;
let resources: Resources;
let outputs: Record<string, { Value: unknown }>;

beforeAll(() => {
  // The app exactly as bin/app.ts builds it, synthesised offline (bundling skipped) as test/lib does.
  const app = testApp();
  const stack = buildGatewayApp(app);
  const template = app.synth().getStackByName(stack.stackName).template as { Resources: Resources; Outputs: typeof outputs };
  resources = template.Resources;
  outputs = template.Outputs;
}, 60_000);
afterAll(removeTestApps);

const ids = (list: ReadonlyArray<{ id: string }>) => list.map((f) => f.id).sort();
const manifestIds = ids(FUNCTIONS);

/** The functions of the synthesised template, by the `<Id>FunctionName` output naming each one. */
function deployed(): Array<{ id: string; logicalId: string; props: Record<string, unknown> }> {
  return Object.entries(outputs).flatMap(([name, output]) => {
    const logicalId = (output.Value as { Ref?: string }).Ref;
    const match = /^(.+)FunctionName$/.exec(name);
    if (!match || !logicalId || resources[logicalId]?.Type !== 'AWS::Lambda::Function') return [];
    return [{ id: match[1]!, logicalId, props: resources[logicalId]!.Properties! }];
  });
}

describe('one manifest of functions', () => {
  it('the stack, the bundler and the local runtime serve the same set of functions: the manifest', () => {
    expect(manifestIds.length).toBeGreaterThan(0);
    expect(new Set(manifestIds).size).toBe(manifestIds.length);
    const lambdaFunctions = Object.values(resources).filter((r) => r.Type === 'AWS::Lambda::Function');
    expect(lambdaFunctions).toHaveLength(FUNCTIONS.length);
    expect(ids(deployed())).toEqual(manifestIds);
    expect(ids(bundledHandlers())).toEqual(manifestIds);
    expect(ids(localFunctions())).toEqual(manifestIds);
  });

  it('each one with the same entry file everywhere, and that file exists and exports a handler', () => {
    for (const spec of FUNCTIONS) {
      const absolute = join(PROJECT_ROOT, spec.entry);
      expect(existsSync(absolute), spec.entry).toBe(true);
      expect(readFileSync(absolute, 'utf8'), spec.entry).toMatch(/export (const|async function|function) handler\b/);
      expect(bundledHandlers().find((h) => h.id === spec.id)?.entry).toBe(absolute);
      expect(localFunctions().find((f) => f.id === spec.id)?.entry).toBe(absolute);
    }
  });

  it("deployed with the manifest's description, memory and timeout", () => {
    for (const { id, props } of deployed()) {
      const spec: FunctionSpec = FUNCTIONS.find((f) => f.id === id)!;
      expect(props, id).toMatchObject({ Description: spec.description, MemorySize: spec.memoryMb, Timeout: spec.timeoutSeconds });
    }
  });

  it('triggered as the manifest says, in the stack and locally', () => {
    const byId = new Map(deployed().map((d) => [d.id, d.logicalId]));
    const local = localFunctions();
    for (const spec of FUNCTIONS as readonly FunctionSpec[]) {
      const logicalId = byId.get(spec.id)!;
      const target = JSON.stringify({ 'Fn::GetAtt': [logicalId, 'Arn'] });
      const served = local.find((f) => f.id === spec.id)!;
      expect(served.kind, spec.id).toBe(spec.trigger.kind);
      expect(served.timeoutMs).toBe(spec.timeoutSeconds * 1000);
      switch (spec.trigger.kind) {
        case 'streaming-url': {
          const urls = Object.values(resources).filter((r) => r.Type === 'AWS::Lambda::Url' && JSON.stringify(r.Properties?.TargetFunctionArn) === target);
          expect(urls.map((u) => u.Properties?.InvokeMode)).toEqual(['RESPONSE_STREAM']);
          expect(outputs[`${spec.id}Url`]).toBeDefined();
          expect(served.kind === 'streaming-url' && served.paths).toEqual(spec.trigger.paths);
          break;
        }
        case 'rest': {
          const methods = Object.values(resources)
            .filter((r) => r.Type === 'AWS::ApiGateway::Method' && JSON.stringify(r.Properties?.Integration).includes(JSON.stringify(logicalId)))
            .map((r) => r.Properties?.HttpMethod)
            .sort();
          // Its routes' methods, and OPTIONS (the CORS preflight) once on each of their paths (docs/deploy.md, "CORS").
          const preflights = [...new Set(spec.trigger.routes.map((r) => r.path))].map(() => 'OPTIONS');
          expect(methods).toEqual([...spec.trigger.routes.map((r) => r.method), ...preflights].sort());
          expect(served.kind === 'rest' && served.routes).toEqual(spec.trigger.routes);
          break;
        }
        case 'sqs': {
          const mappings = Object.values(resources).filter(
            (r) => r.Type === 'AWS::Lambda::EventSourceMapping' && JSON.stringify(r.Properties?.FunctionName).includes(logicalId),
          );
          expect(mappings).toHaveLength(1);
          const batchSize = spec.trigger.batchSize ?? queueSpec(spec.trigger.queue).batchSize;
          expect(mappings[0]!.Properties).toMatchObject({ BatchSize: batchSize, FunctionResponseTypes: ['ReportBatchItemFailures'] });
          expect(mappings[0]!.Properties?.ScalingConfig).toEqual(spec.trigger.maxConcurrency ? { MaximumConcurrency: spec.trigger.maxConcurrency } : undefined);
          expect(served.kind === 'sqs' && served.batchSize).toBe(batchSize);
          // Locally as many pollers as the deployed event source may run invocations (Lambda's starting five when unset).
          expect(served.kind === 'sqs' && served.maxConcurrency).toBe(spec.trigger.maxConcurrency ?? DEFAULT_SQS_CONCURRENCY);
          break;
        }
        case 'schedule': {
          const rules = Object.values(resources).filter(
            (r) => r.Type === 'AWS::Events::Rule' && JSON.stringify(r.Properties?.Targets).includes(JSON.stringify({ 'Fn::GetAtt': [logicalId, 'Arn'] })),
          );
          expect(rules.map((r) => [r.Properties?.ScheduleExpression, r.Properties?.State])).toEqual([[spec.trigger.expression, 'ENABLED']]);
          // EventBridge may invoke it, and only from its rule.
          const permissions = Object.values(resources).filter(
            (r) => r.Type === 'AWS::Lambda::Permission' && JSON.stringify(r.Properties?.FunctionName).includes(logicalId),
          );
          expect(permissions.map((p) => p.Properties?.Principal)).toEqual(['events.amazonaws.com']);
          expect(served.kind === 'schedule' && served.intervalMs).toBe(rateIntervalMs(spec.trigger.expression));
          break;
        }
        case 'websocket': {
          // $connect, $disconnect and $default of one WebSocket API, each integrated with the function; locally /ws.
          const integrations = Object.entries(resources).filter(
            ([, r]) => r.Type === 'AWS::ApiGatewayV2::Integration' && JSON.stringify(r.Properties?.IntegrationUri).includes(target),
          );
          expect(integrations.length).toBeGreaterThan(0);
          const routeKeys = Object.values(resources)
            .filter(
              (r) =>
                r.Type === 'AWS::ApiGatewayV2::Route' &&
                integrations.some(([id]) => JSON.stringify(r.Properties?.Target).includes(JSON.stringify({ Ref: id }))),
            )
            .map((r) => r.Properties?.RouteKey)
            .sort();
          expect(routeKeys).toEqual(['$connect', '$default', '$disconnect']);
          expect(outputs[`${spec.id}WebSocketUrl`]).toBeDefined();
          expect(served.kind === 'websocket' && served.path).toBe('/ws');
          break;
        }
        default:
          // Every trigger kind is checked above: a new kind fails to compile here until it is.
          throw new Error(`${spec.id}: unchecked trigger ${JSON.stringify(spec.trigger satisfies never)}`);
      }
    }
  });

  it("conjure's REST routes are declared once: the API's methods are CONJURE_ROUTES", () => {
    const conjure = FUNCTIONS.find((f) => f.id === 'ConjureApi')!;
    expect(conjure.trigger).toEqual({ kind: 'rest', routes: CONJURE_ROUTES });
    const paths = Object.values(resources)
      .filter((r) => r.Type === 'AWS::ApiGateway::Resource')
      .map((r) => r.Properties?.PathPart);
    for (const route of CONJURE_ROUTES) expect(paths).toContain(route.path.split('/').pop());
  });
});

describe('the local runtime routes by the manifest', () => {
  const local = localFunctions();
  const servedBy = (path: string) => functionForPath(local, path)?.id;

  it('function URLs by path prefix, REST functions by route, anything else to the REST function (its own 404)', () => {
    expect(servedBy('/v1')).toBe('Channeling');
    expect(servedBy('/v1/messages')).toBe('Channeling');
    expect(servedBy('/v1/models/claude-x')).toBe('Channeling');
    expect(servedBy('/usage')).toBe('ConjureApi');
    expect(servedBy('/usage/')).toBe('ConjureApi');
    expect(servedBy('/v1x')).toBe('ConjureApi');
    expect(servedBy('/nope')).toBe('ConjureApi');
    expect(servedBy('/')).toBe('ConjureApi');
  });

  it('matches API Gateway resource paths with parameters', () => {
    expect(matchesResourcePath('/incubate/vessel/{id}', '/incubate/vessel/v_1')).toBe(true);
    expect(matchesResourcePath('/incubate/vessel/{id}', '/incubate/vessel/v_1/')).toBe(true);
    expect(matchesResourcePath('/incubate/vessel/{id}', '/incubate/vessel')).toBe(false);
    expect(matchesResourcePath('/incubate/vessel/{id}', '/incubate/vessel/v_1/cancel')).toBe(false);
    expect(matchesResourcePath('/incubate/vessel/{id}/cancel', '/incubate/vessel/v_1/cancel')).toBe(true);
    expect(matchesResourcePath('/files/{path+}', '/files/a/b/c')).toBe(true);
    expect(matchesResourcePath('/files/{path+}', '/files')).toBe(false);
    expect(matchesResourcePath('/usage', '/Usage')).toBe(false);
  });

  it('a second REST function gets its own routes; the first keeps the unknown paths', () => {
    const extra: FunctionSpec = {
      id: 'Archive',
      entry: 'lambdas/handlers/conjure-api.ts',
      description: 'archive',
      memoryMb: 512,
      timeoutSeconds: 29,
      trigger: { kind: 'rest', routes: [{ method: 'GET', path: '/archive/{id}' }] },
      access: { tables: {}, providers: false, queues: [] },
    };
    const both = localFunctions([...FUNCTIONS, extra]);
    expect(functionForPath(both, '/archive/a_9')?.id).toBe('Archive');
    expect(functionForPath(both, '/usage')?.id).toBe('ConjureApi');
    expect(functionForPath(both, '/archive')?.id).toBe('ConjureApi');
    expect(both.find((f) => f.id === 'Archive')?.functionName).toBe('archive');
    expect(Object.fromEntries(local.map((f) => [f.id, f.functionName]))).toEqual({
      Channeling: 'channeling',
      ConjureApi: 'conjure-api',
      Prompt: 'prompt',
      VesselExecutor: 'vessel-executor',
      VesselReconciler: 'vessel-reconciler',
      WebhookSender: 'webhook-sender',
      Sessions: 'sessions',
      SessionTurn: 'session-turn',
      SessionSweeper: 'session-sweeper',
    });
  });

  it('serves one websocket function at /ws and refuses, at startup, two of them or a cron schedule', () => {
    const later = (trigger: FunctionSpec['trigger'], id = 'Later'): FunctionSpec => ({
      ...FUNCTIONS[0],
      id,
      trigger,
      access: { tables: {}, providers: false, queues: [] },
    });
    expect(localFunctions(FUNCTIONS).find((f) => f.kind === 'websocket')).toMatchObject({ id: 'Sessions', kind: 'websocket', path: '/ws' });
    // The manifest's own websocket function (Sessions) set aside, another one takes /ws.
    const withoutSessions = FUNCTIONS.filter((f) => f.id !== 'Sessions');
    expect(localFunctions([...withoutSessions, later({ kind: 'websocket' })]).at(-1)).toMatchObject({ id: 'Later', kind: 'websocket', path: '/ws' });
    expect(() => localFunctions([...FUNCTIONS, later({ kind: 'websocket' })])).toThrow(
      /serves one websocket function at \/ws, and the manifest has 2 \(Sessions, Later;/,
    );
    expect(() => localFunctions([...withoutSessions, later({ kind: 'websocket' }), later({ kind: 'websocket' }, 'Other')])).toThrow(
      /serves one websocket function at \/ws, and the manifest has 2 \(Later, Other;/,
    );
    expect(() => localFunctions([...FUNCTIONS, later({ kind: 'schedule', expression: 'cron(0 3 * * ? *)' })])).toThrow(/Later.*not cron/);
    expect(localFunctions([...FUNCTIONS, later({ kind: 'schedule', expression: 'rate(5 minutes)' })]).at(-1)).toMatchObject({
      kind: 'schedule',
      intervalMs: 300_000,
    });
  });
});
