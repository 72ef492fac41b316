import { CfnElement, Stack } from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FUNCTIONS, type FunctionSpec } from '../../lambdas/handlers/manifest.ts';
import { buildGatewayApp, gatewayOptions } from '../../lib/app.ts';
import { requireStreamingRegion, STREAMING_REGIONS } from '../../lib/regions.ts';
import { asArray, removeTestApps, roleStatements, testApp } from './helpers.ts';

/**
 * The deployed stack behaves like the tested one (issue 26): a first deploy in a fresh account orders every logging
 * API stage after API Gateway's CloudWatch role; an unsupported region is refused before anything is created; the
 * loops Lambda would cut are declared; the REST function may hand a canceled vessel's callback over.
 */

// One synth of the app as bin/app.ts builds it with no region known (env-agnostic, as an offline `cdk synth`).
const app = testApp();
const stack = buildGatewayApp(app);
type Resource = { Type: string; Properties?: Record<string, unknown>; DependsOn?: string | string[]; DeletionPolicy?: string };
let template: { Resources: Record<string, Resource>; Rules?: Record<string, { Assertions: Array<{ Assert: unknown; AssertDescription: string }> }> };

beforeAll(() => {
  template = app.synth().getStackByName(stack.stackName).template as typeof template;
}, 60_000);

afterAll(removeTestApps);

const ofType = (type: string) => Object.entries(template.Resources).filter(([, r]) => r.Type === type);
const logicalIdOf = (construct: IConstruct) => stack.getLogicalId((CfnElement.isCfnElement(construct) ? construct : construct.node.defaultChild) as CfnElement);
const specs = FUNCTIONS as readonly FunctionSpec[];

