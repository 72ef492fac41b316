import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it, onTestFinished } from 'vitest';
import { stackName } from '../../lib/app.ts';
import { PROJECT_ROOT } from '../../lib/bundling.ts';

const run = promisify(execFile);

describe('npx cdk synth', () => {
  it('synthesises the app offline with the project CLI: local esbuild bundling, no Docker, nag-clean', async () => {
    const out = mkdtempSync(join(tmpdir(), 'gateway-synth-'));
    onTestFinished(() => rmSync(out, { recursive: true, force: true }));
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      // The project's Node 22 (node_modules/.bin/node) first, for the CLI, tsx and esbuild alike.
      PATH: [join(PROJECT_ROOT, 'node_modules/.bin'), process.env.PATH].join(delimiter),
      CI: 'true',
      CDK_DISABLE_CLI_TELEMETRY: 'true',
      // No Docker here: bundling must never fall back to it.
      CDK_DOCKER: 'docker-is-not-available',
    };
    const result = await run('npx', ['cdk', 'synth', '--quiet', '--no-notices', '--output', out], {
      cwd: PROJECT_ROOT,
      env,
      timeout: 170_000,
      maxBuffer: 32 * 1024 * 1024,
    }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (err: { code?: number; stdout?: string; stderr?: string }) => ({ code: err.code ?? -1, stdout: err.stdout ?? '', stderr: err.stderr ?? '' }),
    );
    const hint = /Cloud assembly schema version mismatch/.test(result.stderr)
      ? '\nThe installed aws-cdk CLI is older than the cloud assembly aws-cdk-lib writes: package.json needs aws-cdk ^2.1148.1 ' +
        "(npm's aws-cdk@3.0.0 is a 2025-04 build that reads schema ≤ 43)."
      : '';
    expect(result.code, `cdk synth failed:${hint}\n${result.stderr}${result.stdout}`).toBe(0);

    const templateFile = join(out, `${stackName('dev')}.template.json`);
    expect(existsSync(templateFile)).toBe(true);
    const template = JSON.parse(readFileSync(templateFile, 'utf8')) as {
      Resources: Record<string, { Type: string; Properties?: Record<string, unknown> }>;
    };
    const functions = Object.values(template.Resources).filter((r) => r.Type === 'AWS::Lambda::Function');
    expect(functions.length).toBeGreaterThanOrEqual(2);

    // Every function's code was bundled here, by esbuild: an ESM bundle with its source map, and the chunks it loads
    // on first use. One asset per function (distinct bundles, not the first function's bundle for all).
    const assets = JSON.parse(readFileSync(join(out, `${stackName('dev')}.assets.json`), 'utf8')) as {
      files: Record<string, { source: { path: string; packaging?: string } }>;
    };
    const bundles = Object.values(assets.files).filter((f) => f.source.packaging === 'zip');
    expect(bundles).toHaveLength(functions.length);
    for (const { source } of bundles) {
      expect(statSync(join(out, source.path, 'index.mjs')).size).toBeGreaterThan(10_000);
      expect(existsSync(join(out, source.path, 'index.mjs.map'))).toBe(true);
    }
    // The agent's functions carry the schema validator and the MCP client as chunks loaded on first use.
    const chunks = (path: string) => (existsSync(join(out, path, 'chunks')) ? readdirSync(join(out, path, 'chunks')) : []);
    const promptCode = (Object.entries(template.Resources).find(([id, r]) => r.Type === 'AWS::Lambda::Function' && id.startsWith('Prompt'))?.[1].Properties
      ?.Code ?? {}) as { S3Key?: unknown };
    const promptAsset = bundles.find(({ source }) => typeof promptCode.S3Key === 'string' && promptCode.S3Key.startsWith(source.path.replace(/^asset\./, '')));
    expect(promptAsset, 'the Prompt function and its asset').toBeDefined();
    expect(chunks(promptAsset!.source.path)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^structured-output-.*\.mjs$/), expect.stringMatching(/^mcp-.*\.mjs$/)]),
    );
    expect(result.stderr).not.toMatch(/docker/i);

    // CORS is the functions' (docs/deploy.md, "CORS"): every REST resource with a route routes OPTIONS to its Lambda
    // proxy integration without authorization, and the function URLs carry no CORS configuration.
    const methods = Object.values(template.Resources)
      .filter((r) => r.Type === 'AWS::ApiGateway::Method')
      .map((r) => r.Properties as { HttpMethod: string; ResourceId: unknown; AuthorizationType?: string; Integration?: { Type?: string; Uri?: unknown } });
    const resourceOf = (m: { ResourceId: unknown }) => JSON.stringify(m.ResourceId);
    const preflights = methods.filter((m) => m.HttpMethod === 'OPTIONS');
    const routedResources = new Set(methods.filter((m) => m.HttpMethod !== 'OPTIONS').map(resourceOf));
    expect(routedResources.size).toBeGreaterThan(0);
    expect(new Set(preflights.map(resourceOf))).toEqual(routedResources);
    expect(preflights).toHaveLength(routedResources.size);
    for (const preflight of preflights) {
      expect(preflight).toMatchObject({ AuthorizationType: 'NONE', Integration: { Type: 'AWS_PROXY' } });
      const sibling = methods.find((m) => m.HttpMethod !== 'OPTIONS' && resourceOf(m) === resourceOf(preflight));
      expect(preflight.Integration?.Uri).toEqual(sibling?.Integration?.Uri);
    }
    const urls = Object.values(template.Resources).filter((r) => r.Type === 'AWS::Lambda::Url');
    expect(urls.length).toBeGreaterThan(0);
    for (const url of urls) expect(url.Properties).not.toHaveProperty('Cors');

    // The nag packs ran as validation plugins and found nothing unacknowledged.
    const report = JSON.parse(readFileSync(join(out, 'validation-report.json'), 'utf8')) as { pluginReports: Array<{ violations?: unknown[] }> };
    expect(report.pluginReports.flatMap((r) => r.violations ?? [])).toEqual([]);
  }, 180_000);
});
