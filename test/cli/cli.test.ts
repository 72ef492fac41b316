import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { decodeJwt } from 'jose';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { main } from '../../bin/gateway.ts';
import { mintToken } from '../../lambdas/auth/tokens.ts';
import { resolveTarget } from '../../bin/cli/target.ts';
import { addDeveloperCompute } from '../../lambdas/budgets/developer-month.ts';
import { acquireLease } from '../../lambdas/plans/leases.ts';
import { keyCipher, LocalKeyCipher } from '../../lambdas/registry/key-cipher.ts';
import {
  createDeveloper,
  createProject,
  describeProject,
  getDeploymentPricing,
  getProject,
  providerKeyFor,
  RegistryError,
  rotateProjectSecret,
  setModelPricing,
} from '../../lambdas/registry/registry.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';

const ROOT = resolve(import.meta.dirname, '../..');
const PROVIDER_KEY = 'sk-cli-test-Zq8vT3nR5wX1';
let gw: TestGateway;
let dataDir: string;
let emptyDir: string;
const allStdout: string[] = [];

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'gw-cli-'));
  emptyDir = mkdtempSync(join(tmpdir(), 'gw-cli-empty-'));
  gw = await startTestGateway({ dataDir });
});
afterAll(async () => {
  await gw?.stop();
  for (const d of [dataDir, emptyDir]) if (d) rmSync(d, { recursive: true, force: true });
});

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the operator CLI as an operator would, with only DATA_DIR pointing it at the running gateway. */
function cli(args: string[], opts: { dataDir?: string } = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(
      join(ROOT, 'node_modules/.bin/tsx'),
      ['bin/gateway.ts', ...args],
      {
        cwd: ROOT,
        // A clean environment: nothing of the test process's store settings leaks into the CLI.
        env: { PATH: `${join(ROOT, 'node_modules/.bin')}:${process.env.PATH ?? ''}`, HOME: process.env.HOME ?? tmpdir(), DATA_DIR: opts.dataDir ?? dataDir },
        // Each run is a tsx process loading the AWS SDK; on a loaded two-core machine that can take a while.
        timeout: 60_000,
      },
      (err, stdout, stderr) => {
        allStdout.push(stdout);
        done({ code: err ? ((err as { code?: number }).code ?? -1) : 0, stdout, stderr });
      },
    );
  });
}

const json = (run: Run): Record<string, unknown> => {
  expect(run.stderr).toBe('');
  expect(run.code).toBe(0);
  expect(run.stdout.endsWith('\n')).toBe(true);
  expect(run.stdout.trim().split('\n')).toHaveLength(1);
  return JSON.parse(run.stdout) as Record<string, unknown>;
};

