import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App } from 'aws-cdk-lib';
import { PROJECT_ROOT } from '../../lib/bundling.ts';

/** The context cdk.json gives the CLI, so in-process apps are built with the same feature flags. */
export function cdkJsonContext(): Record<string, unknown> {
  return (JSON.parse(readFileSync(join(PROJECT_ROOT, 'cdk.json'), 'utf8')) as { context: Record<string, unknown> }).context;
}

const outdirs: string[] = [];

/**
 * An app for in-process assertions: cdk.json's context plus `extra`, a temporary output directory, and asset
 * bundling skipped (the CLI synth test and the handler tests bundle for real).
 */
export function testApp(extra: Record<string, unknown> = {}): App {
  const outdir = mkdtempSync(join(tmpdir(), 'gateway-cdk-'));
  outdirs.push(outdir);
  return new App({ outdir, context: { ...cdkJsonContext(), 'aws:cdk:bundling-stacks': [], ...extra } });
}

/** Removes the output directories of every testApp() made so far (call it in afterAll). */
export function removeTestApps(): void {
  for (const dir of outdirs.splice(0)) rmSync(dir, { recursive: true, force: true });
}

export interface PolicyStatement {
  Effect: string;
  Action?: string | string[];
  Resource?: unknown;
  Principal?: unknown;
  Condition?: unknown;
}

type Resources = Record<string, { Type: string; Properties?: Record<string, unknown> }>;

/** Every statement of every IAM policy in a template (inline role policies, policies, managed policies). */
export function iamStatements(resources: Resources): Array<{ logicalId: string; statement: PolicyStatement }> {
  const out: Array<{ logicalId: string; statement: PolicyStatement }> = [];
  const add = (logicalId: string, doc: unknown) => {
    const statements = (doc as { Statement?: PolicyStatement[] } | undefined)?.Statement ?? [];
    for (const statement of statements) out.push({ logicalId, statement });
  };
  for (const [logicalId, resource] of Object.entries(resources)) {
    const props = resource.Properties ?? {};
    if (resource.Type === 'AWS::IAM::Policy' || resource.Type === 'AWS::IAM::ManagedPolicy') add(logicalId, props.PolicyDocument);
    if (resource.Type === 'AWS::IAM::Role') {
      for (const policy of (props.Policies as Array<{ PolicyDocument: unknown }> | undefined) ?? []) add(logicalId, policy.PolicyDocument);
    }
  }
  return out;
}

/**
 * The statements of the IAM role `roleLogicalId`: its inline policies' and those of every policy attached to it
 * (`Roles`), as iamStatements gives them.
 */
export function roleStatements(resources: Resources, roleLogicalId: string): Array<{ logicalId: string; statement: PolicyStatement }> {
  const ref = JSON.stringify({ Ref: roleLogicalId });
  return iamStatements(resources).filter(
    ({ logicalId }) =>
      logicalId === roleLogicalId || asArray(resources[logicalId]!.Properties?.Roles as unknown[] | undefined).some((r) => JSON.stringify(r) === ref),
  );
}

export const asArray = <T>(value: T | T[] | undefined): T[] => (value === undefined ? [] : Array.isArray(value) ? value : [value]);