describe("API Gateway's CloudWatch role (first deploy)", () => {
  it('is one AWS::ApiGateway::Account, naming one role with the managed logging policy, both retained', () => {
    const accounts = ofType('AWS::ApiGateway::Account');
    expect(accounts).toHaveLength(1);
    const [, account] = accounts[0]!;
    expect(account.DeletionPolicy).toBe('Retain');
    const roleId = (account.Properties!.CloudWatchRoleArn as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const role = template.Resources[roleId]!;
    expect(role.DeletionPolicy).toBe('Retain');
    expect(JSON.stringify(role.Properties?.ManagedPolicyArns)).toContain('service-role/AmazonAPIGatewayPushToCloudWatchLogs');
    expect(JSON.stringify(role.Properties?.AssumeRolePolicyDocument)).toContain('apigateway.amazonaws.com');
  });

  it('every API stage with access logging (REST and WebSocket) is created after it', () => {
    const [accountId] = ofType('AWS::ApiGateway::Account')[0]!;
    const stages = [...ofType('AWS::ApiGateway::Stage'), ...ofType('AWS::ApiGatewayV2::Stage')].filter(
      ([, s]) => s.Properties?.AccessLogSetting ?? s.Properties?.AccessLogSettings,
    );
    // The conjure REST stage and the /ws WebSocket stage.
    expect(stages.map(([, s]) => s.Type).sort()).toEqual(['AWS::ApiGateway::Stage', 'AWS::ApiGatewayV2::Stage']);
    for (const [id, s] of stages) expect(asArray(s.DependsOn), id).toContain(accountId);
  });
});

describe('regions', () => {
  const unsupported = ['ca-west-1', 'eu-central-2', 'il-central-1', 'ap-southeast-5', 'ap-southeast-7', 'mx-central-1', 'us-gov-west-1', 'cn-north-1'];

  it('the allow-list has none of the regions without streaming function URLs', () => {
    for (const region of unsupported) expect(STREAMING_REGIONS, region).not.toContain(region);
    expect(STREAMING_REGIONS).toEqual(expect.arrayContaining(['us-east-1', 'eu-west-1', 'ap-northeast-1']));
  });

  it('the environment-agnostic template refuses any other region before creating a resource: a rule with the list', () => {
    const rule = template.Rules?.StreamingRegion;
    expect(rule).toBeDefined();
    expect(rule!.Assertions).toEqual([
      {
        Assert: { 'Fn::Contains': [[...STREAMING_REGIONS], { Ref: 'AWS::Region' }] },
        AssertDescription: expect.stringContaining(`Supported regions: ${STREAMING_REGIONS.join(', ')}`),
      },
    ]);
    expect(rule!.Assertions[0]!.AssertDescription).toMatch(/RESPONSE_STREAM/);
  });

  it.each(['ca-west-1', 'mx-central-1'])('synth for %s (-c region=…) fails naming the region, why, and the supported ones', (region) => {
    const refused = testApp({ region });
    expect(() => buildGatewayApp(refused)).toThrow(
      new RegExp(`cannot be deployed to ${region}: .*function URLs in RESPONSE_STREAM mode.*Supported regions: ${STREAMING_REGIONS.join(', ')}`),
    );
  });

  it('refuses GovCloud and China as well', () => {
    for (const region of unsupported) {
      expect(() => requireStreamingRegion(new Stack(undefined, 'Probe', { env: { region } })), region).toThrow(`cannot be deployed to ${region}`);
    }
  });

  it('synth for a supported region works: the stack is pinned to it, nag-clean, with no rule needed', () => {
    const supported = testApp({ region: 'eu-west-1' });
    const pinned = buildGatewayApp(supported);
    expect(pinned.region).toBe('eu-west-1');
    const synthesized = supported.synth().getStackByName(pinned.stackName).template as typeof template;
    expect(synthesized.Rules?.StreamingRegion).toBeUndefined();
    expect(Object.values(synthesized.Resources).filter((r) => r.Type === 'AWS::Lambda::Url')).toHaveLength(2);
  }, 60_000);

  it("the region comes from -c region, else the CLI's CDK_DEFAULT_REGION; malformed, it is refused", () => {
    expect(gatewayOptions(testApp(), {}).region).toBeUndefined();
    expect(gatewayOptions(testApp(), { CDK_DEFAULT_REGION: 'eu-north-1' }).region).toBe('eu-north-1');
    expect(gatewayOptions(testApp({ region: 'us-west-2' }), { CDK_DEFAULT_REGION: 'eu-north-1' }).region).toBe('us-west-2');
    expect(() => gatewayOptions(testApp({ region: 'Europe' }), {})).toThrow(/Context "region"/);
    expect(stack.region).toMatch(/^\$\{Token/);
  });
});

describe('CORS origins of a deployment', () => {
  it("-c corsOrigins is checked at synth and becomes every function's CORS_ORIGINS, canonical; unset or *, any origin", () => {
    expect(gatewayOptions(testApp({ corsOrigins: 'HTTPS://App.Example.com:443, https://*.example.org' }), {}).corsOrigins).toBe(
      'https://app.example.com,https://*.example.org',
    );
    expect(gatewayOptions(testApp(), {}).corsOrigins).toBeUndefined();
    expect(gatewayOptions(testApp({ corsOrigins: '*' }), {}).corsOrigins).toBeUndefined();
    expect(() => gatewayOptions(testApp({ corsOrigins: 'app.example.com' }), {})).toThrow(/Context "corsOrigins": "app.example.com" is not an origin/);
    const app = testApp({ corsOrigins: 'https://app.example.com' });
    const built = buildGatewayApp(app);
    const functions = Object.values(
      app.synth().getStackByName(built.stackName).template.Resources as Record<
        string,
        { Type: string; Properties: { Environment?: { Variables?: Record<string, string> } } }
      >,
    ).filter((r) => r.Type === 'AWS::Lambda::Function' && r.Properties.Environment?.Variables?.STAGE);
    expect(functions.length).toBeGreaterThan(5);
    for (const f of functions) expect(f.Properties.Environment?.Variables?.CORS_ORIGINS).toBe('https://app.example.com');
  }, 60_000);
});

describe('recursive loops', () => {
  const sendsToOwnTrigger = (spec: FunctionSpec) => spec.trigger.kind === 'sqs' && spec.access.queues.includes(spec.trigger.queue);

  it('a function that may send to the queue that triggers it declares the recursion, with a reason; no other does', () => {
    const looping = specs.filter(sendsToOwnTrigger).map((s) => s.id);
    expect(looping).toEqual(['VesselExecutor', 'WebhookSender']);
    for (const spec of specs) {
      expect(spec.recursion?.allowed === true, `${spec.id}: declare recursion exactly when it may send to its own trigger queue`).toBe(sendsToOwnTrigger(spec));
      if (spec.recursion) expect(spec.recursion.reason.length, spec.id).toBeGreaterThan(80);
    }
  });

  it('RecursiveLoop is Allow on exactly those functions, Terminate on every other', () => {
    for (const spec of specs) {
      const fn = template.Resources[logicalIdOf(stack.functionOf(spec.id).fn)]!;
      expect(fn.Properties?.RecursiveLoop, spec.id).toBe(spec.recursion?.allowed ? 'Allow' : 'Terminate');
    }
    expect(ofType('AWS::Lambda::Function').filter(([, f]) => f.Properties?.RecursiveLoop === 'Allow')).toHaveLength(2);
  });
});

describe('cancel hands the callback over', () => {
  it('the conjure function may send to the webhook queue (a canceled waiting vessel with a callback)', () => {
    const webhookArn = { 'Fn::GetAtt': [logicalIdOf(stack.queues.byName.webhook.queue), 'Arn'] };
    const sendsTo = roleStatements(template.Resources, logicalIdOf(stack.conjure.role))
      .map(({ statement }) => statement)
      .filter((st) => asArray(st.Action).includes('sqs:SendMessage'))
      .flatMap((st) => asArray(st.Resource as unknown));
    expect(sendsTo).toContainEqual(webhookArn);
  });
});
