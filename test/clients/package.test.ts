import { execFile } from 'node:child_process';
import { mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

/**
 * Issue 28, done-when 2 (DESIGN §10, "The owner's kit"): packages/client is built and packed by `npm pack` (its
 * prepack builds dist/), the tarball is installed into an empty folder outside the repository, and the README's
 * example — the `example.mjs` block, copied as it is — runs there against a running local gateway (in process, with
 * simulated upstreams): it mints a token, runs /prompt as JSON and streamed, queues a vessel and waits for it and for
 * its webhook (verified by its own receiver), reads /usage, runs a /ws session with a client tool. It runs on the
 * Node of this test (22: its own WebSocket) and, where one is installed, on a Node without a global WebSocket (the
 * `ws` package, as the example says). A TypeScript file type-checks against the installed package's declarations.
 */

vi.setConfig({ testTimeout: 180_000 });
const run = promisify(execFile);
const REPO = resolve(import.meta.dirname, '../..');
const PACKAGE = join(REPO, 'packages/client');

let gw: TestGateway;
let work: string;
let app: string;
let tarball: string;

beforeAll(async () => {
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1,1' } });
  work = await mkdtemp(join(tmpdir(), 'prompt-gateway-client-'));
  expect(relative(REPO, work).startsWith('..')).toBe(true);
  // npm pack runs prepack (the build) first; --json prints only the summary on stdout.
  const packed = await run('npm', ['pack', '--json', '--pack-destination', work], { cwd: PACKAGE, maxBuffer: 16 << 20 });
  tarball = join(work, (JSON.parse(packed.stdout) as { filename: string }[])[0]!.filename);
  app = join(work, 'app');
  await run('mkdir', [app]);
  await writeFile(join(app, 'package.json'), JSON.stringify({ name: 'kit-example', private: true, type: 'module' }));
  const ws = JSON.parse(await readFile(join(REPO, 'node_modules/ws/package.json'), 'utf8')).version as string;
  await run('npm', ['install', tarball, `ws@${ws}`, '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'], { cwd: app, maxBuffer: 16 << 20 });
}, 180_000);

afterAll(async () => {
  await gw?.stop();
  if (work) await rm(work, { recursive: true, force: true });
});

/** The README's example, exactly as written there. */
async function readmeExample(): Promise<string> {
  const readme = await readFile(join(PACKAGE, 'README.md'), 'utf8');
  const block = /```js title=example\.mjs\n([\s\S]*?)```/.exec(readme);
  expect(block, 'README.md has an example.mjs block').not.toBeNull();
  return block![1]!;
}

async function runExample(node: string) {
  const { stdout, stderr } = await run(node, ['example.mjs'], {
    cwd: app,
    env: { PATH: process.env.PATH, GATEWAY_URL: gw.url, PROJECT_ID: gw.projectId, PROJECT_SECRET: gw.secret },
    timeout: 120_000,
  });
  return { stdout, stderr };
}

/** A Node older than 22 on this machine (no global WebSocket), if there is one. */
async function olderNode(): Promise<string | undefined> {
  for (const candidate of ['/usr/bin/node', '/usr/local/bin/node']) {
    const version = await run(candidate, ['--version']).then(
      (r) => r.stdout.trim(),
      () => undefined,
    );
    if (version && Number(/^v(\d+)/.exec(version)?.[1]) < 22 && Number(/^v(\d+)/.exec(version)?.[1]) >= 18) return candidate;
  }
  return undefined;
}

describe('the package, as an app installs it', () => {
  it('packs dist/ (ESM and declarations) and the README, nothing Node-only in what browsers load', async () => {
    const listing = (await run('tar', ['-tzf', tarball])).stdout.trim().split('\n').sort();
    expect(listing).toEqual(
      [
        'package/README.md',
        'package/package.json',
        ...['client', 'crypto', 'errors', 'index', 'session', 'sse', 'token', 'types', 'webhook'].flatMap((f) => [
          `package/dist/${f}.d.ts`,
          `package/dist/${f}.js`,
        ]),
      ].sort(),
    );
    const installed = join(app, 'node_modules/@prompt-gateway/client');
    const manifest = JSON.parse(await readFile(join(installed, 'package.json'), 'utf8'));
    expect(manifest).toMatchObject({
      name: '@prompt-gateway/client',
      type: 'module',
      exports: { '.': { types: './dist/index.d.ts', default: './dist/index.js' } },
    });
    expect(manifest.dependencies).toBeUndefined();
    for (const file of await readdir(join(installed, 'dist'))) {
      if (!file.endsWith('.js')) continue;
      const code = await readFile(join(installed, 'dist', file), 'utf8');
      // Only relative imports; node:crypto is reached on Node 18 alone, through a specifier in a variable.
      const imports = [...code.matchAll(/^(?:import|export)\b[^'"\n]*from\s*['"]([^'"]+)['"]/gm), ...code.matchAll(/\bimport\(\s*['"]([^'"]+)['"]/g)];
      expect(
        imports.map((m) => m[1]).filter((s) => !s!.startsWith('./')),
        file,
      ).toEqual([]);
      expect(code, file).not.toMatch(/\bBuffer\b|\brequire\(|aws-sdk/);
    }
  });

  it("runs the README's example against a running gateway", async () => {
    await writeFile(join(app, 'example.mjs'), await readmeExample());
    const nodes = [process.execPath];
    const older = await olderNode();
    if (older) nodes.push(older);
    else console.warn('package.test.ts: no Node 18–21 on this machine; the example ran on this Node only');
    for (const node of nodes) {
      const { stdout, stderr } = await runExample(node);
      const lines = stdout.trim().split('\n');
      expect(stderr, node).toBe('');
      expect(lines[0], node).toBe('prompt: success Echo: Say hello');
      expect(lines[1], node).toMatch(/^stream: word1 word2 word3 word4 word5 \(\d+ µ\$\)$/);
      expect(lines[2], node).toBe('vessel: COMPLETED Echo: Summarise the week');
      expect(lines[3], node).toBe('webhook: COMPLETED verified');
      expect(lines[4], node).toMatch(/^usage: [1-9]\d* µ\$ of 2000000 ; compute [1-9]\d* s$/);
      expect(lines[5], node).toMatch(/^session: [0-9a-f-]{36} success Tool results: Paris, 12–14 June\. Walk along the Seine\.$/);
      expect(lines[6], node).toMatch(/^refused: 404 vessel_not_found req_gw_[0-9a-f]{24}$/);
      expect(lines, node).toHaveLength(7);
    }
  });

  it('type-checks a TypeScript app against the installed declarations', async () => {
    await writeFile(
      join(app, 'app.ts'),
      `import { createGatewayClient, GatewayError, mintUserToken, verifyWebhook, type PromptMessage, type WebhookPayload } from '@prompt-gateway/client';
import WebSocket from 'ws';
const token: string = await mintUserToken({ projectId: 'p', secret: 's', userId: 'u', budget: { ai: 1, compute: 1, window: 'day' }, expiresIn: '1h' });
const payload: WebhookPayload = await verifyWebhook('{}', new Headers(), 's');
const gateway = createGatewayClient({ baseUrl: 'http://127.0.0.1:8787', token, WebSocket });
for await (const m of gateway.promptStream('hi')) { const t: PromptMessage['type'] = m.type; void t; }
try { await gateway.usage(); } catch (err) { if (err instanceof GatewayError && err.is('user_budget_exhausted')) { const n: number = err.body.ai.remaining; void n; } }
const session = await gateway.session({ onToolUse: ({ input }) => String(input.title) });
const result = await session.send('hi');
const cost: number = result.total_cost_microdollars;
void payload; void cost;
`,
    );
    await writeFile(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'ES2022',
          module: 'NodeNext',
          moduleResolution: 'NodeNext',
          lib: ['ES2022', 'DOM'],
          strict: true,
          noEmit: true,
          types: [],
          typeRoots: [],
        },
        files: ['app.ts', 'ws.d.ts'],
      }),
    );
    // ws has no declarations of its own (@types/ws is not installed here): this app declares what it uses.
    await writeFile(join(app, 'ws.d.ts'), "declare module 'ws' { const WebSocket: { new (url: string): globalThis.WebSocket }; export default WebSocket; }\n");
    const tsc = join(REPO, 'node_modules/typescript/bin/tsc');
    const out = await run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app }).catch((err: { stdout: string }) => ({
      stdout: err.stdout,
      failed: true,
    }));
    expect(out.stdout).toBe('');
    expect('failed' in out).toBe(false);
  });
});
