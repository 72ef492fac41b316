import { mkdirSync } from 'node:fs';
import { request } from 'node:http';
import { join, resolve } from 'node:path';
import Anthropic from '@anthropic-ai/sdk';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main } from '../../bin/gateway.ts';
import { startConsole, type RunningConsole } from '../../bin/console/server.ts';
import { groupActivity, readActivity, totalActivity } from '../../lambdas/activity/query.ts';
import type { BudgetClaim } from '../../lambdas/auth/claims.ts';
import { readUsage } from '../../lambdas/budgets/ledger.ts';
import { listSessions } from '../../lambdas/sessions/list.ts';
import { listVessels } from '../../lambdas/vessels/list.ts';
import { webhookOf } from '../../lambdas/webhooks/redeliver.ts';
import { CHROMIUM, CHROMIUM_FLAGS, SKIP_REASON } from '../support/chromium.ts';
import { drained } from '../support/drained.ts';
import { startTestGateway, type TestGateway } from '../support/gateway.ts';
import { incubate, pollUntil } from '../support/vessels.ts';
import { connectWs } from '../support/ws.ts';
import { receiverPool } from '../webhooks/receiver.ts';

/**
 * The web console (DESIGN §12, docs/console.md; issue 30 done-when 3) in a real Chromium, after a scripted workload
 * against a test gateway: two models through the proxy, a /prompt run, a vessel whose webhook receiver answers 500
 * (two attempts recorded), a /ws turn, a user refused for its budget. Every page shows what the ledger and the
 * tables hold — the spend to the µ$ and the chart's points, the users' windows, a live run's lease, the vessel's
 * attempts, the session — and "Redeliver" starts a round whose attempt appears on the page. Each page is
 * screenshotted into .artifacts/console/ (git-ignored); docs/console/ holds copies of them.
 *
 * The console runs in this process, against the test gateway's store, as `gateway console` runs against the CLI's
 * target (the environment the gateway set).
 */
const ROOT = resolve(import.meta.dirname, '../..');
const ARTIFACTS = join(ROOT, '.artifacts/console');
const SONNET = 'claude-sonnet-4-6';
const HAIKU = 'claude-haiku-4-5';
const BUDGET: BudgetClaim = { ai: 10_000_000, compute: 3_600, window: 'day' };

let gw: TestGateway;
let konsole: RunningConsole;
let browser: Browser | undefined;
let page: Page;
const pageLog: string[] = [];
/** Every URL the page asked for: all of them the console's own (it works offline). */
const requested: string[] = [];
const receivers = receiverPool();
const started = new Date(Date.now() - 60_000);
let vesselId: string;
let sessionId: string;

const users = { alice: 'alice', bob: 'bob', carol: 'carol', dave: 'dave', erin: 'erin', broke: 'broke' } as const;
const ledger = async (userId: string, budget = BUDGET) => (await readUsage({ projectId: gw.projectId, userId, budget })).used;