describe('operator CLI against a running local gateway', () => {
  it("developer set-plan changes the tier; developer show lists the live runs and the month's compute", async () => {
    json(await cli(['developer', 'create', '--id', 'dev-plan', '--plan-seconds', '1000', '--json']));
    const raised = json(await cli(['developer', 'set-plan', '--id', 'dev-plan', '--plan-seconds', '15000000', '--pool-seconds', '7', '--json']));
    expect(raised).toMatchObject({ developerId: 'dev-plan', planSeconds: 15_000_000, poolSeconds: 7, tier: 'pro', maxConcurrency: 10 });
    // The pool stays as it is when not given.
    expect(json(await cli(['developer', 'set-plan', '--id', 'dev-plan', '--plan-seconds', '3500000', '--json']))).toMatchObject({
      planSeconds: 3_500_000,
      poolSeconds: 7,
      tier: 'starter',
      maxConcurrency: 5,
    });

    const started = Date.now();
    const lease = await acquireLease('dev-plan', { sessionId: 'run-cli', userId: 'alice', projectId: 'prj_x', kind: 'prompt' }, 5);
    expect(lease.ok).toBe(true);
    await addDeveloperCompute('dev-plan', 42);
    const shown = json(await cli(['developer', 'show', '--id', 'dev-plan', '--json']));
    expect(shown).toMatchObject({ tier: 'starter', maxConcurrency: 5, computeUsedThisMonth: 42, computeAvailable: 3_500_007 - 42 });
    const [live] = shown.liveLeases as { sessionId: string; userId: string; ageMs: number }[];
    expect(live).toMatchObject({ sessionId: 'run-cli', userId: 'alice' });
    expect(live!.ageMs).toBeGreaterThanOrEqual(0);
    expect(live!.ageMs).toBeLessThanOrEqual(Date.now() - started);
    const text = await cli(['developer', 'show', '--id', 'dev-plan']);
    expect(text.stdout).toContain('  live runs: 1 of 5\n    run-cli (user alice, ');
    expect(text.stdout).toContain('  compute this month: 42 s used, 3499965 s available\n');

    const missing = await cli(['developer', 'set-plan', '--id', 'dev-nobody', '--plan-seconds', '1']);
    expect(missing).toEqual({ code: 1, stdout: '', stderr: 'error: Developer dev-nobody does not exist\n' });
  });

  it("the owner's view: project list, user show, activity and developer show agree with the ledger (issue 30)", async () => {
    json(await cli(['developer', 'create', '--id', 'dev-owner', '--plan-seconds', '4000000', '--json']));
    const created = json(await cli(['project', 'create', '--developer', 'dev-owner', '--id', 'owner-app', '--json']));
    const spend = async (user: string, words: number) => {
      const token = await mintToken({
        projectId: 'owner-app',
        userId: user,
        secret: created.secret as string,
        budget: { ai: 5_000_000, compute: 0, window: 'day' },
        expiresInSeconds: 3600,
      });
      const client = gw.client(token);
      await client.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 64, messages: [{ role: 'user', content: `hi [[words:${words}]]` }] });
      await gw.invocationsDone();
      const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${token}` } });
      return ((await res.json()) as { ai: { used: number } }).ai.used;
    };
    await spend('ann', 5);
    const ann = await spend('ann', 7);
    const bob = await spend('bob', 3);
    await cli(['user', 'block', '--project', 'owner-app', '--user', 'bob']);

    const listed = json(await cli(['project', 'list', '--developer', 'dev-owner', '--json'])) as { projects: Record<string, unknown>[] };
    expect(listed.projects).toEqual([
      expect.objectContaining({ projectId: 'owner-app', developerId: 'dev-owner', last24h: { aiMicros: ann + bob, requests: 3 } }),
    ]);
    expect((await cli(['project', 'list'])).stdout).toContain(`owner-app  developer dev-owner  keys: none  last 24 h: ${ann + bob} µ$, 3 calls`);

    const shown = json(await cli(['user', 'show', '--project', 'owner-app', '--user', 'ann', '--json']));
    expect(shown).toMatchObject({
      userId: 'ann',
      blocked: false,
      windows: [{ window: 'day', used: { ai: ann, compute: 0 }, reserved: { ai: 0, compute: 0 }, openHolds: 0 }],
      last30Days: { total: { aiMicros: ann, requests: 2 }, byModel: [{ key: 'claude-sonnet-4-6', aiMicros: ann, requests: 2 }] },
    });
    expect((await cli(['user', 'show', '--project', 'owner-app', '--user', 'bob'])).stdout).toContain('User bob of owner-app (BLOCKED: every token refused)');

    const byUser = json(await cli(['activity', '--project', 'owner-app', '--by', 'user', '--json']));
    expect(byUser).toMatchObject({
      projects: ['owner-app'],
      total: { aiMicros: ann + bob, requests: 3, errors: 0, refusals: 0 },
      groups: [
        { key: 'ann', aiMicros: ann, requests: 2 },
        { key: 'bob', aiMicros: bob, requests: 1 },
      ],
    });
    // Without --project: every project's activity, here grouped by project.
    const everyProject = json(await cli(['activity', '--by', 'project', '--json'])) as { groups: { key: string; aiMicros: number }[] };
    expect(everyProject.groups.find((g) => g.key === 'owner-app')?.aiMicros).toBe(ann + bob);
    expect(await cli(['activity', '--by', 'week'])).toMatchObject({ code: 2, stderr: 'error: --by must be user, model, project, hour or day\n' });

    const developer = json(await cli(['developer', 'show', '--id', 'dev-owner', '--json']));
    expect(developer).toMatchObject({ aiMicrosThisMonth: ann + bob, projects: [{ projectId: 'owner-app', aiMicrosThisMonth: ann + bob }] });

    // vessel list: the project's vessels, newest first, filtered by status.
    const annToken = await mintToken({
      projectId: 'owner-app',
      userId: 'ann',
      secret: created.secret as string,
      budget: { ai: 5_000_000, compute: 600, window: 'day' },
      expiresInSeconds: 3600,
    });
    const queued = await fetch(`${gw.url}/incubate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'Two words [[words:2]]', idempotencyKey: 'owner-vessel-1', options: { token: annToken, model: 'claude-sonnet-4-6' } }),
    });
    const { vesselId } = (await queued.json()) as { vesselId: string };
    await expect
      .poll(
        async () =>
          ((await (await fetch(`${gw.url}/incubate/vessel/${vesselId}`, { headers: { authorization: `Bearer ${annToken}` } })).json()) as { status: string })
            .status,
        { timeout: 20_000 },
      )
      .toBe('COMPLETED');
    const vessels = json(await cli(['vessel', 'list', '--project', 'owner-app', '--json'])) as { vessels: Record<string, unknown>[] };
    expect(vessels.vessels).toEqual([expect.objectContaining({ vesselId, userId: 'ann', status: 'COMPLETED', isSuccess: true })]);
    expect((json(await cli(['vessel', 'list', '--project', 'owner-app', '--status', 'FAILED', '--json'])) as { vessels: unknown[] }).vessels).toEqual([]);
    expect(await cli(['vessel', 'list', '--project', 'owner-app', '--status', 'DONE'])).toMatchObject({
      code: 2,
      stderr: expect.stringContaining('--status must be one of'),
    });
  }, 90_000);

  it('round trip: developer → project → provider key → pricing → token → GET /usage', async () => {
    expect(existsSync(join(dataDir, 'runtime.json'))).toBe(true);

    const created = json(await cli(['developer', 'create', '--id', 'dev-cli', '--plan-seconds', '4000000', '--pool-seconds', '100', '--json']));
    expect(created).toEqual({
      developerId: 'dev-cli',
      planSeconds: 4_000_000,
      poolSeconds: 100,
      createdAt: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      tier: 'starter',
      maxConcurrency: 5,
    });

    const [shown, project, duplicate, badFlag, noRuntime] = await Promise.all([
      cli(['developer', 'show', '--id', 'dev-cli', '--json']),
      cli(['project', 'create', '--developer', 'dev-cli', '--json']),
      cli(['developer', 'create', '--id', 'dev-cli', '--plan-seconds', '1']),
      cli(['developer', 'show', '--bogus', 'x', '--json']),
      cli(['developer', 'show', '--id', 'dev-cli'], { dataDir: emptyDir }),
    ]);

    expect(json(shown)).toEqual({
      developerId: 'dev-cli',
      planSeconds: 4_000_000,
      poolSeconds: 100,
      createdAt: created.createdAt,
      alerts: 'none',
      tier: 'starter',
      maxConcurrency: 5,
      liveLeases: [],
      computeUsedThisMonth: 0,
      computeAvailable: 4_000_100,
      aiMicrosThisMonth: 0,
      // The project is created alongside (the same Promise.all): listed or not yet, it has spent nothing.
      projects: expect.any(Array),
    });

    const p = json(project);
    expect(p).toEqual({ projectId: expect.stringMatching(/^prj_[0-9a-f]{20}$/), developerId: 'dev-cli', secret: expect.any(String) });
    const projectId = p.projectId as string;
    const secret = p.secret as string;
    expect(secret.length).toBeGreaterThanOrEqual(32);

    // errors: one line on stderr, nothing on stdout, exit 1 for a refused operation, 2 for a wrong invocation
    expect(duplicate).toEqual({ code: 1, stdout: '', stderr: 'error: Developer dev-cli already exists\n' });
    expect(badFlag.code).toBe(2);
    expect(badFlag.stdout).toBe('');
    expect(badFlag.stderr).toBe('{"error":"unknown flag --bogus for developer show; run gateway developer --help"}\n');
    expect(noRuntime.code).toBe(1);
    expect(noRuntime.stdout).toBe('');
    expect(noRuntime.stderr).toBe(
      `error: No running local gateway found (${join(emptyDir, 'runtime.json')} is missing): start it with "npm start", or pass --stack <name> for a deployed one\n`,
    );

    const [keySet, pricingSet, minted] = await Promise.all([
      cli(['project', 'set-provider-key', '--project', projectId, '--provider', 'openai', '--key', PROVIDER_KEY, '--json']),
      cli([
        'project',
        'set-pricing',
        '--project',
        projectId,
        '--model',
        'my-model',
        '--input-usd-per-mtok',
        '1.5',
        '--output-usd-per-mtok',
        '2',
        '--cache-read-usd-per-mtok',
        '0.15',
        '--json',
      ]),
      cli([
        'token',
        'mint',
        '--project',
        projectId,
        '--user',
        'cli-user',
        '--ai-microdollars',
        '4321',
        '--compute-seconds',
        '77',
        '--window',
        'week',
        '--expires-in',
        '2h',
        '--json',
      ]),
    ]);
    // against the local runtime a change reaches the gateway within 1 s (its SECRET_CACHE_SECONDS)
    expect(json(keySet)).toEqual({ projectId, provider: 'openai', stored: true, takesEffectWithinSeconds: 1 });
    expect(json(pricingSet)).toEqual({
      projectId,
      model: 'my-model',
      price: { inputUsdPerMtok: 1.5, outputUsdPerMtok: 2, cacheReadUsdPerMtok: 0.15 },
      takesEffectWithinSeconds: 1,
    });
    const mint = json(minted);
    expect(mint).toEqual({
      token: expect.any(String),
      projectId,
      userId: 'cli-user',
      budget: { ai: 4321, compute: 77, window: 'week' },
      expiresInSeconds: 7200,
    });
    const claims = decodeJwt(mint.token as string);
    expect(claims).toMatchObject({ iss: projectId, sub: 'cli-user', budget: { ai: 4321, compute: 77, window: 'week' } });
    expect(claims.exp! - claims.iat!).toBe(7200);

    const described = json(await cli(['project', 'show', '--project', projectId, '--json']));
    expect(described).toEqual({
      projectId,
      developerId: 'dev-cli',
      providerKeys: ['openai'],
      pricing: { 'my-model': { inputUsdPerMtok: 1.5, outputUsdPerMtok: 2, cacheReadUsdPerMtok: 0.15 } },
      origins: 'any',
      revokedTokens: 0,
      blockedUsers: [],
      tokensRevokedBefore: {},
      alerts: 'none',
      createdAt: expect.any(String),
    });

    // the provider key's value is never printed, by any command; the secret only by project create
    for (const out of allStdout) expect(out).not.toContain(PROVIDER_KEY);
    expect(allStdout.filter((out) => out.includes(secret))).toHaveLength(1);

    // the CLI encrypted with the gateway's key file: the gateway process decrypts it
    const stored = await getProject(projectId);
    expect(stored!.providerKeys.openai).toMatch(/^local:/);
    expect(stored!.providerKeys.openai).not.toContain(PROVIDER_KEY);
    expect(await providerKeyFor(stored!, 'openai')).toBe(PROVIDER_KEY);

    // the minted token works against the gateway
    const res = await fetch(`${gw.url}/usage`, { headers: { authorization: `Bearer ${mint.token as string}` } });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({
      user_id: 'cli-user',
      issuer_id: projectId,
      window: 'week',
      allowed: true,
      ai: { used: 0, remaining: 4321, budget: 4321, reserved: 0 },
      compute: { used: 0, remaining: 77, budget: 77, reserved: 0 },
    });
    // Five CLI processes (tsx + the AWS SDK each) in parallel on a two-core machine: give them time.
  }, 120_000);
});

