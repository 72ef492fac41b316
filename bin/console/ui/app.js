/**
 * The console's page (docs/console.md): one module, no framework, no build step. Each view reads one route of the
 * console's JSON API (bin/console/api.ts) and draws it; the address's hash holds the view and its parameters
 * (`#/vessels?project=P&status=FAILED`), so every view can be linked and reloaded.
 *
 * For the tests and whoever scripts the page, `window.__console` holds what the view drew: its data as the API gave
 * it and its charts (uPlot instances, whose `.data` are the points drawn); `body[data-ready]` is set once it is drawn.
 */

/** uPlot's minified build, loaded by index.html before this module. */
const uPlot = window.uPlot;
const state = { projects: [], charts: {}, data: undefined, timer: undefined, following: 0 };
window.__console = state;

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c', '#0891b2', '#ca8a04', '#db2777', '#4b5563', '#65a30d'];
const STATUSES = ['PENDING', 'QUEUED', 'EXECUTING', 'COMPLETED', 'FAILED', 'CANCELED'];

/** An element: `h('a', { href }, 'text', child…)`; `on…` attributes are listeners; false and null children are skipped. */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (v !== undefined && v !== null && v !== false) el.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children.flat(Infinity)) if (c !== undefined && c !== null && c !== false) el.append(typeof c === 'object' ? c : String(c));
  return el;
}

const num = (n) => Number(n).toLocaleString('en-US');
/** Microdollars exactly as the ledger holds them, with dollars beside them; `data-micros` is the exact integer. */
const micros = (n) => h('span', { class: 'money', 'data-micros': n }, `${num(n)} µ$`, h('small', {}, ` $${(n / 1e6).toFixed(n < 1e4 ? 6 : 2)}`));
const time = (iso) => (iso ? new Date(iso).toLocaleString('en-GB', { dateStyle: 'short', timeStyle: 'medium' }) : '—');
const link = (view, params, text) => h('a', { href: hashOf(view, params) }, text);
const badge = (text, kind = text) => h('span', { class: `badge ${String(kind).toLowerCase()}` }, text);

function hashOf(view, params = {}) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== ''));
  return `#/${view}${q.size ? `?${q}` : ''}`;
}