beforeAll(async () => {
  // One retry a second after the first attempt: a failing receiver makes a round of two attempts.
  gw = await startTestGateway({ env: { WEBHOOK_RETRY_WAITS: '1' } });
  konsole = await startConsole({ port: 0 });
  const token = (user: string, budget: Partial<BudgetClaim> = BUDGET) => gw.token({ user, budget });

  const rx = await receivers.start({ default: { status: 500 } });
  const sdk = (t: string) => new Anthropic({ baseURL: gw.url, apiKey: t, maxRetries: 0 });
  const alice = sdk(await token(users.alice));
  const bob = sdk(await token(users.bob));
  const carol = await token(users.carol);
  const dave = await token(users.dave);
  const erin = await token(users.erin);
  const broke = sdk(await token(users.broke, { ai: 10 }));
  await Promise.all([
    ...[3, 5, 8].map((n) => alice.messages.create({ model: SONNET, max_tokens: 100, messages: [{ role: 'user', content: `hi [[words:${n}]]` }] })),
    ...[4, 6].map((n) => bob.messages.create({ model: HAIKU, max_tokens: 100, messages: [{ role: 'user', content: `hey [[words:${n}]]` }] })),
    broke.messages
      .create({ model: SONNET, max_tokens: 100, messages: [{ role: 'user', content: 'too dear' }] })
      .catch((e: { status?: number }) => expect(e.status).toBe(429)),
    (async () => {
      const res = await fetch(`${gw.url}/prompt`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        // Two model calls: the first answer is not the JSON asked for, the second is.
        body: JSON.stringify({
          message: 'Answer [[1> json-invalid]] [[2> json:{"answer":7}]]',
          options: {
            token: carol,
            model: SONNET,
            outputFormat: { type: 'json_schema', schema: { type: 'object', properties: { answer: { type: 'number' } } } },
          },
        }),
      });
      expect(res.status).toBe(200);
      await res.json();
    })(),
  ]);
  // The runs two at a time: the developer's tier (hobby) runs two at once.
  const q = await incubate(gw.url, {
    message: 'Report [[words:4]]',
    idempotencyKey: 'console-vessel',
    options: { token: dave, model: SONNET },
    callback: { url: rx.url },
  });
  vesselId = q.vesselId;
  const ws = await connectWs(gw.websocket!.url, erin);
  ws.send({ type: 'session.start', options: { model: HAIKU } });
  sessionId = String((await ws.next((f) => f.type === 'session')).sessionId);
  ws.send({ type: 'user', message: 'Hello [[words:6]]' });
  expect((await ws.untilResult()).at(-1)).toMatchObject({ type: 'result', subtype: 'success' });
  await ws.close();
  await pollUntil(
    () => webhookOf(vesselId),
    (w) => w.webhook?.status === 'failed' && w.webhook.attempts.length === 2,
    { timeoutMs: 60_000, what: 'two failed attempts' },
  );
  await drained(gw, { quietMs: 300 });

  if (!CHROMIUM) return;
  mkdirSync(ARTIFACTS, { recursive: true });
  browser = await chromium.launch({ executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS });
  // A laptop's screen.
  const context = await browser.newContext({ viewport: { width: 1366, height: 860 }, timezoneId: 'UTC', locale: 'en-GB' });
  // vitest's transform may name the functions given to page.evaluate with a __name helper.
  await context.addInitScript({ content: 'globalThis.__name = (f) => f;' });
  page = await context.newPage();
  page.on('console', (m) => pageLog.push(`[${m.type()}] ${m.text()}`));
  page.on('pageerror', (e) => pageLog.push(`[pageerror] ${e.message}`));
  page.on('request', (r) => requested.push(r.url()));
}, 180_000);

afterAll(async () => {
  await browser?.close();
  await konsole?.close();
  await receivers.closeAll();
  await gw?.stop();
});

/** Opens a view (`spend?project=P`) in a freshly loaded page and waits until it is drawn. */
async function open(hash: string): Promise<void> {
  await page.goto('about:blank');
  await page.goto(`${konsole.url}#/${hash}`);
  await page.waitForFunction((h) => document.body.dataset.ready === '1' && location.hash === `#/${h}`, hash);
  const error = await page.locator('main .error').allTextContents();
  expect(error, pageLog.join('\n')).toEqual([]);
}