/** Node's parseArgs wording, which must never reach an operator. */
const PARSE_ARGS_TEXT = /positional|ambiguous|quote|ERR_PARSE_ARGS|Unknown option|Option '-/i;

describe('CLI help and invocation errors (as a subprocess)', () => {
  it('help, --help and <group> --help print help; a bare group, an unknown flag and a negative number get our own words', async () => {
    // Two batches of five processes rather than ten at once: each is a full tsx + AWS SDK start.
    const [help, dashHelp, groupHelp, helpGroup, commandHelp] = await Promise.all([
      cli(['help']),
      cli(['--help']),
      cli(['developer', '--help']),
      cli(['help', 'project']),
      cli(['developer', 'create', '-h']),
    ]);
    const [bareGroup, unknownFlag, negative, negativePool, missingValue] = await Promise.all([
      cli(['developer']),
      cli(['developer', 'create', '--foo', 'x']),
      cli(['developer', 'create', '--id', 'dev-neg', '--plan-seconds', '-5']),
      cli(['developer', 'create', '--id', 'dev-neg', '--plan-seconds', '5', '--pool-seconds', '-1', '--json']),
      cli(['developer', 'create', '--id', '--plan-seconds', '5']),
    ]);
    const all = [
      'developer create',
      'developer set-plan',
      'developer show',
      'project create',
      'project show',
      'project list',
      'user show',
      'vessel list',
      'project rotate-secret',
      'project set-provider-key',
      'project set-pricing',
      'project set-origins',
      'token revoke',
      'user block',
      'user unblock',
      'user revoke-tokens',
      'webhook show',
      'webhook redeliver',
      'token mint',
    ];
    for (const r of [help, dashHelp]) {
      expect(r.code).toBe(0);
      expect(r.stderr).toBe('');
      for (const c of all) expect(r.stdout).toContain(`  ${c} `);
      expect(r.stdout).toContain('--stack NAME');
    }
    expect(help.stdout).toBe(dashHelp.stdout);

    // a group's help lists that group's commands only
    expect(groupHelp).toMatchObject({ code: 0, stderr: '' });
    expect(groupHelp.stdout).toMatch(/^Usage: gateway developer <command>/);
    expect(groupHelp.stdout).toContain('  developer create --id ID --plan-seconds N [--pool-seconds N]\n');
    expect(groupHelp.stdout).toContain('  developer show --id ID\n');
    expect(groupHelp.stdout).not.toContain('project create');
    expect(helpGroup).toMatchObject({ code: 0, stderr: '' });
    for (const c of all.filter((c) => c.startsWith('project '))) expect(helpGroup.stdout).toContain(`  ${c} `);
    expect(helpGroup.stdout).not.toContain('developer create');
    expect(commandHelp).toMatchObject({ code: 0, stderr: '' });
    expect(commandHelp.stdout).toMatch(/^Usage: gateway developer create --id ID --plan-seconds N \[--pool-seconds N\]\n/);

    expect(bareGroup).toEqual({
      code: 2,
      stdout: '',
      stderr: 'error: missing subcommand for developer: one of create, set-plan, show, set-alerts, clear-alerts\n',
    });
    expect(unknownFlag).toEqual({ code: 2, stdout: '', stderr: 'error: unknown flag --foo for developer create; run gateway developer --help\n' });
    expect(negative).toEqual({ code: 2, stdout: '', stderr: 'error: --plan-seconds must not be negative\n' });
    expect(negativePool).toEqual({ code: 2, stdout: '', stderr: '{"error":"--pool-seconds must not be negative"}\n' });
    expect(missingValue).toEqual({ code: 2, stdout: '', stderr: 'error: --id needs a value\n' });
    for (const r of [bareGroup, unknownFlag, negative, negativePool, missingValue]) expect(r.stderr).not.toMatch(PARSE_ARGS_TEXT);
  }, 180_000);
});