function route() {
  const [path, query = ''] = location.hash.replace(/^#\/?/, '').split('?');
  return { view: path || 'spend', params: Object.fromEntries(new URLSearchParams(query)) };
}

/** GET (or POST with a JSON body) one of the API's routes; its `{error}` is thrown as the message. */
async function api(path, params = {}, post = false) {
  const q = new URLSearchParams(Object.entries(params).filter(([, v]) => v !== undefined && v !== ''));
  const init = post ? { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' } : undefined;
  const res = await fetch(`/api/${path}?${q}`, init);
  const body = await res.json();
  if (!res.ok) throw new Error(body.error ?? `${res.status}`);
  return body;
}

// ---------------------------------------------------------------------------------------------------------------
// Charts
// ---------------------------------------------------------------------------------------------------------------

/** How to draw each chart section made for the view being shown. */
const drawers = new WeakMap();

/** A time chart of one series per key of `byKey` (values per bucket), or a note when there is none. */
function chart(name, title, buckets, byKey, format = num) {
  const keys = Object.keys(byKey);
  const box = h('section', { class: 'chart', id: `chart-${name}` }, h('h3', {}, title));
  if (keys.length === 0) {
    box.append(h('p', { class: 'muted' }, 'Nothing recorded in this span.'));
    return box;
  }
  const data = [buckets.map((b) => Date.parse(b) / 1000), ...keys.map((k) => byKey[k])];
  const opts = {
    width: 560,
    height: 240,
    scales: { x: { time: true } },
    series: [
      {},
      ...keys.map((k, i) => ({
        label: k,
        stroke: COLORS[i % COLORS.length],
        width: 2,
        points: { show: true, size: 5 },
        value: (_u, v) => (v == null ? '—' : format(v)),
      })),
    ],
    axes: [{}, { size: 70, values: (_u, ticks) => ticks.map((t) => format(t)) }],
  };
  // Drawn by show() once the section is in the page, at the width it has there.
  drawers.set(box, () => {
    opts.width = Math.max(320, box.clientWidth - 16);
    state.charts[name] = new uPlot(opts, data, box);
  });
  return box;
}

const cards = (...items) =>
  h(
    'div',
    { class: 'cards' },
    items.map(([label, value, id]) => h('div', { class: 'card', id }, h('div', { class: 'label' }, label), h('div', { class: 'value' }, value))),
  );

function table(headers, rows) {
  return h(
    'table',
    {},
    h(
      'thead',
      {},
      h(
        'tr',
        {},
        headers.map((t) => h('th', {}, t)),
      ),
    ),
    h('tbody', {}, rows.length ? rows : h('tr', {}, h('td', { colspan: headers.length, class: 'muted' }, 'None.'))),
  );
}

const countersRow = (label, c, attrs = {}) =>
  h(
    'tr',
    attrs,
    h('td', {}, label),
    h('td', { class: 'num' }, micros(c.aiMicros)),
    h('td', { class: 'num' }, num(c.requests)),
    h('td', { class: 'num' }, `${num(c.inputTokens)} / ${num(c.outputTokens)}`),
    h('td', { class: 'num' }, num(c.cacheReadTokens)),
    h('td', { class: 'num' }, num(c.computeSeconds)),
    h('td', { class: 'num' }, num(c.errors)),
    h('td', { class: 'num' }, num(c.refusals)),
  );
const COUNTER_HEADERS = ['AI', 'calls', 'tokens in / out', 'cache read', 'compute s', 'errors', 'refusals'];

const totals = (t) =>
  cards(
    ['AI spend', micros(t.aiMicros), 'total-ai'],
    ['Model calls', num(t.requests), 'total-requests'],
    ['Errors', num(t.errors), 'total-errors'],
    ['Refusals', num(t.refusals), 'total-refusals'],
    ['Compute', `${num(t.computeSeconds)} s`, 'total-compute'],
  );

function windowsText(windows) {
  if (!windows.length) return h('span', { class: 'muted' }, 'no current window');
  return windows.map((w) =>
    h(
      'div',
      { class: 'window', 'data-window': w.window },
      `${w.window}: `,
      micros(w.used.ai),
      ` used, ${num(w.reserved.ai)} held · ${num(w.used.compute)} s compute`,
    ),
  );
}

// ---------------------------------------------------------------------------------------------------------------
// Views: each returns the elements to show; `params` are the hash's, with the header's selections filled in.
// ---------------------------------------------------------------------------------------------------------------

const VIEWS = {
  async spend(p) {
    const d = await api('spend', { project: p.project, since: p.since, step: p.step });
    state.data = d;
    return [
      h('h2', {}, `Spend — ${p.project || 'all projects'}`, h('small', { class: 'muted' }, ` ${time(d.since)} → ${time(d.until)}, by ${d.step}`)),
      totals(d.total),
      h(
        'div',
        { class: 'charts' },
        chart('models', 'AI µ$ by model', d.buckets, d.aiByModel, num),
        chart('projects', 'AI µ$ by project', d.buckets, d.aiByProject, num),
      ),
      chart('calls', 'Model calls, errors and refusals', d.buckets, { calls: d.requests, errors: d.errors, refusals: d.refusals }),
      h('h3', {}, 'By model'),
      table(
        ['model', ...COUNTER_HEADERS],
        d.models.map((m) => countersRow(m.key === '-' ? 'compute (no model)' : m.key, m, { 'data-model': m.key })),
      ),
      h('h3', {}, 'By project'),
      table(
        ['project', ...COUNTER_HEADERS],
        d.projects.map((m) => countersRow(link('users', { project: m.projectId, since: p.since }, m.projectId), m, { 'data-project': m.projectId })),
      ),
    ];
  },

  async users(p) {
    const d = await api('users', { project: p.project, since: p.since });
    state.data = d;
    return [
      h('h2', {}, `Top users — ${d.projectId}`, h('small', { class: 'muted' }, ` by AI spend since ${time(d.since)}`)),
      table(
        ['user', 'AI (span)', 'calls', 'errors', 'refusals', 'current budget windows (used, held)', ''],
        d.users.map((u) =>
          h(
            'tr',
            { 'data-user': u.userId },
            h('td', {}, link('user', { project: d.projectId, user: u.userId, since: p.since, step: p.step }, u.userId)),
            h('td', { class: 'num' }, micros(u.aiMicros)),
            h('td', { class: 'num' }, num(u.requests)),
            h('td', { class: 'num' }, num(u.errors)),
            h('td', { class: 'num' }, num(u.refusals)),
            h('td', {}, windowsText(u.windows)),
            h('td', {}, u.blocked && badge('blocked')),
          ),
        ),
      ),
      h('p', { class: 'muted' }, "A user's budget is in their tokens, not stored: the windows show what is used and held in each current window."),
    ];
  },

  async user(p) {
    const d = await api('user', { project: p.project, user: p.user, since: p.since, step: p.step });
    state.data = d;
    return [
      h('h2', {}, `User ${d.userId}`, h('small', { class: 'muted' }, ` of ${d.projectId} `), d.blocked ? badge('blocked') : badge('active')),
      h('h3', {}, 'Current budget windows'),
      table(
        ['window', 'since', 'AI used', 'AI held', 'compute used', 'compute held'],
        d.windows.map((w) =>
          h(
            'tr',
            { 'data-window': w.window },
            h('td', {}, w.window),
            h('td', {}, time(w.windowStart)),
            h('td', { class: 'num' }, micros(w.used.ai)),
            h('td', { class: 'num' }, micros(w.reserved.ai)),
            h('td', { class: 'num' }, `${num(w.used.compute)} s`),
            h('td', { class: 'num' }, `${num(w.reserved.compute)} s`),
          ),
        ),
      ),
      h('h3', {}, `Activity since ${time(d.since)}`),
      totals(d.total),
      chart('user', 'AI µ$ by model', d.buckets, d.aiByModel, num),
      table(
        ['model', ...COUNTER_HEADERS],
        d.models.map((m) => countersRow(m.key === '-' ? 'compute (no model)' : m.key, m, { 'data-model': m.key })),
      ),
    ];
  },

  async runs(p) {
    const d = await api('runs', { project: p.project });
    state.data = d;
    return [
      h('h2', {}, 'Live runs', h('small', { class: 'muted' }, ' leases held against each developer’s tier')),
      d.developers.map((dev) =>
        h(
          'section',
          { class: 'developer', 'data-developer': dev.developerId },
          h('h3', {}, dev.developerId, ' ', badge(dev.tier, 'tier')),
          h('div', { class: 'meter' }, h('div', { style: `width:${Math.min(100, (100 * dev.leases.length) / dev.maxConcurrency)}%` })),
          h(
            'p',
            { class: 'live' },
            `${dev.leases.length} of ${dev.maxConcurrency} concurrent runs · compute this month ${num(dev.computeUsedThisMonth)} s used, ${num(dev.computeAvailable)} s available · projects ${dev.projects.join(', ')}`,
          ),
          table(
            ['run (prompt, vessel or session id)', 'user', 'running for'],
            dev.leases.map((l) =>
              h(
                'tr',
                { 'data-run': l.sessionId },
                h('td', {}, l.sessionId),
                h('td', {}, l.userId),
                h('td', { class: 'num' }, `${Math.round(l.ageMs / 1000)} s`),
              ),
            ),
          ),
        ),
      ),
    ];
  },

  async vessels(p) {
    const d = await api('vessels', { project: p.project, status: p.status });
    state.data = d;
    const filter = h(
      'select',
      { id: 'status', onchange: (e) => go('vessels', { ...p, status: e.target.value }) },
      h('option', { value: '' }, 'every status'),
      STATUSES.map((s) => h('option', { value: s, selected: s === p.status }, s)),
    );
    return [
      h('h2', {}, `Vessels — ${d.projectId} `, h('label', {}, 'status ', filter)),
      table(
        ['vessel', 'user', 'status', 'created', 'started', 'ended'],
        d.vessels.map((v) =>
          h(
            'tr',
            { 'data-vessel': v.vesselId },
            h('td', {}, link('vessel', { id: v.vesselId }, v.vesselId)),
            h('td', {}, v.userId),
            h('td', {}, badge(v.status)),
            h('td', {}, time(v.createdAt)),
            h('td', {}, time(v.startedAt)),
            h('td', {}, time(v.completedAt)),
          ),
        ),
      ),
    ];
  },

  async vessel(p) {
    const v = await api('vessel', { id: p.id });
    state.data = v;
    const w = v.webhook;
    const out = v.output;
    const message = h('p', { id: 'redeliver-result', class: 'muted' });
    const redeliver = h(
      'button',
      {
        id: 'redeliver',
        disabled: !(v.callback && v.isCompleted),
        onclick: async () => {
          redeliver.disabled = true;
          try {
            const r = await api('vessel/redeliver', { id: v.vesselId }, true);
            message.textContent = `Round ${r.round} started${r.handedOff ? '' : ' (the reconciler hands it off within minutes)'}.`;
            follow();
          } catch (err) {
            message.textContent = err.message;
            redeliver.disabled = false;
          }
        },
      },
      'Redeliver',
    );
    return [
      h('h2', {}, `Vessel ${v.vesselId} `, badge(v.status)),
      h(
        'dl',
        {},
        [
          ['project', link('vessels', { project: v.projectId }, v.projectId)],
          ['user', link('user', { project: v.projectId, user: v.userId }, v.userId)],
          ['created', time(v.createdAt)],
          ['scheduled for', time(v.scheduledFor)],
          ['started', time(v.startedAt)],
          ['ended', time(v.completedAt)],
          ['message', v.message],
        ].map(([k, val]) => [h('dt', {}, k), h('dd', {}, val)]),
      ),
      h('h3', {}, 'Output'),
      out
        ? [
            h(
              'p',
              {},
              badge(out.result.subtype, out.success ? 'completed' : 'failed'),
              ' ',
              micros(out.result.total_cost_microdollars),
              ` · ${num(out.result.usage.input_tokens)} in / ${num(out.result.usage.output_tokens)} out tokens · ${out.result.num_turns} turns · ${out.result.duration_secs} s`,
            ),
            h('pre', { id: 'output' }, out.text),
          ]
        : h('p', { class: 'muted' }, 'Not ended yet.'),
      h('h3', {}, 'Webhook'),
      v.callback
        ? [
            h(
              'p',
              {},
              `${v.callback.url}${v.callback.signed ? ' (signed)' : ''} · delivery `,
              w ? badge(w.status, w.status === 'delivered' ? 'completed' : w.status === 'failed' ? 'failed' : 'pending') : 'not started',
              w?.failure ? ` (${w.failure})` : '',
              w?.nextAttemptAt ? ` · next attempt ${time(w.nextAttemptAt)}` : '',
            ),
            table(
              ['round', 'attempt', 'sent', 'answer', 'took'],
              (w?.attempts ?? []).map((a) =>
                h(
                  'tr',
                  { 'data-round': a.round, 'data-attempt': a.attempt },
                  h('td', {}, a.round),
                  h('td', {}, a.attempt),
                  h('td', {}, time(a.time)),
                  h('td', {}, a.statusCode ?? a.error),
                  h('td', { class: 'num' }, `${a.durationMs} ms`),
                ),
              ),
            ),
            h('p', {}, redeliver, ' a new round of attempts, same webhook-id and body, starting now'),
            message,
          ]
        : h('p', { class: 'muted' }, 'No callback.'),
    ];
  },

  async sessions(p) {
    const d = await api('sessions', { project: p.project });
    state.data = d;
    return [
      h('h2', {}, `/ws sessions — ${d.projectId}`),
      table(
        ['session', 'user', 'state', 'messages', 'created'],
        d.sessions.map((s) =>
          h(
            'tr',
            { 'data-session': s.sessionId },
            h('td', {}, s.sessionId),
            h('td', {}, link('user', { project: d.projectId, user: s.userId }, s.userId)),
            h('td', {}, badge(s.state)),
            h('td', { class: 'num' }, num(s.messages)),
            h('td', {}, time(s.createdAt)),
          ),
        ),
      ),
    ];
  },
};

/** After a redelivery: the vessel's view is drawn again every second while its delivery is pending (a minute at most). */
function follow() {
  state.following = Date.now() + 60_000;
  show();
}

/** Views drawn again while shown: the live runs every 2 s, a vessel whose redelivery is followed every second. */
function refreshIn(view) {
  if (view === 'runs') return 2000;
  if (view === 'vessel' && Date.now() < (state.following ?? 0) && state.data?.webhook?.status === 'pending') return 1000;
  return undefined;
}

// ---------------------------------------------------------------------------------------------------------------
// The header and navigation
// ---------------------------------------------------------------------------------------------------------------

const header = { project: document.getElementById('project'), since: document.getElementById('since'), step: document.getElementById('step') };
/** Views that need one project: with "all projects" selected they show the first. */
const ONE_PROJECT = new Set(['users', 'user', 'vessels', 'sessions']);

function go(view, params) {
  location.hash = hashOf(view, params);
}

/** Draws the view the hash names. A later call supersedes an earlier one still loading. */
let drawing = 0;
async function show() {
  const mine = ++drawing;
  clearTimeout(state.timer);
  const { view, params } = route();
  const p = { since: header.since.value, step: header.step.value, project: header.project.value, ...params };
  if (ONE_PROJECT.has(view) && !p.project) p.project = state.projects[0]?.projectId;
  if (params.project !== undefined) header.project.value = params.project;
  if (params.since) header.since.value = params.since;
  if (params.step) header.step.value = params.step;
  for (const a of document.querySelectorAll('[data-nav]')) a.classList.toggle('active', a.dataset.nav === view);
  document.body.dataset.ready = '0';
  const main = document.getElementById('main');
  let content;
  try {
    if (!VIEWS[view]) throw new Error(`No view "${view}"`);
    if (ONE_PROJECT.has(view) && !p.project) throw new Error('No project yet: create one with "gateway project create".');
    content = await VIEWS[view](p);
  } catch (err) {
    content = h('p', { class: 'error' }, err.message);
  }
  if (mine !== drawing) return;
  for (const c of Object.values(state.charts)) c.destroy();
  state.charts = {};
  main.replaceChildren(...[content].flat(3).filter(Boolean));
  for (const box of main.querySelectorAll('.chart')) drawers.get(box)?.();
  document.body.dataset.page = view;
  document.body.dataset.ready = '1';
  const again = refreshIn(view);
  if (again) state.timer = setTimeout(show, again);
}

async function start() {
  const d = await api('projects');
  state.projects = d.projects;
  document.getElementById('target').textContent = d.target;
  header.project.replaceChildren(h('option', { value: '' }, 'all projects'), ...d.projects.map((p) => h('option', { value: p.projectId }, p.projectId)));
  const reselect = () => {
    const { view, params } = route();
    const base = ['user', 'vessel'].includes(view) ? (view === 'user' ? 'users' : 'vessels') : view;
    go(base, { ...params, id: undefined, user: undefined, project: header.project.value, since: header.since.value, step: header.step.value });
  };
  for (const el of Object.values(header)) el.addEventListener('change', reselect);
  window.addEventListener('hashchange', show);
  await show();
}

start();