const shot = (name: string) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`), fullPage: true });
const microsOf = async (selector: string) => Number(await page.locator(selector).first().getAttribute('data-micros'));

describe('the console server', () => {
  it('answers only at its own address, and takes its one write only as JSON from its own page', async () => {
    expect(new URL(konsole.url).hostname).toBe('127.0.0.1');
    const url = `${konsole.url}api/projects`;
    expect((await fetch(url)).status).toBe(200);
    // A DNS name rebound to 127.0.0.1 carries its own Host (which fetch does not let a caller set).
    const rebound = await new Promise<number | undefined>((done, fail) =>
      request(url, { headers: { host: 'evil.example:80' } }, (res) => done(res.resume().statusCode))
        .on('error', fail)
        .end(),
    );
    expect(rebound).toBe(421);
    const redeliver = `${konsole.url}api/vessel/redeliver?id=${vesselId}`;
    // A form another site's page could post without a preflight, and a JSON post from another origin.
    expect((await fetch(redeliver, { method: 'POST', headers: { 'content-type': 'text/plain' }, body: '{}' })).status).toBe(403);
    const foreign = await fetch(redeliver, { method: 'POST', headers: { 'content-type': 'application/json', origin: 'https://evil.example' }, body: '{}' });
    expect(foreign.status).toBe(403);
    expect((await webhookOf(vesselId)).webhook?.attempts.every((a) => a.round === 1)).toBe(true);
    expect((await fetch(`${konsole.url}../package.json`)).status).toBe(404);
    // A small page: its files and the charting library, well under 100 KB together.
    const assets = await Promise.all(['', 'app.js', 'style.css', 'vendor/uPlot.iife.min.js', 'vendor/uPlot.min.css'].map((f) => fetch(`${konsole.url}${f}`)));
    expect(assets.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect((await Promise.all(assets.map((r) => r.arrayBuffer()))).reduce((n, b) => n + b.byteLength, 0)).toBeLessThan(100_000);
    const bad = await fetch(`${konsole.url}api/vessels?project=${gw.projectId}&status=DONE`);
    expect([bad.status, ((await bad.json()) as { error: string }).error]).toEqual([400, expect.stringMatching(/^status must be one of PENDING/)]);
  });

  it('is what `gateway console` starts (a command of one word, like `activity`)', async () => {
    let out = '';
    const write = process.stdout.write;
    process.stdout.write = ((chunk: string) => {
      out += chunk;
      return true;
    }) as typeof process.stdout.write;
    try {
      expect(await main(['console', '--help'])).toBe(0);
    } finally {
      process.stdout.write = write;
    }
    expect(out).toContain('gateway console [--port N]');
  });
});

describe.skipIf(!CHROMIUM)(`the console in Chromium${SKIP_REASON}`, () => {
  it('spend: the totals equal the ledger to the µ$, and the charts hold the activity, hour by hour and model by model', async () => {
    const all = Object.values(users);
    const used = await Promise.all(all.map((u) => ledger(u)));
    const ai = used.reduce((n, u) => n + u.ai, 0);
    expect(ai).toBeGreaterThan(0);
    expect((await ledger(users.broke)).ai).toBe(0);

    await open(`spend?project=${gw.projectId}`);
    expect(await microsOf('#total-ai [data-micros]')).toBe(ai);
    expect(await page.locator('#total-refusals .value').textContent()).toBe('1');

    const rows = await readActivity(gw.projectId, started, new Date(Date.now() + 60_000));
    const charts = await page.evaluate(() => {
      const c = (window as unknown as { __console: { charts: Record<string, { data: number[][]; series: { label?: string }[] }> } }).__console.charts;
      return Object.fromEntries(Object.entries(c).map(([k, u]) => [k, { labels: u.series.slice(1).map((s) => s.label), data: u.data }]));
    });
    // One series per model, each summing to that model's activity; the x axis is the span's hours.
    const byModel = Object.fromEntries(
      groupActivity(rows, 'model')
        .filter((g) => g.aiMicros > 0)
        .map((g) => [g.key, g.aiMicros]),
    );
    expect(Object.keys(byModel).sort()).toEqual([HAIKU, SONNET]);
    const models = charts.models!;
    expect(Object.fromEntries(models.labels.map((label, i) => [label, models.data[i + 1]!.reduce((a, b) => a + b, 0)]))).toEqual(byModel);
    const hours = [...new Set(rows.map((r) => Date.parse(r.hour) / 1000))];
    for (const h of hours) expect(models.data[0]).toContain(h);
    expect(models.data[0]!.length).toBeGreaterThanOrEqual(24);
    // The points sit at the hours the activity has: each hour's sum across models is that hour's spend.
    for (const g of groupActivity(rows, 'hour')) {
      const i = models.data[0]!.indexOf(Date.parse(g.key) / 1000);
      expect(models.data.slice(1).reduce((n, s) => n + s[i]!, 0)).toBe(g.aiMicros);
    }
    expect(charts.projects!.labels).toEqual([gw.projectId]);
    expect(charts.projects!.data[1]!.reduce((a, b) => a + b, 0)).toBe(ai);
    const calls = charts.calls!;
    expect(calls.labels).toEqual(['calls', 'errors', 'refusals']);
    expect(calls.data.slice(1).map((s) => s.reduce((a, b) => a + b, 0))).toEqual([totalActivity(rows).requests, 0, 1]);
    // Drawn: each chart's canvas has a size and painted pixels.
    for (const name of ['models', 'projects', 'calls']) {
      const painted = await page.evaluate((n) => {
        const canvas = document.querySelector(`#chart-${n} canvas`) as HTMLCanvasElement;
        const px = canvas.getContext('2d')!.getImageData(0, 0, canvas.width, canvas.height).data;
        let count = 0;
        for (let i = 3; i < px.length; i += 4) if (px[i]! > 0) count++;
        return { width: canvas.width, height: canvas.height, count };
      }, name);
      expect(painted.width, name).toBeGreaterThan(300);
      expect(painted.count, name).toBeGreaterThan(500);
    }
    // By model, the table: the same figures.
    for (const [model, micros] of Object.entries(byModel)) expect(await microsOf(`tr[data-model="${model}"] [data-micros]`)).toBe(micros);
    await shot('spend');
  });

  it('users: each top user with their spend and their current day window, equal to the ledger; one user’s page', async () => {
    await open(`users?project=${gw.projectId}`);
    for (const u of [users.alice, users.bob, users.carol, users.dave, users.erin]) {
      const { ai } = await ledger(u);
      expect(await microsOf(`tr[data-user="${u}"] td:nth-child(2) [data-micros]`), u).toBe(ai);
      expect(await microsOf(`tr[data-user="${u}"] [data-window="day"] [data-micros]`), u).toBe(ai);
    }
    const spent = await Promise.all(Object.values(users).map(async (u) => [u, (await ledger(u)).ai] as const));
    const top = spent.reduce((a, b) => (b[1] > a[1] ? b : a));
    expect(await page.locator('tr[data-user]').first().getAttribute('data-user')).toBe(top[0]);
    await shot('users');

    await page.locator(`tr[data-user="${users.alice}"] a`).click();
    await page.waitForFunction(() => document.body.dataset.ready === '1' && document.body.dataset.page === 'user');
    const alice = await ledger(users.alice);
    expect(await microsOf('tr[data-window="day"] td:nth-child(3) [data-micros]')).toBe(alice.ai);
    expect(await microsOf('tr[data-window="day"] td:nth-child(4) [data-micros]')).toBe(0);
    expect(await microsOf('#total-ai [data-micros]')).toBe(alice.ai);
    expect(await page.locator('#total-requests .value').textContent()).toBe('3');
    expect(await page.locator('.badge.active').count()).toBe(1);
    await shot('user');
  });

  it('live runs: a running /prompt run holds a lease of the tier, shown with its user', async () => {
    const frank = await gw.token({ user: 'frank', budget: BUDGET });
    const running = fetch(`${gw.url}/prompt`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ message: 'Slow [[latency:4000]] [[words:3]]', options: { token: frank, model: SONNET } }),
    });
    // The view draws itself again every 2 s: the run appears without a reload.
    await open(`runs?project=${gw.projectId}`);
    await page.waitForFunction(() => document.querySelectorAll('tr[data-run]').length === 1, undefined, { timeout: 10_000 });
    const section = page.locator(`[data-developer="${gw.developerId}"]`);
    expect(await section.locator('.live').textContent()).toMatch(/^1 of 2 concurrent runs/);
    expect(await section.locator('tr[data-run] td:nth-child(2)').textContent()).toBe('frank');
    // And again 2 s later, the run older.
    await page.waitForFunction(() => document.querySelector('tr[data-run] td:nth-child(3)')?.textContent !== '0 s', undefined, { timeout: 5_000 });
    await shot('runs');
    expect((await running).status).toBe(200);
  });

  it('vessels: filtered by status, the detail with the output and every webhook attempt, and "Redeliver" starts a round', async () => {
    expect((await listVessels({ projectId: gw.projectId })).map((v) => [v.vesselId, v.status])).toEqual([[vesselId, 'COMPLETED']]);
    await open(`vessels?project=${gw.projectId}&status=FAILED`);
    expect(await page.locator('tr[data-vessel]').count()).toBe(0);
    await page.locator('#status').selectOption('COMPLETED');
    await page.waitForFunction(() => document.body.dataset.ready === '1' && location.hash.includes('status=COMPLETED'));
    expect(await page.locator('tr[data-vessel] td:nth-child(3)').textContent()).toBe('COMPLETED');
    await shot('vessels');

    await page.locator(`tr[data-vessel="${vesselId}"] a`).click();
    await page.waitForFunction(() => document.body.dataset.ready === '1' && document.body.dataset.page === 'vessel');
    expect(await page.locator('#output').textContent()).toBe('word1 word2 word3 word4');
    const attempts = () => page.locator('tr[data-round]').evaluateAll((trs) => trs.map((tr) => [tr.getAttribute('data-round'), tr.children[3]!.textContent]));
    expect(await attempts()).toEqual([
      ['1', '500'],
      ['1', '500'],
    ]);
    await page.locator('#redeliver').click();
    await page.waitForFunction(() => document.getElementById('redeliver-result')?.textContent?.startsWith('Round 2 started'));
    // The page follows the round: its first attempt appears.
    await page.waitForFunction(() => document.querySelectorAll('tr[data-round="2"]').length > 0, undefined, { timeout: 20_000 });
    expect((await webhookOf(vesselId)).webhook?.attempts.some((a) => a.round === 2 && a.statusCode === 500)).toBe(true);
    await page.waitForFunction(() => document.querySelectorAll('tr[data-round="2"]').length === 2 && document.body.dataset.ready === '1', undefined, {
      timeout: 20_000,
    });
    await shot('vessel');
  });

  it('sessions: the /ws session, its user, state and messages', async () => {
    expect(await listSessions({ projectId: gw.projectId })).toEqual([
      { sessionId, userId: users.erin, state: 'idle', messages: 2, createdAt: expect.any(String) },
    ]);
    await open(`sessions?project=${gw.projectId}`);
    const row = page.locator(`tr[data-session="${sessionId}"]`);
    expect(await row.locator('td').allTextContents()).toEqual([sessionId, users.erin, 'idle', '2', expect.any(String)]);
    await shot('sessions');
  });

  it('asked for nothing but the console’s own address (no CDN: it works offline)', () => {
    expect(requested.length).toBeGreaterThan(20);
    expect(requested.filter((u) => u !== 'about:blank' && !u.startsWith(konsole.url))).toEqual([]);
  });
});