describe('CLI invocation errors (main() in process; exit code = its return value)', () => {
  async function run(argv: string[]): Promise<Run> {
    let stdout = '';
    let stderr = '';
    const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      stdout += String(chunk);
      return true;
    });
    const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      stderr += String(chunk);
      return true;
    });
    try {
      const code = await main([...argv, '--data-dir', dataDir]);
      return { code, stdout, stderr };
    } finally {
      out.mockRestore();
      err.mockRestore();
    }
  }

  it.each([
    [['developer', 'create', '--id', 'dev-x', '--plan-seconds', 'lots'], 'error: --plan-seconds must be a number\n'],
    [['developer', 'create', '--id', 'dev-x', '--plan-seconds=-5'], 'error: --plan-seconds must not be negative\n'],
    [['developer', 'create', '--id', 'dev-x'], 'error: --plan-seconds is required\n'],
    [['project', 'set-provider-key', '--project', 'p', '--provider', 'anthropic', '--key', 'k'], 'error: --provider must be openai or openrouter\n'],
    [
      ['token', 'mint', '--project', 'p', '--user', 'u', '--ai-microdollars', '1', '--compute-seconds', '1', '--window', 'day', '--expires-in', 'soon'],
      expect.stringMatching(/^error: --expires-in: Invalid duration "soon"/),
    ],
    [['frobnicate', 'all'], 'error: unknown command "frobnicate all"; run gateway --help for the list\n'],
    [['developer', 'create', '--id', 'dev-x', '--plan-seconds', '-5'], 'error: --plan-seconds must not be negative\n'],
    [['developer', 'create', '--id', 'dev-x', '--plan-seconds', '-0.5'], 'error: --plan-seconds must be a whole number\n'],
    [
      ['project', 'set-pricing', '--project', 'p', '--model', 'm', '--input-usd-per-mtok', '-1', '--output-usd-per-mtok', '1'],
      'error: --input-usd-per-mtok must not be negative\n',
    ],
    [['developer'], 'error: missing subcommand for developer: one of create, set-plan, show, set-alerts, clear-alerts\n'],
    [
      ['project'],
      'error: missing subcommand for project: one of create, show, list, rotate-secret, set-provider-key, set-pricing, set-origins, set-alerts, clear-alerts\n',
    ],
    [['token'], 'error: missing subcommand for token: one of mint, revoke\n'],
    [['developer', 'delete', '--id', 'x'], 'error: unknown subcommand "delete" for developer: one of create, set-plan, show, set-alerts, clear-alerts\n'],
    [['developer', 'create', '--foo'], 'error: unknown flag --foo for developer create; run gateway developer --help\n'],
    [['developer', 'create', '--foo=1', '--id', 'x'], 'error: unknown flag --foo for developer create; run gateway developer --help\n'],
    // a flag of another command is unknown here too
    [['developer', 'show', '--id', 'x', '--project', 'p'], 'error: unknown flag --project for developer show; run gateway developer --help\n'],
    [['developer', 'show', '-x'], 'error: unknown flag -x for developer show; run gateway developer --help\n'],
    [['developer', 'show', 'acme'], 'error: unexpected argument "acme" for developer show; flags start with -- (run gateway developer --help)\n'],
    [['developer', 'show', '--id'], 'error: --id needs a value\n'],
    [['developer', 'show', '--id', 'a', '--id', 'b'], 'error: --id is given more than once\n'],
    [['developer', 'show', '--id', 'a', '--json=yes'], '{"error":"--json takes no value"}\n'],
    [['--json'], '{"error":"missing command; run gateway --help for the list"}\n'],
    // Budget alerts: the percentages, and what is required, are checked before anything is stored.
    ...(
      [
        ['0,80', '0'],
        ['80,abc', 'abc'],
        ['150', '150'],
        ['80.5', '80.5'],
        ['80,,100', ''],
        ['-5', '-5'],
      ] as const
    ).map(([list, bad]): [string[], string] => [
      ['project', 'set-alerts', '--project', 'p', '--ai', list, '--url', 'https://hooks.example.com/a', '--secret', 's'],
      `error: --ai takes whole percentages from 1 to 100, comma-separated (e.g. 50,80,100): "${bad}" is not one\n`,
    ]),
    [
      ['project', 'set-alerts', '--project', 'p', '--url', 'https://hooks.example.com/a', '--secret', 's'],
      'error: give --ai, --compute or both: the percentages of the budgets to alert at\n',
    ],
    [
      ['project', 'set-alerts', '--project', 'p', '--ai', '80', '--url', 'https://hooks.example.com/a'],
      'error: --secret is required: every alert is signed with it\n',
    ],
    [['project', 'set-alerts', '--project', 'p', '--ai', '80', '--secret', 's'], 'error: --url is required: where the signed alerts are POSTed\n'],
    [
      ['project', 'set-alerts', '--project', 'p', '--compute', '1,2,3,4,5,6,7,8,9,10,11', '--url', 'https://hooks.example.com/a', '--secret', 's'],
      'error: --compute takes at most 10 percentages, got 11\n',
    ],
    [['developer', 'set-alerts', '--id', 'd', '--url', 'https://hooks.example.com/a', '--secret', 's'], 'error: --compute is required\n'],
    [
      ['developer', 'set-alerts', '--id', 'd', '--ai', '80', '--compute', '80', '--url', 'https://h.example.com', '--secret', 's'],
      'error: unknown flag --ai for developer set-alerts; run gateway developer --help\n',
    ],
    [['webhook', 'show'], 'error: give either --vessel or --alert\n'],
  ])('%j → exit 2', async (argv, stderr) => {
    const r = await run(argv as string[]);
    expect(r).toEqual({ code: 2, stdout: '', stderr });
    expect(r.stderr).not.toMatch(PARSE_ARGS_TEXT);
  });

  it('refused operations exit 1 with the registry message', async () => {
    expect(await run(['project', 'show', '--project', 'prj_missing', '--json'])).toEqual({
      code: 1,
      stdout: '',
      stderr: '{"error":"Project prj_missing does not exist"}\n',
    });
    expect(
      await run(['token', 'mint', '--project', 'prj_missing', '--user', 'u', '--ai-microdollars', '1', '--compute-seconds', '1', '--window', 'day']),
    ).toEqual({
      code: 1,
      stdout: '',
      stderr: 'error: Project prj_missing does not exist\n',
    });
  });

  it('project set-alerts: an unsafe URL is refused (exit 1) by the outbound guard; set, shown without the secret, cleared', async () => {
    const project = await createProject({ developerId: gw.developerId });
    const set = (url: string) =>
      run(['project', 'set-alerts', '--project', project.projectId, '--ai', '100,50,80,80', '--compute', '90', '--url', url, '--secret', 'alert-secret-Xq1']);
    for (const [url, why] of [
      ['http://169.254.169.254/latest/meta-data', 'address 169.254.169.254 is not allowed'],
      ['http://10.0.0.7/hook', 'address 10.0.0.7 is not allowed'],
      ['http://[::ffff:a9fe:a9fe]/hook', 'address ::ffff:a9fe:a9fe is not allowed'],
      ['ftp://hooks.example.com/a', 'scheme ftp: is not allowed: http: and https: only'],
      ['https://user:pw@hooks.example.com/a', 'credentials in the URL are not allowed'],
      ['not a url', 'not a valid absolute URL'],
    ]) {
      expect(await set(url!), url).toEqual({ code: 1, stdout: '', stderr: `error: The alert URL is refused: ${why}\n` });
    }
    expect((await getProject(project.projectId))!.alerts).toBeUndefined();

    const ok = await set('https://hooks.example.com/budget?team=7');
    expect(ok.code).toBe(0);
    // Sorted, each once; never the secret.
    expect(ok.stdout).toBe(
      `Budget alerts of ${project.projectId}: AI budget at 50, 80, 100 %; compute at 90 % → https://hooks.example.com/budget?team=7 (signed)\nThe local gateway picks up the change within 1 s.\n`,
    );
    const shown = await run(['project', 'show', '--project', project.projectId, '--json']);
    expect(JSON.parse(shown.stdout).alerts).toEqual({ ai: [50, 80, 100], compute: [90], url: 'https://hooks.example.com/budget?team=7', signed: true });
    expect(shown.stdout).not.toContain('alert-secret-Xq1');
    // Stored encrypted for the project, as a callback secret is.
    const stored = (await getProject(project.projectId))!.alerts!;
    expect(stored.secretCiphertext).not.toContain('alert-secret-Xq1');
    expect(await keyCipher().decrypt(stored.secretCiphertext, { projectId: project.projectId })).toBe('alert-secret-Xq1');

    const cleared = await run(['project', 'clear-alerts', '--project', project.projectId, '--json']);
    expect(JSON.parse(cleared.stdout)).toEqual({ projectId: project.projectId, alerts: 'none', takesEffectWithinSeconds: 1 });
    expect((await getProject(project.projectId))!.alerts).toBeUndefined();
  });

  it('developer set-alerts: set on the developer, shown by developer show without the secret, cleared', async () => {
    const id = `dev-alerts-${Date.now()}`;
    await createDeveloper({ developerId: id, planSeconds: 1000 });
    const set = await run([
      'developer',
      'set-alerts',
      '--id',
      id,
      '--compute',
      '80,100',
      '--url',
      'https://hooks.example.com/plan',
      '--secret',
      'plan-secret-Zz9',
      '--json',
    ]);
    expect(JSON.parse(set.stdout)).toEqual({
      developerId: id,
      alerts: { compute: [80, 100], url: 'https://hooks.example.com/plan', signed: true },
      takesEffectWithinSeconds: 1,
    });
    const shown = await run(['developer', 'show', '--id', id]);
    expect(shown.stdout).toContain('  plan alerts: compute at 80, 100 % → https://hooks.example.com/plan (signed)');
    const shownJson = await run(['developer', 'show', '--id', id, '--json']);
    expect(JSON.parse(shownJson.stdout).alerts).toEqual({ compute: [80, 100], url: 'https://hooks.example.com/plan', signed: true });
    for (const out of [set.stdout, shown.stdout, shownJson.stdout]) expect(out).not.toContain('plan-secret-Zz9');
    const refused = await run(['developer', 'set-alerts', '--id', id, '--compute', '80', '--url', 'http://192.168.1.1/', '--secret', 's']);
    expect(refused).toEqual({ code: 1, stdout: '', stderr: 'error: The alert URL is refused: address 192.168.1.1 is not allowed\n' });
    expect(JSON.parse((await run(['developer', 'clear-alerts', '--id', id, '--json'])).stdout).alerts).toBe('none');
  });

  it('takes its flags before the command words as well as after them', async () => {
    let stdout = '';
    const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
      stdout += String(chunk);
      return true;
    });
    try {
      expect(await main(['--data-dir', dataDir, '--json', 'developer', 'create', '--id', 'dev-flags-first', '--plan-seconds', '15000000'])).toBe(0);
    } finally {
      out.mockRestore();
    }
    expect(JSON.parse(stdout)).toMatchObject({ developerId: 'dev-flags-first', planSeconds: 15_000_000, tier: 'pro', maxConcurrency: 10 });
  });

  it('says when a change reaches running gateways: within 1 s locally', async () => {
    const project = await createProject({ developerId: gw.developerId });
    const rotated = await run(['project', 'rotate-secret', '--project', project.projectId]);
    expect(rotated.code).toBe(0);
    expect(rotated.stdout.split('\n').at(-2)).toBe('The local gateway picks up the change within 1 s.');
    const key = await run(['project', 'set-provider-key', '--project', project.projectId, '--provider', 'openrouter', '--key', 'sk-or-x']);
    expect(key.stdout).toBe(
      `Stored the openrouter key of ${project.projectId} (encrypted; it is never shown again)\nThe local gateway picks up the change within 1 s.\n`,
    );
    const rotatedJson = await run(['project', 'rotate-secret', '--project', project.projectId, '--json']);
    expect(JSON.parse(rotatedJson.stdout)).toEqual({
      projectId: project.projectId,
      secret: expect.any(String),
      rotatedAt: expect.any(String),
      takesEffectWithinSeconds: 1,
    });
  });

  it('says when a change reaches running gateways: within SECRET_CACHE_SECONDS on a stack, at once where a stale record would refuse', async () => {
    const project = await createProject({ developerId: gw.developerId });
    // A deployed stack, as far as the CLI can tell: the test gateway's tables behind a target of kind "stack".
    const asStack = async () => ({ ...(await resolveTarget({ dataDir })), kind: 'stack' as const, secretCacheSeconds: 60 });
    async function onStack(argv: string[]): Promise<Run> {
      let stdout = '';
      let stderr = '';
      const out = vi.spyOn(process.stdout, 'write').mockImplementation((chunk) => {
        stdout += String(chunk);
        return true;
      });
      const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
        stderr += String(chunk);
        return true;
      });
      try {
        return { code: await main([...argv, '--stack', 'gateway-prod'], { resolveTarget: asStack }), stdout, stderr };
      } finally {
        out.mockRestore();
        err.mockRestore();
      }
    }
    const p = project.projectId;
    const rotated = await onStack(['project', 'rotate-secret', '--project', p]);
    expect(rotated).toMatchObject({ code: 0, stderr: '' });
    expect(rotated.stdout.split('\n').at(-2)).toBe(
      'Running gateway instances pick up the change within 60 s (SECRET_CACHE_SECONDS); a token signed with the new secret makes an instance re-read the project at once, so new tokens work immediately, while tokens signed with the old secret keep working for up to 60 s.',
    );
    const key = await onStack(['project', 'set-provider-key', '--project', p, '--provider', 'openai', '--key', 'sk-stack-x']);
    expect(key.stdout.split('\n').at(-2)).toBe(
      'Running gateway instances pick up the change within 60 s (SECRET_CACHE_SECONDS); if the project had no key for this provider, the first request that needs one makes an instance re-read the project at once.',
    );
    const priced = await onStack(['project', 'set-pricing', '--project', p, '--model', 'm1', '--input-usd-per-mtok', '1', '--output-usd-per-mtok', '2']);
    expect(priced.stdout).toBe(
      `Priced m1 for ${p}: $1/Mtok in, $2/Mtok out\nRunning gateway instances pick up the change within 60 s (SECRET_CACHE_SECONDS); if the model had no price for this project, the first request for it makes an instance re-read the project at once.\n`,
    );

    const deploymentPriced = await onStack(['pricing', 'set', '--model', 'stack-m1', '--input-usd-per-mtok', '1', '--output-usd-per-mtok', '2']);
    expect(deploymentPriced.stdout).toBe(
      "Priced stack-m1 for every project: $1/Mtok in, $2/Mtok out (a project's own price for it wins)\nRunning gateway instances pick up the change within 60 s (SECRET_CACHE_SECONDS); if the model had no price for a project, the first request for it makes an instance re-read the deployment's prices at once.\n",
    );
    const deploymentUnpriced = await onStack(['pricing', 'unset', '--model', 'stack-m1']);
    expect(deploymentUnpriced.stdout).toBe(
      "Removed the deployment-wide price of stack-m1\nRunning gateway instances pick up the change within 60 s (SECRET_CACHE_SECONDS): until then an instance that read the deployment's prices earlier may still charge the removed price.\n",
    );

    // --json stays one machine-readable object, with the delay as a number
    for (const argv of [
      ['project', 'rotate-secret', '--project', p, '--json'],
      ['project', 'set-provider-key', '--project', p, '--provider', 'openai', '--key', 'sk-stack-y', '--json'],
      ['project', 'set-pricing', '--project', p, '--model', 'm1', '--input-usd-per-mtok', '1', '--output-usd-per-mtok', '2', '--json'],
    ]) {
      const r = await onStack(argv);
      expect(r).toMatchObject({ code: 0, stderr: '' });
      expect(r.stdout.trim().split('\n')).toHaveLength(1);
      expect(JSON.parse(r.stdout)).toMatchObject({ projectId: p, takesEffectWithinSeconds: 60 });
    }
  });

  it('pricing set|list|unset: deployment-wide prices in the registry; wrong invocations are exit 2, removing an unset price exit 1', async () => {
    const set = await run([
      'pricing',
      'set',
      '--model',
      'cli-m1',
      '--input-usd-per-mtok',
      '1',
      '--output-usd-per-mtok',
      '5',
      '--cache-read-usd-per-mtok',
      '0.1',
    ]);
    expect(set).toEqual({
      code: 0,
      stdout:
        "Priced cli-m1 for every project: $1/Mtok in, $5/Mtok out, $0.1/Mtok cache read (a project's own price for it wins)\nThe local gateway picks up the change within 1 s.\n",
      stderr: '',
    });
    const second = await run([
      'pricing',
      'set',
      '--model',
      'cli-m2',
      '--input-usd-per-mtok',
      '0.8',
      '--output-usd-per-mtok',
      '4',
      '--cache-write-usd-per-mtok',
      '1',
      '--json',
    ]);
    expect(JSON.parse(second.stdout)).toEqual({
      model: 'cli-m2',
      price: { inputUsdPerMtok: 0.8, outputUsdPerMtok: 4, cacheWriteUsdPerMtok: 1 },
      takesEffectWithinSeconds: 1,
    });
    const pricing = {
      'cli-m1': { inputUsdPerMtok: 1, outputUsdPerMtok: 5, cacheReadUsdPerMtok: 0.1 },
      'cli-m2': { inputUsdPerMtok: 0.8, outputUsdPerMtok: 4, cacheWriteUsdPerMtok: 1 },
    };
    expect(await getDeploymentPricing()).toEqual(pricing);
    expect(JSON.parse((await run(['pricing', 'list', '--json'])).stdout)).toEqual({ pricing });
    expect((await run(['pricing', 'list'])).stdout).toBe(
      "Deployment-wide prices (a project's own price for a model wins):\n  cli-m1: $1/Mtok in, $5/Mtok out, $0.1/Mtok cache read\n  cli-m2: $0.8/Mtok in, $4/Mtok out, $1/Mtok cache write\n",
    );

    expect(await run(['pricing', 'unset', '--model', 'cli-m1'])).toEqual({
      code: 0,
      stdout: 'Removed the deployment-wide price of cli-m1\nThe local gateway picks up the change within 1 s.\n',
      stderr: '',
    });
    expect(await run(['pricing', 'unset', '--model', 'cli-m1', '--json'])).toEqual({
      code: 1,
      stdout: '',
      stderr: '{"error":"Model cli-m1 has no deployment-wide price (\\"gateway pricing list\\" shows those set)"}\n',
    });
    expect(JSON.parse((await run(['pricing', 'unset', '--model', 'cli-m2', '--json'])).stdout)).toEqual({
      model: 'cli-m2',
      removed: true,
      takesEffectWithinSeconds: 1,
    });
    expect((await run(['pricing', 'list'])).stdout).toBe('No deployment-wide prices (gateway pricing set --model M … sets one)\n');

    for (const [argv, stderr] of [
      [['pricing', 'set', '--model', 'm', '--input-usd-per-mtok', '-1', '--output-usd-per-mtok', '1'], 'error: --input-usd-per-mtok must not be negative\n'],
      [['pricing', 'set', '--model', 'm', '--input-usd-per-mtok', 'cheap', '--output-usd-per-mtok', '1'], 'error: --input-usd-per-mtok must be a number\n'],
      [['pricing', 'set', '--model', 'm', '--input-usd-per-mtok', '1'], 'error: --output-usd-per-mtok is required\n'],
      [['pricing', 'set', '--input-usd-per-mtok', '1', '--output-usd-per-mtok', '1'], 'error: --model is required\n'],
      [['pricing', 'set', '--model', '', '--input-usd-per-mtok', '1', '--output-usd-per-mtok', '1'], 'error: --model: must not be empty\n'],
      [['pricing', 'unset'], 'error: --model is required\n'],
      [['pricing', 'list', '--model', 'm'], 'error: unknown flag --model for pricing list; run gateway pricing --help\n'],
      [['pricing'], 'error: missing subcommand for pricing: one of set, unset, list\n'],
    ] as const) {
      expect(await run([...argv])).toEqual({ code: 2, stdout: '', stderr });
    }
    expect(await getDeploymentPricing()).toEqual({});
  });

  it('project set-origins and token mint --origins: canonical lists, --any, and refusals of what is not an origin', async () => {
    const project = await createProject({ developerId: gw.developerId });
    const p = project.projectId;
    const set = await run(['project', 'set-origins', '--project', p, '--origins', 'HTTPS://App.Example.com:443,https://*.example.org', '--json']);
    expect(set).toEqual({
      code: 0,
      stderr: '',
      stdout: `${JSON.stringify({ projectId: p, origins: ['https://app.example.com', 'https://*.example.org'], takesEffectWithinSeconds: 1 })}\n`,
    });
    expect((await getProject(p))?.origins).toEqual(['https://app.example.com', 'https://*.example.org']);
    const shown = await run(['project', 'show', '--project', p, '--json']);
    expect(JSON.parse(shown.stdout).origins).toEqual(['https://app.example.com', 'https://*.example.org']);
    const any = await run(['project', 'set-origins', '--project', p, '--any']);
    expect(any.code).toBe(0);
    expect(any.stdout.split('\n')[0]).toBe(`${p} takes requests from any origin (and from clients that send no Origin: servers, CLIs, apps)`);
    expect((await getProject(p))?.origins).toBeUndefined();

    expect(await run(['project', 'set-origins', '--project', p])).toEqual({
      code: 2,
      stdout: '',
      stderr: 'error: give either --origins (a comma-separated list) or --any\n',
    });
    expect(await run(['project', 'set-origins', '--project', p, '--any', '--origins', 'https://a.com'])).toMatchObject({ code: 2 });
    expect(await run(['project', 'set-origins', '--project', p, '--origins', 'app.example.com'])).toEqual({
      code: 2,
      stdout: '',
      stderr:
        'error: --origins: "app.example.com" is not an origin: write scheme://host[:port] (e.g. https://app.example.com), optionally *. before the host or :* as the port, or null\n',
    });

    const minted = await run([
      'token',
      'mint',
      '--project',
      p,
      '--user',
      'u',
      '--ai-microdollars',
      '1',
      '--compute-seconds',
      '1',
      '--window',
      'day',
      '--origins',
      'http://localhost:*',
      '--json',
    ]);
    expect(minted.code).toBe(0);
    const { token, origins } = JSON.parse(minted.stdout) as { token: string; origins: string[] };
    expect(origins).toEqual(['http://localhost:*']);
    expect(JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()).origins).toEqual(['http://localhost:*']);
  });

  it('token revoke, user block|unblock, user revoke-tokens: the project record changes; wrong invocations are exit 2', async () => {
    const project = await createProject({ developerId: gw.developerId });
    const p = project.projectId;
    const minted = JSON.parse(
      (await run(['token', 'mint', '--project', p, '--user', 'u1', '--ai-microdollars', '1', '--compute-seconds', '1', '--window', 'day', '--json'])).stdout,
    ) as { token: string };
    const { jti, exp } = decodeJwt(minted.token);
    expect(jti).toMatch(/^[0-9a-f-]{36}$/);

    const byToken = await run(['token', 'revoke', '--project', p, '--token', minted.token, '--json']);
    expect(JSON.parse(byToken.stdout)).toEqual({ projectId: p, jti, expiresAt: exp, takesEffectWithinSeconds: 1 });
    const byJti = await run(['token', 'revoke', '--project', p, '--jti', 'other-id', '--expires-at', '2030-01-01T00:00:00Z']);
    expect(byJti.code).toBe(0);
    expect(byJti.stdout.split('\n')[0]).toBe(`Revoked token other-id of ${p} (until it expires at 2030-01-01T00:00:00.000Z)`);
    expect((await getProject(p))?.revokedTokens).toEqual({ [jti!]: exp, 'other-id': 1_893_456_000 });

    expect((await run(['user', 'block', '--project', p, '--user', 'u1'])).stdout.split('\n')[0]).toBe(`Blocked user u1 of ${p}`);
    expect((await getProject(p))?.blockedUsers).toEqual({ u1: true });
    expect(JSON.parse((await run(['project', 'show', '--project', p, '--json'])).stdout)).toMatchObject({ revokedTokens: 2, blockedUsers: ['u1'] });
    expect((await run(['user', 'unblock', '--project', p, '--user', 'u1'])).code).toBe(0);
    expect((await getProject(p))?.blockedUsers).toEqual({});
    const cut = JSON.parse((await run(['user', 'revoke-tokens', '--project', p, '--user', 'u1', '--json'])).stdout) as { revokedBefore: number };
    expect((await getProject(p))?.revokedBefore).toEqual({ u1: cut.revokedBefore });

    expect(await run(['token', 'revoke', '--project', p])).toEqual({ code: 2, stdout: '', stderr: 'error: give either --token (the token itself) or --jti\n' });
    expect(await run(['token', 'revoke', '--project', p, '--jti', 'x', '--expires-at', 'soon'])).toEqual({
      code: 2,
      stdout: '',
      stderr: 'error: --expires-at must be an ISO 8601 time (2026-12-31T00:00:00Z) or unix seconds, got "soon"\n',
    });
    const foreign = await mintToken({
      projectId: 'someone-else',
      userId: 'u',
      secret: 's'.repeat(40),
      budget: { ai: 1, compute: 1, window: 'day' },
      expiresInSeconds: 60,
    });
    expect(await run(['token', 'revoke', '--project', p, '--token', foreign])).toEqual({
      code: 2,
      stdout: '',
      stderr: `error: --token was issued by project someone-else, not ${p}\n`,
    });
    expect(await run(['user', 'block', '--project', 'no-such-project', '--user', 'u1'])).toEqual({
      code: 1,
      stdout: '',
      stderr: 'error: Project no-such-project does not exist\n',
    });
  });

  it('checks the flags before it looks for a gateway: a wrong invocation is exit 2 even with none running', async () => {
    let stderr = '';
    const err = vi.spyOn(process.stderr, 'write').mockImplementation((chunk) => {
      stderr += String(chunk);
      return true;
    });
    try {
      expect(await main(['developer', 'create', '--id', 'x', '--plan-seconds', '-5', '--data-dir', emptyDir])).toBe(2);
    } finally {
      err.mockRestore();
    }
    expect(stderr).toBe('error: --plan-seconds must not be negative\n');
  });

  it('--help lists every command and exits 0', async () => {
    const r = await run(['--help']);
    expect(r.code).toBe(0);
    for (const c of [
      'developer create',
      'developer show',
      'project create',
      'project show',
      'project list',
      'user show',
      'vessel list',
      'project rotate-secret',
      'project set-provider-key',
      'project set-pricing',
      'project set-origins',
      'pricing set',
      'pricing unset',
      'webhook show',
      'webhook redeliver',
      'token mint',
    ]) {
      expect(r.stdout).toContain(`  ${c} `);
    }
  });
});

describe('registry (in process)', () => {
  it('refuses a project for an unknown developer and updates of unknown projects', async () => {
    await expect(createProject({ developerId: 'nobody' })).rejects.toThrow(new RegistryError('Developer nobody does not exist'));
    await expect(setModelPricing('prj_nope', 'm', { inputUsdPerMtok: 1, outputUsdPerMtok: 1 })).rejects.toThrow('Project prj_nope does not exist');
    await expect(createProject({ developerId: gw.developerId, projectId: gw.projectId })).rejects.toThrow(`Project ${gw.projectId} already exists`);
  });

  it('rotating the secret replaces it; describeProject never shows it', async () => {
    const project = await createProject({ developerId: gw.developerId });
    const rotated = await rotateProjectSecret(project.projectId);
    expect(rotated.secret).not.toBe(project.secret);
    expect(rotated.secretRotatedAt).toMatch(/^\d{4}-/);
    const d = describeProject(rotated);
    expect(JSON.stringify(d)).not.toContain(rotated.secret);
    expect(d.alerts).toBe('none');
    expect(Object.keys(d).sort()).toEqual([
      // Its budget alerts, never their secret ('none' here).
      'alerts',
      'blockedUsers',
      'createdAt',
      'developerId',
      'origins',
      'pricing',
      'projectId',
      'providerKeys',
      'revokedTokens',
      'secretRotatedAt',
      'tokensRevokedBefore',
    ]);
  });

  it('LocalKeyCipher: AES-GCM bound to the project, fresh IV each time, 0600 key file', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'gw-cipher-'));
    try {
      const file = join(dir, 'nested', 'k.key');
      const cipher = new LocalKeyCipher(file);
      const a = await cipher.encrypt('sk-plain', { projectId: 'prj_a' });
      const b = await cipher.encrypt('sk-plain', { projectId: 'prj_a' });
      expect(a).toMatch(/^local:/);
      expect(a).not.toBe(b);
      expect(statSync(file).mode & 0o777).toBe(0o600);
      expect(Buffer.from(readFileSync(file, 'utf8'), 'base64')).toHaveLength(32);
      expect(await cipher.decrypt(a, { projectId: 'prj_a' })).toBe('sk-plain');
      // another instance on the same file decrypts; another project cannot
      expect(await new LocalKeyCipher(file).decrypt(b, { projectId: 'prj_a' })).toBe('sk-plain');
      await expect(cipher.decrypt(a, { projectId: 'prj_b' })).rejects.toThrow();
      // tampering is detected
      const raw = Buffer.from(a.slice(6), 'base64');
      raw[raw.length - 1]! ^= 1;
      await expect(cipher.decrypt(`local:${raw.toString('base64')}`, { projectId: 'prj_a' })).rejects.toThrow();
      await expect(cipher.decrypt('kms:AAAA', { projectId: 'prj_a' })).rejects.toThrow('Provider key was not encrypted with the local key');
      // a different key file cannot decrypt
      await expect(new LocalKeyCipher(join(dir, 'other.key')).decrypt(a, { projectId: 'prj_a' })).rejects.toThrow();
      writeFileSync(join(dir, 'short.key'), Buffer.alloc(16).toString('base64'));
      await expect(new LocalKeyCipher(join(dir, 'short.key')).encrypt('x', { projectId: 'p' })).rejects.toThrow('does not hold a 32-byte key');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
